"""The trace a recorder writes, and the state of the recording that each of its parts reads.

Every part of the recorder (the dispatch mode, the allocation ledger, the
capture book, the stream order, the mutation watch) writes into one trace, in
one sequence of host steps: the journal numbers each record and stamps it with
the time. Whether a record is made at all (``eager``, or a capture is open),
which graph it belongs to (``graph``), whether the code running now is the
recorder's own (``busy``) and whether the recorder stands aside (``aside``,
``watching``) are the same answer for every part, so they are kept here, once.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from torch._C import DisableTorchFunction

from simlib.trace import Alloc, Call, EventOp, Free, Launch, Record, Trace, View

_now = time.perf_counter_ns

# The field order ``Journal.add`` takes each hot record's fields in (after step, t_us).
POSITIONAL: dict[type[Record], tuple[str, ...]] = {
    Launch: ("id", "kernel", "label", "role", "stream", "args", "graph", "deps", "pdl", "scalars", "site"),
    View: ("tensor", "label", "base", "ptr", "numel", "shape", "graph"),
    Alloc: ("tensor", "label", "ptr", "nbytes", "stream", "pool"),
    Free: ("label", "ptr", "nbytes", "stream", "pool", "graph"),
    EventOp: ("op", "event", "stream", "graph", "deps"),
}


@dataclass(slots=True, eq=False)
class Journal:
    """Where records go, and what the recording is doing now."""

    trace: Trace
    eager: bool                   # records are made outside captures too
    graph: int | None = None      # the capture open now: records made inside carry its id
    busy: int = 0                 # >0 while the recorder's own code or an op's internals run
    aside: bool = False           # standing aside (``StandingAside.stand_aside``): replays are still recorded
    watching: int = 0             # >0 while a call the memory watch picked runs: recorded
    # Standing aside: records what was left for later (``fresh_views``), before a record that could read it.
    settle: Callable[[], None] = lambda: None
    steps: Iterator[int] = field(default_factory=itertools.count)
    t0: int = field(default_factory=time.perf_counter_ns)

    @property
    def recording(self) -> bool:
        return self.eager or self.graph is not None or self.watching > 0

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """The recorder's own tensor reads inside are not the program's: no ``HostRead``
        for them, and no trip through torch-function modes (see ``__torch_dispatch__``)."""
        self.busy += 1
        try:
            with DisableTorchFunction():
                yield
        finally:
            self.busy -= 1

    @contextmanager
    def calling(self, index: int, phase: str) -> Iterator[None]:
        """One call of the code under check (``phase``: ``warmup``, ``capture`` or ``eager``),
        bracketed by ``Call`` records: the frozen-value rules compare calls op by op."""
        self.emit(Call, op="begin", index=index, phase=phase)
        try:
            yield
        finally:
            self.emit(Call, op="end", index=index, phase=phase)

    def emit(self, kind: type[Record], **fields: Any) -> None:
        t_us = (time.perf_counter_ns() - self.t0) / 1000
        self.trace.records.append(kind(step=next(self.steps), t_us=t_us, **fields))

    def add(self, kind: type[Record], *fields: Any) -> None:
        """``emit`` for the records made once or more per op, with the fields after
        ``step, t_us`` in ``kind``'s order (``POSITIONAL``): a keyword call costs a
        record twice as much."""
        t_us = (_now() - self.t0) / 1000
        self.trace.records.append(kind(next(self.steps), t_us, *fields))
