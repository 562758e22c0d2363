"""The labs' prediction cells: revisit() prints each guess beside the measured answer."""

import pytest

from fpsim.labs.predict import revisit


def test_revisit_marks_guesses_and_counts_them(capsys):
    text = revisit({"a": True, "b": None, "c": "Forward"}, {"a": False, "b": True, "c": "forward"})
    assert capsys.readouterr().out.strip() == text.strip()
    lines = text.splitlines()
    assert lines[2].split() == ["a", "yes", "no", "not", "this", "time"]
    assert lines[3].split() == ["b", "-", "yes", "no", "guess"]
    assert lines[4].split() == ["c", "Forward", "forward", "right"]
    assert lines[-1] == "1 of 2 guesses right"


def test_revisit_without_guesses_says_how_to_make_them():
    assert revisit({"a": None}, {"a": 1.5}).splitlines()[-1].startswith("(no guesses")


@pytest.mark.parametrize("predictions", [{"a": None}, {"a": None, "b": None, "c": None}, ["a", "b"]])
def test_revisit_names_the_keys_when_they_do_not_match(predictions):
    with pytest.raises(ValueError, match=r"keys \['a', 'b'\]"):
        revisit(predictions, {"a": True, "b": False})


def test_revisit_names_every_column():
    header = revisit({"a": True}, {"a": True}).splitlines()[0].split()
    assert header == ["question", "your", "guess", "measured", "verdict"]
