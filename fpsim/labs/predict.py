"""Every lab opens with a prediction: a few concrete questions ("which of these will flush?"),
answered in a dict before anything runs, then revisited once the lab has measured the answers.

    predictions = {"1e-8": None, "3e-8": None}          # the learner writes True / False (or a word)
    ...
    revisit(predictions, {"1e-8": True, "3e-8": False})  # what the lab measured

:func:`revisit` prints one line per question: the guess, the measured answer, and whether they
agree.  A guess left at None is shown as "no guess", never counted wrong.
"""

from __future__ import annotations

import textwrap

from ..textable import text_table

__all__ = ["revisit"]

WIDTH = 100  # the table's lines fit in this many characters: a long question wraps in its column


def _show(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def revisit(predictions: dict, measured: dict) -> str:
    """Print (and return) a table of each question, its guess in ``predictions`` and the answer in
    ``measured`` (the same keys), and "right" / "not this time" / "no guess"."""
    if not isinstance(predictions, dict) or set(predictions) != set(measured):
        have = set(predictions) if isinstance(predictions, dict) else set()
        raise ValueError(f"predictions must be a dict with the keys {sorted(measured)}; "
                         f"missing {sorted(set(measured) - have)}, unknown {sorted(have - set(measured))}")
    rows, right, guessed = [], 0, 0
    for key, answer in measured.items():
        guess = predictions[key]
        if guess is None:
            verdict = "no guess"
        else:
            guessed += 1
            ok = guess == answer if not isinstance(answer, str) else str(guess).strip().lower() == answer.lower()
            right += ok
            verdict = "right" if ok else "not this time"
        rows.append([str(key), _show(guess), _show(answer), verdict])
    text = "\n".join(text_table(["question", "your guess", "measured", "verdict"], _wrapped(rows)))
    text += f"\n{right} of {guessed} guesses right" if guessed else "\n(no guesses: fill in the prediction cell and rerun)"
    print(text)
    return text


def _wrapped(rows: list) -> list:
    """``rows`` with each question broken between words onto continuation rows (indented, the
    other cells empty there) so that the table fits :data:`WIDTH` characters."""
    heads = ("your guess", "measured", "verdict")
    others = sum(max(len(h), *(len(r[c]) for r in rows)) for c, h in enumerate(heads, 1)) if rows else 0
    room = max(WIDTH - 2 * len(heads) - others, 20)
    out = []
    for question, *rest in rows:
        lines = textwrap.wrap(question, room, subsequent_indent="  ", break_long_words=False) or [""]
        out += [[lines[0], *rest], *([line, "", "", ""] for line in lines[1:])]
    return out
