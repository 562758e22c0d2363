"""The shared plain-text table."""

from fpsim.textable import text_table


def test_columns_fit_the_widest_cell_and_right_columns_align_right():
    lines = text_table(["name", "n"], [["a", "1"], ["long name", "100"]], right={1})
    assert lines == ["name         n",
                     "---------  ---",
                     "a            1",
                     "long name  100"]


def test_no_rows_and_no_trailing_spaces():
    assert text_table(["a", "bb"], []) == ["a  bb", "-  --"]
    assert text_table(["x", "y"], [["long", ""]]) == ["x     y", "----  -", "long"]


def test_percent_one_formatter_for_every_table():
    from fpsim.textable import percent

    assert percent(1, 8) == "12.50%" and percent(0.0625, digits=1) == "6.2%" and percent(0.5) == "50.00%"
    assert percent(3, 0) == "-" and percent(0, 5) == "0.00%" and percent(0, 5, zero="0") == "0"
    assert percent(1, 81_000) == "0.00%" and percent(1, 81_000, small=True) == "0.00123%"
    assert percent(1, 50, small=True) == "2.00%"
