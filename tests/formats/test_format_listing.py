"""The data behind `fpsim formats --all` and the rounding-speed bench rows (structure only: speed is
measured by the bench, as ratios, never asserted in a test)."""

from fpsim.formats import ALL_FORMATS, P3109_FORMATS
from fpsim.formats.listing import FORMAT_COLUMNS, format_rows
from fpsim.formats.speed import SPEED_CASES, rounding_speed


def test_default_rows_are_todays_formats_and_all_adds_int8_float64_and_p3109():
    rows = format_rows()
    assert [r[0] for r in rows] == list(ALL_FORMATS)
    assert rows[1] == ["float16", "16", "5", "10", "15", "65504", "2^-14 = 6.10352e-05", "2^-24 = 5.96046e-08",
                       "2^-10 = 0.000976562", "2.98023e-08", "yes"]
    full = format_rows(include_all=True)
    assert [r[0] for r in full] == [*ALL_FORMATS, "ocp_int8", "float64", *P3109_FORMATS]
    f64 = next(r for r in full if r[0] == "float64")
    assert f64[1:6] == ["64", "11", "52", "1023", "1.79769e+308"] and f64[7] == "2^-1074 = 4.94066e-324"
    assert f64[9] == "2^-1075"  # half the smallest subnormal: no float64 number to print
    assert all(len(r) == len(FORMAT_COLUMNS) for r in full)
    k8p4 = next(r for r in full if r[0] == "p3109_k8p4se")
    assert k8p4[1:6] == ["8", "4", "3", "8", "224"] and k8p4[-1] == "yes, NaN 0x80, no -0"
    k3 = next(r for r in full if r[0] == "p3109_k3p3uf")
    assert k3[-1] == "no, NaN 0x07, unsigned"


def test_speed_rows_cover_both_families():
    rows = rounding_speed(n=2048, repeats=1)
    assert len(rows) == len(SPEED_CASES) and {r["family"] for r in rows} >= {"P3109", "few-bit SR"}
    assert all(r["ratio"] > 0 and r["ns_per_value"] > 0 for r in rows)
