"""Wrong answers to lab 18's exercises (the order of a sum): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab18.
"""

WRONG = {
    1: [
        ("np.sum: numpy's pairwise order, not left to right", '''
def exercise1(x):
    return np.sum(x)
'''),
        ("a Python float (float64) accumulator, rounded to float32 once at the end", '''
def exercise1(x):
    s = 0.0
    for v in x:
        s += float(v)
    return np.float32(s)
'''),
        ("the exact sum rounded once (math.fsum): no order at all", '''
def exercise1(x):
    return np.float32(math.fsum(x.astype(np.float64)))
'''),
        ("right to left", '''
def exercise1(x):
    s = np.float32(0.0)
    for v in x[::-1]:
        s = np.float32(s + v)
    return s
'''),
        ("starts from x[0] and adds x[0] again (an off-by-one)", '''
def exercise1(x):
    s = x[0]
    for v in x:
        s = np.float32(s + v)
    return s
'''),
        ("skips the first value", '''
def exercise1(x):
    s = np.float32(0.0)
    for v in x[1:]:
        s = np.float32(s + v)
    return s
'''),
    ],
    2: [
        ("B = 1000: too small to swallow the ones, so every pair reads the same", '''
def exercise2(sum_fn, n):
    L = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            p = np.ones(n, np.float32)
            p[i], p[j] = 1000.0, -1000.0
            L[i, j] = L[j, i] = n - int(sum_fn(p))
    return L
'''),
        ("counts only the ones inside the subtree (n - sum - 2, an off-by-two)", '''
def exercise2(sum_fn, n):
    L = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            p = np.ones(n, np.float32)
            p[i], p[j] = 2.0**30, -(2.0**30)
            L[i, j] = L[j, i] = n - int(sum_fn(p)) - 2
    return L
'''),
        ("probes in float64, where 2^30 + 1 is exact: nothing is swallowed", '''
def exercise2(sum_fn, n):
    L = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            p = np.ones(n)
            p[i], p[j] = 2.0**30, -(2.0**30)
            L[i, j] = L[j, i] = n - int(sum_fn(p))
    return L
'''),
        ("fills the upper triangle only", '''
def exercise2(sum_fn, n):
    L = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            p = np.ones(n, np.float32)
            p[i], p[j] = 2.0**30, -(2.0**30)
            L[i, j] = n - int(sum_fn(p))
    return L
'''),
        ("returns the sums themselves, not n - sum", '''
def exercise2(sum_fn, n):
    L = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            p = np.ones(n, np.float32)
            p[i], p[j] = 2.0**30, -(2.0**30)
            L[i, j] = L[j, i] = int(sum_fn(p))
    return L
'''),
    ],
}
