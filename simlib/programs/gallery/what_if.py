"""What if two graphs share a pool: the widget's question, as a pure function of the replay order."""

from __future__ import annotations

from dataclasses import dataclass

from ...glossary import words
from .between_graphs import READ_AT_ONCE, READ_LATER
from .cases import SHARED_POOL


@dataclass(frozen=True)
class WhatIf:
    """One answer: the outcome word, what each read got against eager, and the checker's rules."""

    order: str
    copied_out: bool
    outcome: str
    reads: tuple[str, ...]
    rules: tuple[str, ...]

    def summary(self) -> str:
        how = "copying each output out at once" if self.copied_out else "reading the weak outputs"
        rules = ", ".join(self.rules) or "nothing"
        return f"{self.order}, {how}: {words(self.outcome)}; the checker reports {rules}."


def shared_pool_what_if(order: str = READ_LATER, copied_out: bool = False) -> WhatIf:
    """Two graphs in one pool (``shared_pool_clobber``), replayed and read in ``order``
    (``READ_LATER`` or ``READ_AT_ONCE``), with or without the fix of copying each output out."""
    if order not in (READ_LATER, READ_AT_ONCE):
        raise ValueError(f"order={order!r}: choose {READ_LATER!r} or {READ_AT_ONCE!r}")
    run = SHARED_POOL.run(fixed=copied_out, order=order)
    return WhatIf(order, copied_out, run.outcome, tuple(run.computed()), tuple(run.rules))
