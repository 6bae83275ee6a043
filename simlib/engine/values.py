"""Symbolic values, so a learner can read what a buffer holds.

Device memory in the simulator holds expressions rather than numbers:
``routed(x2) + shared(x2)`` is right, ``routed(x2) + 0`` is the silent bug.

Expressions form a DAG: 61 layers nest each other's outputs several times
over, so a naive tree walk would be exponential. Each expression therefore
carries a structural hash computed once when it is built, equality walks the
DAG once with a memo, and printing stops at a length budget.
"""

from __future__ import annotations

import math
import random
import zlib
from typing import Any

_set = object.__setattr__


class Expr:
    """Base of every symbolic value; immutable, compared by structure."""

    __slots__ = ("_hash",)
    _hash: int

    def _init(self, key: tuple[Any, ...], **attrs: Any) -> None:
        for name, value in attrs.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_hash", hash((type(self).__name__, *key)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Expr) or self._hash != other._hash:
            return False
        return _same_structure(self, other)

    def __add__(self, other: "Expr") -> "Expr":
        return Sum(terms(self) + terms(other))

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({render(self, 80)!r})"

    def _parts(self) -> list["str | Expr"]:
        raise NotImplementedError

    def _fields(self) -> tuple[Any, ...]:
        """Own non-Expr data, then children (for structural comparison)."""
        raise NotImplementedError

    def _children(self) -> tuple["Expr", ...]:
        return ()


class Sym(Expr):
    """A named input, e.g. ``x2``: the second set of fresh inputs."""

    __slots__ = ("name",)
    name: str

    def __new__(cls, name: str) -> "Sym":
        obj = object.__new__(cls)
        obj._init((name,), name=name)
        return obj

    def _fields(self) -> tuple[Any, ...]:
        return (self.name,)

    def _parts(self) -> list["str | Expr"]:
        return [self.name]


class Const(Expr):
    """A literal, e.g. the ``0`` of a zero-filled buffer."""

    __slots__ = ("value",)
    value: float

    def __new__(cls, value: float) -> "Const":
        obj = object.__new__(cls)
        obj._init((float(value),), value=float(value))
        return obj

    def _fields(self) -> tuple[Any, ...]:
        return (self.value,)

    def _parts(self) -> list["str | Expr"]:
        return [f"{self.value:g}"]


class Call(Expr):
    """A function of other values, e.g. ``shared(x2)``."""

    __slots__ = ("fn", "args")
    fn: str
    args: tuple[Expr, ...]

    def __new__(cls, fn: str, args: tuple[Expr, ...]) -> "Call":
        # The hot path of every simulated kernel: set the slots directly.
        args = tuple(args)
        obj = object.__new__(cls)
        _set(obj, "fn", fn)
        _set(obj, "args", args)
        _set(obj, "_hash", hash(("Call", fn, *[a._hash for a in args])))
        return obj

    def _fields(self) -> tuple[Any, ...]:
        return (self.fn, len(self.args))

    def _children(self) -> tuple[Expr, ...]:
        return self.args

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
        obj = object.__new__(cls)
        obj._init(tuple(t._hash for t in terms), terms=terms)
        return obj

    def _fields(self) -> tuple[Any, ...]:
        return (len(self.terms),)

    def _children(self) -> tuple[Expr, ...]:
        return self.terms

    def _parts(self) -> list["str | Expr"]:
        parts: list[str | Expr] = []
        for i, t in enumerate(self.terms):
            parts += ([" + "] if i else []) + [t]
        return parts


class Garbage(Expr):
    """Bytes nobody meant to be there: uninitialised, or a different tensor's.

    ``parts`` are the values whose bytes a read ran into (a read past the end
    of its storage reads its neighbours): the garbage changes when they do, so
    two replays that read different neighbours get different wrong answers.
    """

    __slots__ = ("why", "parts")
    why: str
    parts: tuple[Expr, ...]

    def __new__(cls, why: str, parts: tuple[Expr, ...] = ()) -> "Garbage":
        parts = tuple(parts)
        obj = object.__new__(cls)
        obj._init((why, *[p._hash for p in parts]), why=why, parts=parts)
        return obj

    def _fields(self) -> tuple[Any, ...]:
        return (self.why, len(self.parts))

    def _children(self) -> tuple[Expr, ...]:
        return self.parts

    def _parts(self) -> list["str | Expr"]:
        out: list[str | Expr] = [f"<garbage: {self.why}"]
        for i, p in enumerate(self.parts):
            out += ["; " if i else ": ", p]
        return out + [">"]


ZERO = Const(0)


def terms(e: Expr) -> tuple[Expr, ...]:
    return e.terms if isinstance(e, Sum) else (e,)


def _same_structure(a: Expr, b: Expr) -> bool:
    """Structural equality over the DAG, visiting each pair of nodes once."""
    seen: set[tuple[int, int]] = set()
    stack = [(a, b)]
    while stack:
        p, q = stack.pop()
        if p is q or (id(p), id(q)) in seen:
            continue
        seen.add((id(p), id(q)))
        if type(p) is not type(q) or p._hash != q._hash or p._fields() != q._fields():
            return False
        stack.extend(zip(p._children(), q._children()))
    return True


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


def evaluate(e: Expr, dim: int = 32) -> list[float]:
    """A number for a symbolic value, so a wrong output can be shown as an error size.

    Each input symbol becomes a fixed pseudo-random vector, each function a
    fixed random layer ``tanh(W · sum(args))`` seeded by its name, a sum adds,
    garbage is noise. Deterministic, and the same expression always gives the
    same vector; it is an illustration, not a model of the real network.
    """
    memo: dict[int, list[float]] = {}
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:                                   # post-order over the DAG, iteratively
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        if ready:
            memo[id(node)] = _value(node, memo, dim)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in node._children() if id(c) not in memo)
    return memo[id(e)]


def relative_error(got: Expr, want: Expr, dim: int = 32) -> float:
    """Relative L2 error ``|got - want| / |want|`` of the evaluated expressions."""
    g, w = evaluate(got, dim), evaluate(want, dim)
    num = math.sqrt(sum((a - b) ** 2 for a, b in zip(g, w)))
    den = math.sqrt(sum(b * b for b in w)) or 1.0
    return num / den


def _value(node: Expr, memo: dict[int, list[float]], dim: int) -> list[float]:
    if isinstance(node, Const):
        return [node.value] * dim
    if isinstance(node, Sym | Garbage):
        rng = random.Random(zlib.crc32(f"{type(node).__name__}:{node._fields()[0]}".encode()))
        noise = [rng.gauss(0.0, 1.0) for _ in range(dim)]
        if isinstance(node, Garbage) and node.parts:   # varies with what the neighbours hold
            return [n * sum(col) for n, col in zip(noise, zip(*(memo[id(p)] for p in node.parts)))]
        return noise
    if isinstance(node, Sum):
        return [sum(col) for col in zip(*(memo[id(t)] for t in node.terms))]
    assert isinstance(node, Call)
    x = [sum(col) for col in zip(*(memo[id(a)] for a in node.args))]
    rng = random.Random(zlib.crc32(f"fn:{node.fn}:{dim}".encode()))
    scale = 1.0 / math.sqrt(dim)
    return [math.tanh(sum(rng.gauss(0.0, scale) * xi for xi in x)) for _ in range(dim)]
