"""Wrong answers to lab 17's exercises (TF32): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab17.
"""

WRONG = {
    1: [
        ("truncates: the instruction's own reading, not cvt.rna's rounding", '''
def exercise1(x):
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
'''),
        ("ties to even instead of away from zero", '''
def exercise1(x):
    bits = x.view(np.uint32)
    with np.errstate(over="ignore"):
        bits = bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))
    out = (bits & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), out, x)
'''),
        ("keeps 11 fraction bits (an off-by-one in the mask)", '''
def exercise1(x):
    with np.errstate(over="ignore"):
        bits = x.view(np.uint32) + np.uint32(0x800)
    out = (bits & np.uint32(0xFFFFF000)).view(np.float32)
    return np.where(np.isfinite(x), out, x)
'''),
        ("forgets NaN: 0x7FFFFFFF + 0x1000 carries into the sign bit", '''
def exercise1(x):
    with np.errstate(over="ignore"):
        bits = x.view(np.uint32) + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)
'''),
        ("goes through float16, which has 10 fraction bits but not float32's range", '''
def exercise1(x):
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)
'''),
        ("rounds the magnitude on the bits and puts the sign back with x < 0: -0.0 comes back as +0.0", '''
def exercise1(x):
    with np.errstate(over="ignore"):
        bits = np.abs(x).view(np.uint32) + np.uint32(0x1000)
    out = (bits & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), np.where(x < 0, -out, out), x)
'''),
        ("rounds in float64 and returns float64", '''
def exercise1(x):
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.trunc(m * 2**11 + np.sign(m) * 0.5) / 2**11, e)
'''),
    ],
    2: [
        ("measures the error in float32 arithmetic: the difference drowns in float32's rounding", '''
def exercise2(a, b, rounding="nearest_away"):
    ta, tb = to_tf32(a, rounding), to_tf32(b, rounding)
    return float(np.dot(ta, tb) - np.dot(a, b))
'''),
        ("rounds only a, not b", '''
def exercise2(a, b, rounding="nearest_away"):
    import math
    ta = to_tf32(a, rounding).astype(np.float64)
    return math.fsum(np.concatenate([ta * b.astype(np.float64), -(a.astype(np.float64) * b.astype(np.float64))]))
'''),
        ("always truncates, whatever rounding is asked", '''
def exercise2(a, b, rounding="nearest_away"):
    import math
    ta, tb = (to_tf32(v, "toward_zero").astype(np.float64) for v in (a, b))
    return math.fsum(np.concatenate([ta * tb, -(a.astype(np.float64) * b.astype(np.float64))]))
'''),
        ("ties to even for nearest", '''
def exercise2(a, b, rounding="nearest_away"):
    import math
    mode = "nearest" if rounding == "nearest_away" else rounding
    ta, tb = (to_tf32(v, mode).astype(np.float64) for v in (a, b))
    return math.fsum(np.concatenate([ta * tb, -(a.astype(np.float64) * b.astype(np.float64))]))
'''),
        ("the sign the wrong way round: exact minus TF32", '''
def exercise2(a, b, rounding="nearest_away"):
    import math
    ta, tb = (to_tf32(v, rounding).astype(np.float64) for v in (a, b))
    return -math.fsum(np.concatenate([ta * tb, -(a.astype(np.float64) * b.astype(np.float64))]))
'''),
        ("the relative error, not the error", '''
def exercise2(a, b, rounding="nearest_away"):
    import math
    ta, tb = (to_tf32(v, rounding).astype(np.float64) for v in (a, b))
    exact = math.fsum(a.astype(np.float64) * b.astype(np.float64))
    return math.fsum(np.concatenate([ta * tb, -(a.astype(np.float64) * b.astype(np.float64))])) / exact
'''),
    ],
}
