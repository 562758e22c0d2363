"""Wrong answers to lab 15's exercises (the RL train-inference mismatch): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab15.
"""

WRONG = {
    1: [
        ("the relative error of the log-probability, not of the probability", """
def exercise1(logp_rollout, logp_trainer):
    a, b = np.asarray(logp_rollout, np.float64), np.asarray(logp_trainer, np.float64)
    rel = (a - b) / b
    r = np.exp(a - b)
    return float(np.sqrt(np.mean(rel ** 2))), float(np.mean((r < 0.8) | (r > 1.25)))
"""),
        ("the mean of |r - 1|, not its root mean square", """
def exercise1(logp_rollout, logp_trainer):
    r = np.exp(np.asarray(logp_rollout, np.float64) - np.asarray(logp_trainer, np.float64))
    return float(np.mean(np.abs(r - 1))), float(np.mean((r < 0.8) | (r > 1.25)))
"""),
        ("a symmetric band [0.8, 1.2] instead of [0.8, 1.25] = [0.8, 1/0.8]", """
def exercise1(logp_rollout, logp_trainer):
    r = np.exp(np.asarray(logp_rollout, np.float64) - np.asarray(logp_trainer, np.float64))
    return float(np.sqrt(np.mean((r - 1) ** 2))), float(np.mean((r < 0.8) | (r > 1.2)))
"""),
        ("the ratio the wrong way round: trainer / rollout", """
def exercise1(logp_rollout, logp_trainer):
    r = np.exp(np.asarray(logp_trainer, np.float64) - np.asarray(logp_rollout, np.float64))
    return float(np.sqrt(np.mean((r - 1) ** 2))), float(np.mean((r < 0.8) | (r > 1.25)))
"""),
    ],
    2: [
        ("off by one: the logits of the token's own position, not the one before it", """
def exercise2(model, ids, n_new):
    with fpsim.no_grad():
        logits = model(ids[:, 1:]).to("float32")
        lp = np.asarray(ops.log_softmax(logits, axis=-1).f32())[:, -n_new:]
    return np.take_along_axis(lp, ids[:, -n_new:, None], axis=-1)[..., 0]
"""),
        ("log_softmax in the model's format, not in float32", """
def exercise2(model, ids, n_new):
    with fpsim.no_grad():
        lp = np.asarray(ops.log_softmax(model(ids[:, :-1]), axis=-1).f32())[:, -n_new:]
    return np.take_along_axis(lp, ids[:, -n_new:, None], axis=-1)[..., 0]
"""),
        ("the log-probability of the most likely token, not of the chosen one", """
def exercise2(model, ids, n_new):
    with fpsim.no_grad():
        logits = model(ids[:, :-1]).to("float32")
        lp = np.asarray(ops.log_softmax(logits, axis=-1).f32())[:, -n_new:]
    return lp.max(axis=-1)
"""),
        ("the rollout's numbers: generate again and return its log-probabilities", """
def exercise2(model, ids, n_new):
    return model.generate(ids[:, :-n_new], n_new, seed=0)[1]
"""),
    ],
    3: [
        ("the inverse: fmt_b's mismatch over fmt_a's", """
def exercise3(rms_a, rms_b):
    r = np.asarray(rms_b, np.float64) / np.asarray(rms_a, np.float64)
    return float(np.median(r)), float(r.min()), float(r.max())
"""),
        ("the ratio of the means for the middle value, not the median of the per-seed ratios", """
def exercise3(rms_a, rms_b):
    r = np.asarray(rms_a, np.float64) / np.asarray(rms_b, np.float64)
    return float(np.mean(rms_a) / np.mean(rms_b)), float(r.min()), float(r.max())
"""),
        ("the mean of the per-seed ratios, not their median", """
def exercise3(rms_a, rms_b):
    r = np.asarray(rms_a, np.float64) / np.asarray(rms_b, np.float64)
    return float(np.mean(r)), float(r.min()), float(r.max())
"""),
        ("the extremes from unpaired seeds: min(a) / max(b) and max(a) / min(b)", """
def exercise3(rms_a, rms_b):
    r = np.asarray(rms_a, np.float64) / np.asarray(rms_b, np.float64)
    return float(np.median(r)), float(min(rms_a) / max(rms_b)), float(max(rms_a) / min(rms_b))
"""),
        ("each list sorted before dividing: pairs by rank, not by seed", """
def exercise3(rms_a, rms_b):
    r = np.sort(np.asarray(rms_a, np.float64)) / np.sort(np.asarray(rms_b, np.float64))
    return float(np.median(r)), float(r.min()), float(r.max())
"""),
        ("the ulp ratio from the mantissa bits: 8 whatever was measured", """
def exercise3(rms_a, rms_b):
    return 8.0, 8.0, 8.0
"""),
        ('the upper middle of an even count, sorted(r)[n // 2], for the median', """
def exercise3(rms_a, rms_b):
    r = sorted(a / b for a, b in zip(rms_a, rms_b))
    return float(r[len(r) // 2]), float(r[0]), float(r[-1])
"""),
    ],
}
