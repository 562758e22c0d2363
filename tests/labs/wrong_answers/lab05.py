"""Wrong answers to lab 05's exercises (gradient histograms per format): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab05.
"""

WRONG = {
    1: [
        ("the folklore threshold: everything below 6e-8 is flushed", """
def exercise1(values, fmt):
    v = np.abs(np.asarray(values, dtype=np.float64).ravel())
    v = v[np.isfinite(v) & (v != 0)]
    return float(np.mean(v < 6e-8))
"""),
        ("everything below the smallest subnormal is flushed", """
def exercise1(values, fmt):
    v = np.abs(np.asarray(values, dtype=np.float64).ravel())
    v = v[np.isfinite(v) & (v != 0)]
    return float(np.mean(v < fpsim.get_format(fmt).smallest_subnormal))
"""),
        ("strictly below half the smallest subnormal: the tie at 2^-25 is kept", """
def exercise1(values, fmt):
    v = np.abs(np.asarray(values, dtype=np.float64).ravel())
    v = v[np.isfinite(v) & (v != 0)]
    return float(np.mean(v < fpsim.get_format(fmt).smallest_subnormal / 2))
"""),
        ("divides by all values, zeros included", """
def exercise1(values, fmt):
    v = np.asarray(values, dtype=np.float32).ravel()
    stored = fpsim.cast(v, fmt).astype(np.float32)
    return float(np.mean((stored == 0) & (v != 0)))
"""),
        ("counts the subnormals as lost too", """
def exercise1(values, fmt):
    v = np.asarray(values, dtype=np.float32).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    stored = np.abs(fpsim.cast(v, fmt).astype(np.float32))
    return float(np.mean(stored < fpsim.get_format(fmt).tiny))
"""),
        ("lets fpsim.formats.survival.survival do the counting", """
def exercise1(values, fmt):
    from fpsim.formats.survival import survival
    return survival(values, fmt)["frac_flushed"]
"""),
    ],
    2: [
        ("ignores keep: asks for nothing flushed at all", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if s["flushed"] == 0:
            return k
    return None
"""),
        ("never checks for overflow", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
    return None
"""),
        ("returns the scale 2**k instead of k", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return 2.0**k
    return None
"""),
        ("keeps only normal numbers: counts subnormals as lost", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if s["normal"] >= keep * s["nonzero"]:
            return k
    return None
"""),
        ("reads the answer off fpsim.tools.audit.audit_arrays", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.tools.audit import audit_arrays
    r = audit_arrays({"g": values}, formats=(fmt,), keep=keep).overall.formats
    rng = next(iter(r.values())).scale_range
    return None if rng is None else max(rng[0], 0)
"""),
        ("searches k only up to 32", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 33):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
    return None
"""),
        ("range(40): never tries k = 40", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(40):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
    return None
"""),
        ("rounds the values into fmt first, then scales: what flushed stays flushed", """
def exercise2(values, fmt="float16", keep=0.999):
    v = np.asarray(values, dtype=np.float32).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    stored = fpsim.cast(v, fmt).astype(np.float64)
    for k in range(0, 41):
        scaled = fpsim.cast(stored * 2.0**k, fmt).astype(np.float64)
        if not np.all(np.isfinite(scaled)):
            return None
        if np.mean(scaled != 0) >= keep:
            return k
    return None
"""),
        ("tests 'enough kept' before 'overflow': returns a k at which a value already overflows", """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
        if s["overflow"]:
            return None
    return None
"""),
        ('calls a value overflowed when |v| * 2^k passes max, before rounding: 65,510 rounds to 65,504', """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    big = float(np.max(np.abs(np.asarray(values, np.float64))))
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if big * 2.0**k > fpsim.get_format(fmt).max:
            return None
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
    return None
"""),
        ('counts the zeros among the values as kept', """
def exercise2(values, fmt="float16", keep=0.999):
    from fpsim.formats.survival import survival
    n = np.asarray(values).size
    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None
        if n - s["flushed"] >= keep * n:
            return k
    return None
"""),
    ],
}
