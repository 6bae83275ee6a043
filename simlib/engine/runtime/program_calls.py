"""Calls of the code under check: ``rt.call(phase)`` brackets one warm-up, capture or eager call.

The checker's rules 8 and 9 compare calls launch by launch (``Call`` records),
so the harness wraps each call of a program in one; launches issued inside a
call also record their call site (``Launch.site``), which lines them up across calls.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ...trace import Call

PHASES = ("warmup", "capture", "eager")


class ProgramCalls:
    """``rt.call(phase)``. Mixed into ``simlib.engine.runtime.Runtime``, whose trace and ``_calls`` it uses."""

    @contextmanager
    def call(self, phase: str) -> Iterator[int]:
        """``with rt.call("warmup"):`` one call of the code under check; yields its index."""
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r} is not a call phase; use one of: " + ", ".join(map(repr, PHASES)))
        index = self._call_count
        self._call_count += 1
        self.trace.records.append(Call(self.step, self.now, "begin", index, phase))
        self._calls.append(index)
        try:
            yield index
        finally:
            self._calls.remove(index)
            self.trace.records.append(Call(self.step, self.now, "end", index, phase))
