"""Wrong answers to lab 08's exercises (fp8 in miniature): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab08.
"""

WRONG = {
    1: [
        ("takes the largest value instead of the largest magnitude", """
def exercise1(x, fmt):
    import math
    amax = float(np.max(np.asarray(x, dtype=np.float64)))
    return 2.0 ** math.floor(math.log2(fpsim.get_format(fmt).max / amax))
"""),
        ("rounds log2 to nearest instead of down: amax x s may pass max", """
def exercise1(x, fmt):
    amax = float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
    return 2.0 ** round(np.log2(fpsim.get_format(fmt).max / amax))
"""),
        ("max / amax, not rounded to a power of two", """
def exercise1(x, fmt):
    amax = float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
    return fpsim.get_format(fmt).max / amax
"""),
        ("e4m3 with IEEE rules: max 240 instead of 448", """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    top = 240.0 if f.name == "float8_e4m3fn" else f.max
    amax = float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
    return 2.0 ** math.floor(math.log2(top / amax))
"""),
        ("hands it to the library's per_tensor_scale", """
def exercise1(x, fmt):
    from fpsim.labs.fp8 import per_tensor_scale
    return per_tensor_scale(x, fmt)
"""),
    ],
    2: [
        ("a cast without saturation: 1000 becomes NaN in e4m3", """
def exercise2(values, fmt, scale):
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    back = fpsim.cast(v * scale, fmt).astype(np.float32)
    return float(np.mean((back != 0) & np.isfinite(back)))
"""),
        ("counts the zeros among the values", """
def exercise2(values, fmt, scale):
    v = np.asarray(values, dtype=np.float64).ravel()
    back = fpsim.cast(v * scale, fmt, saturate=True).astype(np.float32)
    return float(np.mean((back != 0) & np.isfinite(back)))
"""),
        ("forgets to multiply by the scale", """
def exercise2(values, fmt, scale):
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    back = fpsim.cast(v, fmt, saturate=True).astype(np.float32)
    return float(np.mean((back != 0) & np.isfinite(back)))
"""),
        ("counts values clamped to max as lost", """
def exercise2(values, fmt, scale):
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    back = np.abs(fpsim.cast(v * scale, fmt, saturate=True).astype(np.float32))
    return float(np.mean((back != 0) & (back < fpsim.get_format(fmt).max)))
"""),
        ("hands the cast to the library's fp8_round_trip", """
def exercise2(values, fmt, scale):
    from fpsim.labs.fp8 import fp8_round_trip
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    return float(np.mean(fp8_round_trip(v, fmt, scale) != 0))
"""),
    ],
    3: [
        ("the last step's amax instead of the largest in the history", """
def exercise3(history, fmt, margin=0):
    import math
    amax = float(history[-1])
    if amax == 0:
        return 1.0
    return 2.0 ** (math.floor(math.log2(fpsim.get_format(fmt).max / amax)) - margin)
"""),
        ("the mean amax of the history", """
def exercise3(history, fmt, margin=0):
    import math
    amax = float(np.mean(history))
    if amax == 0:
        return 1.0
    return 2.0 ** (math.floor(math.log2(fpsim.get_format(fmt).max / amax)) - margin)
"""),
        ("adds the margin instead of backing off by it", """
def exercise3(history, fmt, margin=0):
    import math
    amax = float(max(history))
    if amax == 0:
        return 1.0
    return 2.0 ** (math.floor(math.log2(fpsim.get_format(fmt).max / amax)) + margin)
"""),
        ("divides by zero when nothing has been seen yet", """
def exercise3(history, fmt, margin=0):
    import math
    amax = float(max(history))
    return 2.0 ** (math.floor(math.log2(fpsim.get_format(fmt).max / amax)) - margin)
"""),
        ("hands it to fpsim.lowp.compute_scale", """
def exercise3(history, fmt, margin=0):
    from fpsim.lowp import compute_scale
    return float(compute_scale(max(history), fmt, margin))
"""),
    ],
}
