"""The worked example (``fpsim.examples``, printed by ``fpsim example``): the loss-scale hint for a
gradient that overflows, the range of scales that make a value normal, negative numbers, the ends
of float32 - against the format limits, with no numpy warning in the output."""

from __future__ import annotations

import pytest
from helpers import run_cli

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def test_example_hint_for_a_gradient_that_overflows(capsys):
    rc, out, err = run_cli(capsys, "example", "--grad", 1000, "--format", "e4m3")
    assert rc == 0, err
    a = out[:out.index("(c)")]
    assert "2^0 = 1" not in a
    # e4m3fn: max 448, min normal 2^-6; 1000 x 2^-1 = 500 rounds past 464 -> NaN, 1000 x 2^-2 = 250 is normal,
    # 1000 x 2^-16 = 0.01526 rounds up to 8 x 2^-9 = 2^-6 (normal), 1000 x 2^-17 stays subnormal
    assert "no scale >= 1 helps" in a and "S = 2^-16 .. 2^-2" in a
    assert a.count("overflowed to NaN") == 4


def test_normal_scale_range_against_the_format_limits():
    from fpsim.examples import normal_scale_range, smallest_normalizing_scale

    assert normal_scale_range(1e-8, "float16") == (13, 42)  # 1e-8 x 2^13 >= 2^-14; x 2^43 = 87960 > 65504
    assert normal_scale_range(-1e-8, "float16") == (13, 42)
    assert normal_scale_range(1e38, "bfloat16") == (-252, 1)
    assert smallest_normalizing_scale(1e-8, "float16") == 2.0**13
    with pytest.raises(ValueError, match="overflows float8_e4m3fn"):
        smallest_normalizing_scale(1000.0, "e4m3")


def test_example_takes_negative_numbers_and_prints_no_numpy_warnings(capsys):
    rc, out, err = run_cli(capsys, "example", "--grad", "-1e-8")
    assert rc == 0, err
    assert "g = -1e-08 cast straight to float16" in out and "-1.0251998901367188e-05" in out
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail here
        rc, out, err = run_cli(capsys, "example", "--grad", "1e38", "--scale", "1e30", "--format", "bf16")
    assert rc == 0 and err == "" and "overflowed to inf" in out
    with pytest.raises(SystemExit) as stop:  # refused by argparse, before anything is printed
        run_cli(capsys, "example", "--grad", "-inf")
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "" and "argument --grad: expected a finite number, got '-inf'" in err


def test_example_at_the_ends_of_float32(capsys):
    rc, out, err = run_cli(capsys, "example", "--grad", "5e-324", "--format", "e5m2")
    assert rc == 0, err
    assert "g is 0 in float32 already" in out
    rc, out, err = run_cli(capsys, "example", "--grad", "1e-40", "--format", "e5m2")
    # 1e-40 x 2^119 = 6.6e-5 >= e5m2's 2^-14; x 2^148 = 3.6e4 <= 57344, x 2^149 overflows
    assert rc == 0 and "2^119 = 6.64614e+35 (up to 2^148" in out
    for argv in (["--grad", "1.7e308"], ["--scale", "1e300"]):
        rc, out, err = run_cli(capsys, "example", *argv)
        assert rc == 2 and "float32 number" in err and err.count("\n") == 1
