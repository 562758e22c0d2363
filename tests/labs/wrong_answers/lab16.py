"""Wrong answers to lab 16's exercises (a loss spike, taken apart): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab16.
"""

WRONG = {
    1: [
        ("no causal mask: the pairs where a query would look at a later key count too", """
def exercise1(q, k, scale=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    return float(np.abs(q @ np.swapaxes(k, -1, -2) * scale).max())
"""),
        ("the largest signed logit, not the largest in magnitude", """
def exercise1(q, k, scale=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, -np.inf).max())
"""),
        ("the scale forgotten: q.k itself", """
def exercise1(q, k, scale=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    s = np.abs(q @ np.swapaxes(k, -1, -2))
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())
"""),
        ("the mask the wrong way round: keys at or after the query", """
def exercise1(q, k, scale=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.abs(q @ np.swapaxes(k, -1, -2) * scale)
    t = q.shape[-2]
    return float(np.where(np.triu(np.ones((t, t), bool)), s, 0.0).max())
"""),
        ("scaled by 1/d instead of 1/sqrt(d)", """
def exercise1(q, k, scale=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / q.shape[-1] if scale is None else scale
    s = np.abs(q @ np.swapaxes(k, -1, -2) * scale)
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())
"""),
        ('ignores scale: always 1/sqrt(d)', """
def exercise1(q, k, scale=None):
    import math
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    s = np.abs(q @ np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())
"""),
        ("takes scale for the divisor sqrt(d): divides by it", """
def exercise1(q, k, scale=None):
    import math
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.abs(q @ np.swapaxes(k, -1, -2)) / scale
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())
"""),
        ('the default scale 1/sqrt(d) taken from the number of keys t, not from d', """
def exercise1(q, k, scale=None):
    import math
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / math.sqrt(q.shape[-2]) if scale is None else scale
    s = np.abs(q @ np.swapaxes(k, -1, -2) * scale)
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())
"""),
    ],
    2: [
        ("the kurtosis, not the excess kurtosis (3 not subtracted)", """
def exercise2(x):
    v = np.asarray(x, np.float64).ravel()
    d = v - v.mean()
    return float(np.mean(d**4) / np.mean(d**2) ** 2)
"""),
        ("the unbiased variance (n - 1) in the denominator", """
def exercise2(x):
    v = np.asarray(x, np.float64).ravel()
    d = v - v.mean()
    return float(np.mean(d**4) / np.var(v, ddof=1) ** 2 - 3)
"""),
        ("per column, then averaged, instead of over all entries", """
def exercise2(x):
    v = np.asarray(x, np.float64)
    v = v.reshape(v.shape[0], -1) if v.ndim > 1 else v[:, None]
    d = v - v.mean(axis=0)
    return float(np.mean(np.mean(d**4, axis=0) / np.mean(d**2, axis=0) ** 2 - 3))
"""),
        ("computed in the input's float32, not float64", """
def exercise2(x):
    v = np.asarray(x).ravel()
    d = v - v.mean()
    return float(np.mean(d**4) / np.mean(d**2) ** 2 - 3)
"""),
    ],
    3: [
        ("the logit itself, not the product q.k the matmul rounds (the scale comes after it)", """
def exercise3(max_logits, fmt, head_dim):
    for step, v in enumerate(max_logits):
        if not np.isfinite(fpsim.round_to(np.float32(v), fmt)):
            return step
    return None
"""),
        ("compared with the format's max: a product just above max still rounds down to it", """
def exercise3(max_logits, fmt, head_dim):
    for step, v in enumerate(max_logits):
        if v * np.sqrt(head_dim) > fpsim.get_format(fmt).max:
            return step
    return None
"""),
        ("times head_dim instead of sqrt(head_dim)", """
def exercise3(max_logits, fmt, head_dim):
    for step, v in enumerate(max_logits):
        if not np.isfinite(fpsim.round_to(np.float32(v * head_dim), fmt)):
            return step
    return None
"""),
        ("steps counted from 1", """
def exercise3(max_logits, fmt, head_dim):
    for step, v in enumerate(max_logits, start=1):
        if not np.isfinite(fpsim.round_to(np.float32(v * np.sqrt(head_dim)), fmt)):
            return step
    return None
"""),
    ],
}
