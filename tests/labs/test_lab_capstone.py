"""fpsim.labs.capstone (lab 19): the judge_fix's rules on a fix's form, and its verdicts on run B
(the quick one) measured against the float32 run trained here."""

import pytest

from fpsim.experiments import Recipe, train
from fpsim.labs.capstone import BROKEN_B, TASK_B, TOLERANCE, judge_fix, run


@pytest.mark.parametrize(("fix", "says"), [
    (Recipe("x", "float32"), "a fix is a (Recipe, learning rate) pair"),
    (("fp16-master", 0.01), "must be a fpsim.experiments.Recipe"),
    ((Recipe("x", "float16"), 0), "learning rate must be a number > 0"),
    ((Recipe("x", "float32"), 0.01), "the model must stay float16 (params='float32')"),
    ((Recipe("x", "float16", autocast="bfloat16"), 0.01), "no bfloat16"),
])
def test_the_rules_come_first(fix, says):
    assert says in judge_fix("b", fix, 1.0)


def test_run_b_verdicts():
    fp32 = train(TASK_B, "fp32", 0).final_loss
    assert run("b", "fp32").final_loss == fp32
    assert judge_fix("b", (BROKEN_B, TASK_B.lr), fp32) == "it still dies: the loss is not finite from step 0"
    assert judge_fix("b", (Recipe("fix", "float16", master=True, scaler="dynamic"), TASK_B.lr), fp32) == "fixed"
    slow = judge_fix("b", (Recipe("slow", "float16", master=True), TASK_B.lr / 100), fp32)
    assert slow.startswith("it lives but ends at") and TOLERANCE == 0.05


def test_which_run_is_named():
    with pytest.raises(ValueError, match="which must be 'a' or 'b'"):
        run("c", "fp32")
