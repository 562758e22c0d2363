"""Wrong answers to lab 19's exercises (the capstone): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab19.  The fixes
that train a run are few (each costs seconds); the ones the rules reject cost nothing.
"""

WRONG = {
    1: [
        ("a ten times lower learning rate only: it lives, but ends far from float32", '''
def exercise1():
    return BROKEN_A, TASK_A.lr / 10
'''),
        ("a static loss scale: the forward overflow stays", '''
def exercise1():
    return Recipe("static", "float16", master=True, scaler="static", static_scale=2.0**16), TASK_A.lr
'''),
        ("everything in float32: not allowed on this GPU", '''
def exercise1():
    return Recipe("fp32", "float32"), TASK_A.lr
'''),
        ("PyTorch's AMP with float32 parameters: the model must stay float16", '''
def exercise1():
    return Recipe("amp", "float32", scaler="dynamic", autocast="float16"), TASK_A.lr
'''),
        ("bfloat16: this GPU has none", '''
def exercise1():
    return Recipe("bf16", "bfloat16", master=True), TASK_A.lr
'''),
        ("returns the recipe alone, without a learning rate", '''
def exercise1():
    return Recipe("fix", "float16", master=True, scaler="dynamic", autocast="float16")
'''),
    ],
    2: [
        ("a ten times lower learning rate only: the update still divides by zero", '''
def exercise2():
    return BROKEN_B, TASK_B.lr / 10
'''),
        ("a loss scaler without master weights: Adam's state is still float16", '''
def exercise2():
    return Recipe("scaled", "float16", scaler="dynamic"), TASK_B.lr
'''),
        ("autocast: it leaves the optimizer alone", '''
def exercise2():
    return Recipe("autocast", "float16", autocast="float16"), TASK_B.lr
'''),
        ("everything in float32: not allowed on this GPU", '''
def exercise2():
    return Recipe("fp32", "float32"), TASK_B.lr
'''),
        ("autocast to bfloat16: this GPU has none", '''
def exercise2():
    return Recipe("bf16", "float16", master=True, autocast="bfloat16"), TASK_B.lr
'''),
    ],
}
