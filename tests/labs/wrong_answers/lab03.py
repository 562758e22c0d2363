"""Wrong answers to lab 03's exercises ("Vanishing updates and master weights"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab03.
"""

WRONG = {
    1: [
        ("calls fpsim.ulp, which the exercise asks you to derive", """
def exercise1(w, fmt):
    return float(fpsim.ulp(w, fmt)) / 2
"""),
        ("the whole gap instead of half of it", """
def exercise1(w, fmt):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(w))
    return 2.0 ** (max(e - 1, f.emin) - f.mantissa_bits)
"""),
        ("off by one binade: frexp's exponent used as the binade", """
def exercise1(w, fmt):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(w))
    return 2.0 ** (max(e, f.emin) - f.mantissa_bits) / 2
"""),
        ("no floor at emin: the gap keeps shrinking below the smallest normal", """
def exercise1(w, fmt):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(w))
    return 2.0 ** (e - 1 - f.mantissa_bits) / 2
"""),
        ("counts the hidden bit: 2**-(mantissa_bits + 1) per binade", """
def exercise1(w, fmt):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(w))
    return 2.0 ** (max(e - 1, f.emin) - f.mantissa_bits - 1) / 2
"""),
        ("the binade from int(log2|w|), which truncates toward zero instead of rounding down", """
def exercise1(w, fmt):
    import math
    f = fpsim.get_format(fmt)
    return 2.0 ** (max(int(math.log2(abs(w))), f.emin) - f.mantissa_bits) / 2
"""),
        ("half the distance to numpy's next number up", """
def exercise1(w, fmt):
    v = np.asarray(w, dtype=np.float32).astype(fpsim.get_format(fmt).dtype)
    return float(np.abs(np.nextafter(v, v * 2 + 1).astype(np.float64) - v.astype(np.float64))) / 2
"""),
        ("always float16's mantissa, whatever the format", """
def exercise1(w, fmt):
    import math
    _, e = math.frexp(abs(w))
    return 2.0 ** (max(e - 1, -14) - 10) / 2
"""),
    ],
    2: [
        ("sums in float32 and rounds only at the end (that is a master copy)", """
def exercise2(w, update, steps, fmt):
    s = np.float32(w)
    for _ in range(steps):
        s = np.float32(s + np.float32(update))
    return float(fpsim.round_to(s, fmt))
"""),
        ("sums in float64 instead of float32", """
def exercise2(w, update, steps, fmt):
    w = float(fpsim.round_to(np.float64(w), fmt))
    for _ in range(steps):
        w = float(fpsim.round_to(np.float64(w) + update, fmt))
    return w
"""),
        ("stores the weight in float16 whatever the format", """
def exercise2(w, update, steps, fmt):
    w = fpsim.round_to(np.float32(w), "float16")
    for _ in range(steps):
        w = fpsim.round_to(np.float32(w) + np.float32(update), "float16")
    return float(w)
"""),
        ("never stores the starting weight in fmt: the first sum starts from w itself", """
def exercise2(w, update, steps, fmt):
    w = np.float32(w)
    for _ in range(steps):
        w = fpsim.round_to(np.float32(w) + np.float32(update), fmt)
    return float(w)
"""),
        ("rounds the update into fmt before adding it", """
def exercise2(w, update, steps, fmt):
    w = fpsim.round_to(np.float32(w), fmt)
    u = fpsim.round_to(np.float32(update), fmt)
    for _ in range(steps):
        w = fpsim.round_to(np.float32(w) + np.float32(u), fmt)
    return float(w)
"""),
        ("hands the loop to a library helper", """
def exercise2(w, update, steps, fmt):
    from fpsim.labs.bf16 import accumulate
    return float(accumulate(w, update, steps, fmt)[-1])
"""),
    ],
    3: [
        ("a float64 master instead of float32", """
def exercise3(w, update, steps, fmt):
    master = float(w)
    for _ in range(steps):
        master += update
    return master, float(fpsim.round_to(master, fmt))
"""),
        ("no master: the update lands on the stored weight", """
def exercise3(w, update, steps, fmt):
    stored = fpsim.round_to(np.float32(w), fmt)
    for _ in range(steps):
        stored = fpsim.round_to(np.float32(stored) + np.float32(update), fmt)
    return float(stored), float(stored)
"""),
        ("returns the master twice: the model's copy is never rounded into fmt", """
def exercise3(w, update, steps, fmt):
    master = np.float32(w)
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(master)
"""),
        ("rounds the stored copy from the exact float64 sum w + steps * update, not from the master", """
def exercise3(w, update, steps, fmt):
    master = np.float32(w)
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(fpsim.round_to(np.float64(w) + steps * update, fmt))
"""),
        ("starts the master from the rounded low-precision weight", """
def exercise3(w, update, steps, fmt):
    master = np.float32(fpsim.round_to(np.float32(w), fmt))
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(fpsim.round_to(master, fmt))
"""),
        ('a float32 master that adds the float64 update: float32(master + update) rounds the exact sum', """
def exercise3(w, update, steps, fmt):
    master = np.float32(w)
    for _ in range(steps):
        master = np.float32(float(master) + update)
    return float(master), float(fpsim.round_to(master, fmt))
"""),
        ("the master starts as w itself: never stored in float32 when there are no steps", """
def exercise3(w, update, steps, fmt):
    master = w
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(fpsim.round_to(master, fmt))
"""),
        ('the update rounded into fmt before it is added to the float32 master', """
def exercise3(w, update, steps, fmt):
    master = np.float32(w)
    u = np.float32(fpsim.round_to(np.float32(update), fmt))
    for _ in range(steps):
        master = np.float32(master + u)
    return float(master), float(fpsim.round_to(master, fmt))
"""),
        ('the stored weight cut from the master toward zero, not rounded to nearest', """
def exercise3(w, update, steps, fmt):
    master = np.float32(w)
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(fpsim.round_to(np.float64(master), fmt, "toward_zero"))
"""),
    ],
}
