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
