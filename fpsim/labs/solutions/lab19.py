"""Reference solutions to lab 19, the capstone."""

from __future__ import annotations


def exercise1():
    """Run A: a forward overflow in the hand-written softmax's exp - autocast runs it in float32;
    the float16 model keeps its float32 masters and its dynamic GradScaler; the task's learning rate."""
    from fpsim.experiments import Recipe
    from fpsim.labs.capstone import TASK_A

    return Recipe("run-a-fixed", "float16", master=True, scaler="dynamic", autocast="float16"), TASK_A.lr


def exercise2():
    """Run B: Adam's float16 state flushes and the update divides by 0 - float32 master weights
    (and Adam's state with them), with a dynamic GradScaler for the tiny gradients; the task's rate."""
    from fpsim.experiments import Recipe
    from fpsim.labs.capstone import TASK_B

    return Recipe("run-b-fixed", "float16", master=True, scaler="dynamic"), TASK_B.lr
