"""Symbolic values, so a learner can read what a buffer holds.

Device memory in the simulator holds expressions rather than numbers:
``routed(x2) + shared(x2)`` is right, ``routed(x2) + 0`` is the silent bug.

Expressions are hash-consed: building the same expression twice returns the
same object, so equality is identity and stays cheap even when 61 layers nest
each other's outputs (a plain tree comparison would be exponential). Printing
is cut at a length budget for the same reason.
"""

from __future__ import annotations

import weakref
from typing import Any

_INTERNED: "weakref.WeakValueDictionary[tuple[Any, ...], Expr]" = weakref.WeakValueDictionary()


class Expr:
    """Base of every symbolic value. Equal expressions are the same object."""

    __slots__ = ("__weakref__",)

    @classmethod
    def _intern(cls, key: tuple[Any, ...], **attrs: Any) -> Any:
        obj = _INTERNED.get((cls, *key))
        if obj is None:
            obj = object.__new__(cls)
            for name, value in attrs.items():
                object.__setattr__(obj, name, value)
            _INTERNED[(cls, *key)] = obj
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __add__(self, other: "Expr") -> "Expr":
        return Sum(terms(self) + terms(other))

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({render(self, 80)!r})"

    def _parts(self) -> list["str | Expr"]:
        raise NotImplementedError


class Sym(Expr):
    """A named input, e.g. ``x2``: the second set of fresh inputs."""

    __slots__ = ("name",)
    name: str

    def __new__(cls, name: str) -> "Sym":
        return cls._intern((name,), name=name)

    def _parts(self) -> list["str | Expr"]:
        return [self.name]


class Const(Expr):
    """A literal, e.g. the ``0`` of a zero-filled buffer."""

    __slots__ = ("value",)
    value: float

    def __new__(cls, value: float) -> "Const":
        return cls._intern((float(value),), value=float(value))

    def _parts(self) -> list["str | Expr"]:
        return [f"{self.value:g}"]


class Call(Expr):
    """A function of other values, e.g. ``shared(x2)``."""

    __slots__ = ("fn", "args")
    fn: str
    args: tuple[Expr, ...]

    def __new__(cls, fn: str, args: tuple[Expr, ...]) -> "Call":
        args = tuple(args)
        return cls._intern((fn, *map(id, args)), fn=fn, args=args)

    def _parts(self) -> list["str | Expr"]:
        parts: list[str | Expr] = [self.fn, "("]
        for i, a in enumerate(self.args):
            parts += ([", "] if i else []) + [a]
        return parts + [")"]


class Sum(Expr):
    """A sum of terms, printed unsimplified so ``+ 0`` stays visible."""

    __slots__ = ("terms",)
    terms: tuple[Expr, ...]

    def __new__(cls, terms: tuple[Expr, ...]) -> "Sum":
        terms = tuple(terms)
        return cls._intern(tuple(map(id, terms)), terms=terms)

    def _parts(self) -> list["str | Expr"]:
        parts: list[str | Expr] = []
        for i, t in enumerate(self.terms):
            parts += ([" + "] if i else []) + [t]
        return parts


class Garbage(Expr):
    """Bytes nobody meant to be there: uninitialised, or a different tensor's."""

    __slots__ = ("why",)
    why: str

    def __new__(cls, why: str) -> "Garbage":
        return cls._intern((why,), why=why)

    def _parts(self) -> list["str | Expr"]:
        return [f"<garbage: {self.why}>"]


ZERO = Const(0)


def terms(e: Expr) -> tuple[Expr, ...]:
    return e.terms if isinstance(e, Sum) else (e,)


def call(fn: str, *args: Expr) -> Call:
    """Shorthand: ``call("shared", x)`` is ``shared(x)``."""
    return Call(fn, args)


def render(e: Expr, limit: int = 240) -> str:
    """``str(e)``, cut with an ellipsis after about ``limit`` characters."""
    out: list[str] = []
    size = 0
    stack: list[str | Expr] = [e]
    while stack:
        part = stack.pop()
        if isinstance(part, Expr):
            stack.extend(reversed(part._parts()))
            continue
        if size + len(part) > limit:
            out.append(part[: max(limit - size, 0)] + "…")
            break
        out.append(part)
        size += len(part)
    return "".join(out)
