"""Lab 09's self-checks: the reference solutions pass, and every plausible wrong answer beside
them (``fpsim.labs.solutions.lab09.WRONG_ANSWERS``, at least two per exercise) fails the very
check the notebook runs.  The lab's helpers: the five attention variants."""

import numpy as np
import pytest

from fpsim.labs import overflow
from fpsim.labs.solutions import lab09, reveal

CHECKS = {"exercise1": overflow.check_exercise1, "exercise2": overflow.check_exercise2,
          "exercise3": overflow.check_exercise3}


@pytest.mark.parametrize("name", list(CHECKS))
def test_reference_solution_passes(name):
    CHECKS[name](getattr(lab09, name))


WRONG = [(name, fn) for name, fns in lab09.WRONG_ANSWERS.items() for fn in fns]


@pytest.mark.parametrize("name,wrong", WRONG, ids=[f"{n}-{f.__name__}" for n, f in WRONG])
def test_wrong_answer_fails(name, wrong):
    with pytest.raises(AssertionError):
        CHECKS[name](wrong)


def test_two_wrong_answers_per_exercise_and_the_numbers():
    assert set(lab09.WRONG_ANSWERS) == set(CHECKS)
    assert all(len(fns) >= 2 for fns in lab09.WRONG_ANSWERS.values())
    assert lab09.exercise1("float16", 1) == 11 and lab09.exercise1("float16", 2) == 10
    assert lab09.exercise2("float16") == 16.0 and lab09.exercise2("float8_e5m2") == 4096.0
    assert lab09.exercise2("bfloat16") == 2.0**119 and lab09.exercise3(64) == 31
    assert "def exercise3" in reveal(9, 3)


def test_attention_variants():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 16)) * 3.5 for _ in range(3))
    outs = overflow.attention_variants(q, k, v)
    assert list(outs) == ["float32", "float16", "float16, no max-subtraction", "float16, finfo.min mask",
                          "autocast float16"]
    nan = {n: int(np.isnan(y).sum()) for n, y in outs.items()}
    assert nan["float16, no max-subtraction"] > 0 and sum(nan.values()) == nan["float16, no max-subtraction"]
    table = overflow.variant_table(outs)
    assert "max |diff| vs float32" in table and len(table.splitlines()) == 7
