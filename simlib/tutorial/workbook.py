"""The coaching every notebook exercise shares: read an answer strictly, say right or wrong, and why.

``Workbook.check(number, answer)`` has three outcomes:

* **not answered**: the answer is ``...`` or ``None`` (or a dict still holding
  one): it prints "not answered yet" and returns, so the committed blank
  notebook runs cleanly under nbval;
* **wrong**: it raises ``WrongAnswer`` (an ``AssertionError``) whose message
  coaches: what kind of answer was expected, a hint, and which notebook
  section explains it, without giving the answer away. IPython shows that
  message alone, never a traceback into this module;
* **right**: it prints why the answer is right, with the simulator's evidence.

Answers are read strictly: a word must be one of the codes the exercise
lists, spelled as listed (``"shared first"`` is not ``"shared_first"``), and
a number must be a Python ``int`` (``"0x0"`` is a string). A near miss is
told what to write instead. The exercises themselves are notebook 06's
(``simlib.tutorial.lab``) and notebook 07's (``simlib.tutorial.gallery_lab``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..glossary import CAPTURE_ERROR_PREFIX, family


class Unanswered(Exception):
    """The answer is still a placeholder (internal: ``check`` turns it into a message)."""


class _Coaching(Exception):
    """An error for a learner: IPython shows its message and no traceback."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


class WrongAnswer(_Coaching, AssertionError):
    """A wrong or malformed answer; the message says what was expected and gives a hint."""


class NoSuchExercise(_Coaching, ValueError):
    """``check`` was given an exercise number the lab does not have."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: how to read an answer, the simulated reference, and the texts."""

    title: str
    read: str                                   # key of READ
    parse: Callable[[Any], Any]                 # learner's answer -> comparable value
    solve: Callable[[], Any]                    # the reference answer, from the simulator
    wrong: Callable[[Any, Any], str]            # (given, expected) -> what is wrong
    right: Callable[[Any], str]                 # expected -> why it is right


# --------------------------------------------------------------------------- parsing
def _blank(value: Any) -> bool:
    return value is ... or value is None


def _require(ok: bool, message: str) -> None:
    """A ``WrongAnswer`` that survives ``python -O`` (a bare assert would not)."""
    if not ok:
        raise WrongAnswer(message)


def _choices(choices: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in choices)


def word_answer(choices: tuple[str, ...], what: str) -> Callable[[Any], str]:
    """One of ``choices``, spelled exactly; a capture error may name its error after a colon."""
    def parse(value: Any) -> str:
        if _blank(value):
            raise Unanswered
        _require(isinstance(value, str),
                 f"{what} is a word in quotes, one of {_choices(choices)}; got {value!r}.")
        captured = family(CAPTURE_ERROR_PREFIX)          # "capture_error", the family's answer word
        if value.startswith(CAPTURE_ERROR_PREFIX) and captured in choices and value.removeprefix(CAPTURE_ERROR_PREFIX).strip():
            return captured
        if value in choices:
            return value
        near = value.strip().strip("'\"").lower().replace(" ", "_").replace("-", "_")
        if near in choices:
            raise WrongAnswer(f"{what}: write it exactly as {near!r} (the code, with underscores "
                              f"and in lower case); got {value!r}.")
        raise WrongAnswer(f"{what} must be one of {_choices(choices)}; got {value!r}.")
    return parse


def pointer_answer(value: Any) -> int:
    """A pointer: a Python integer (a string that reads as one is told to drop its quotes)."""
    if _blank(value):
        raise Unanswered
    if isinstance(value, str):
        try:
            as_int = int(value.strip(), 0)
        except ValueError:
            as_int = None
        hint = (f" (without the quotes, {value.strip()} is the Python integer {as_int})"
                if as_int is not None else "")
        raise WrongAnswer(f"the answer is a pointer: a Python integer such as 4096 or 0x1000, not "
                          f"a string; got {value!r}{hint}.")
    _require(isinstance(value, int) and not isinstance(value, bool),
             f"the answer is a pointer: a Python integer such as 4096 or 0x1000; got {value!r}.")
    return value


def text_answer(value: Any) -> str:
    """A tensor label: a string."""
    _require(isinstance(value, str), f"expected a tensor label in quotes, such as 'x'; got {value!r}.")
    return value


def record_answer(parsers: dict[str, Callable[[Any], Any]]) -> Callable[[Any], dict[str, Any]]:
    """A dict answer with exactly these keys, each parsed by its own parser."""
    def parse(value: Any) -> dict[str, Any]:
        if _blank(value):
            raise Unanswered
        _require(isinstance(value, dict) and set(value) == set(parsers),
                 f"the answer is a dict with the keys {', '.join(repr(k) for k in parsers)}; got {value!r}.")
        missing = [k for k in parsers if _blank(value[k])]
        if missing:
            raise Unanswered(f"still to fill in: {', '.join(missing)}")
        return {k: p(value[k]) for k, p in parsers.items()}
    return parse


def whole_number(value: Any) -> int:
    """A Python integer (no quotes)."""
    _require(isinstance(value, int) and not isinstance(value, bool),
             f"expected a Python integer such as 3 (no quotes); got {value!r}.")
    return value


@dataclass(frozen=True)
class Workbook:
    """A notebook's exercises and where each idea is explained, all coached alike by ``check``.

    ``simlib.tutorial.lab.workbook(h200)`` is notebook 06's; ``simlib.tutorial.gallery_lab`` holds
    the gallery's. ``names`` are the answer words and names a hint may open with: they keep their
    spelling where a hint's first letter is capitalised.
    """

    name: str                                   # "the lab", in "the lab has exercises 1 to 8"
    exercises: dict[int, Exercise]
    read: dict[str, str]
    names: frozenset[str] = frozenset()

    def expected(self, number: int) -> Any:
        """The reference answer of exercise ``number``, read off a simulation."""
        return self._exercise(number).solve()

    def _exercise(self, number: int) -> Exercise:
        if isinstance(number, bool) or number not in self.exercises:
            raise NoSuchExercise(f"there is no exercise {number!r}; {self.name} has exercises 1 to "
                                 f"{len(self.exercises)}")
        return self.exercises[number]

    def check(self, number: int, answer: Any) -> None:
        """Print whether ``answer`` is right; raise ``WrongAnswer`` (with a hint) if it is not.

        An unanswered placeholder (``...``, ``None``) only prints "not answered yet".
        """
        ex = self._exercise(number)
        head = f"Exercise {number} ({ex.title})"
        try:
            given = ex.parse(answer)
        except Unanswered as blank:
            detail = f" ({blank})" if str(blank) else ""
            print(f"{head}: not answered yet{detail}. Replace the ... with your prediction and run this cell again.")
            return
        except WrongAnswer as bad:
            raise WrongAnswer(f"{head}: not an answer of the expected kind: {bad}\n"
                              f"Read: {self.read[ex.read]}.") from None
        want = self.expected(number)
        if given != want:
            raise WrongAnswer(f"{head}: not yet. {_sentence(ex.wrong(given, want), self.names)}\n"
                              f"Read: {self.read[ex.read]}.")
        print(f"{head}: right. {ex.right(want)}")


def _sentence(text: str, names: frozenset[str]) -> str:
    """A hint as a sentence: its first letter capitalised, unless it opens with an answer word or
    a name, which keeps its spelling (``skip_in_capture``, ``x2``, ``never``)."""
    first = text.split(" ", 1)[0].rstrip(".,:;")
    return text if first in names or "_" in first else text[:1].upper() + text[1:]
