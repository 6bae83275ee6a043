"""Python's cyclic garbage collector while the recorder writes down every op.

A recording keeps what it writes (records, handles, the checker's state), so
every op adds objects that survive. CPython collects its oldest generation
again each time the objects that survived since grew by a quarter, at most
once per ``threshold2`` collections of the middle one (``gc.set_threshold``),
and each such collection walks every object in the process: recording a loop
of small ops, full collections took a fifth of the recorder's time
(``benchmarks/recorder_gc.py`` measures it). While a recorder records
every op, that third threshold is ten times the program's; the program's
thresholds come back when the last such recorder stands aside or stops, unless
the program set others meanwhile.
"""

from __future__ import annotations

import gc

FEWER = 10   # how many times rarer full collections are while recording

_held = 0                                     # recorders recording every op now
_saved: tuple[int, ...] | None = None         # the program's thresholds, while held
_set: tuple[int, ...] | None = None           # what this module set them to


def hold() -> None:
    """A recorder starts recording every op: full collections get rarer (once for nested ones)."""
    global _held, _saved, _set
    _held += 1
    if _held == 1:
        _saved = gc.get_threshold()
        if _saved[0] > 0:   # a threshold of 0 switches collection off: nothing to tune
            _set = (_saved[0], _saved[1], _saved[2] * FEWER)
            gc.set_threshold(*_set)


def release() -> None:
    """That recorder stands aside or stops: the program's thresholds again, after the last one."""
    global _held, _saved, _set
    if _held == 0:
        return
    _held -= 1
    if _held == 0:
        if _set is not None and gc.get_threshold() == _set:   # the program set none of its own since
            gc.set_threshold(*_saved)
        _saved = _set = None
