"""The recorder's handle on each Python tensor object: its id in the records, its label, its last use.

A launch freezes what the host held: tensor objects, whose pointer a ``set_``
can change under them. So the records name tensor objects, not addresses:
each object gets an id when the recorder first sees it, for as long as it
lives. Labels come from ``annotate`` (else a view's base's, else ``t<id>``); a
name given after records were made replaces the placeholder when the records
are finished (``HandleTable.finished``).
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass
from typing import Iterator

import torch

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.naming import rename_in_place, renamed_copy
from simlib.trace import Record

SWEEP_AT = 1 << 16   # handles kept before dead tensors' are dropped (then twice the live ones)


@dataclass(slots=True)
class Handle:
    """What the recorder knows of one Python tensor object (``HandleTable.handle``)."""

    ref: weakref.ref
    id: int
    label: str   # its ``annotate`` name, else its base's (a view), else ``t<id>`` (``HandleTable.label``)
    # (pointer, elements, shape) at its last recorded use: a use that finds others had its
    # storage changed under it (``CaptureRecorder._arg``). None: not seen in this recording span.
    seen: tuple[int, int, tuple[int, ...]] | None = None


class HandleTable:
    """The handles of the tensor objects a recording met, and the names given them late."""

    def __init__(self) -> None:
        self.by_id: dict[int, Handle] = {}   # id(tensor) -> handle (see ``handle``)
        self.late_names: dict[int, str] = {}   # handle id -> the name ``named`` gave it
        self._sweep_at = SWEEP_AT
        self._ids = itertools.count(1)
        self._copies: dict[int, tuple[Record, Record]] = {}   # id(record) -> (it, its renamed copy) (``finished``)
        self._copies_for: tuple[dict[str, str], dict[int, str]] | None = None   # the names those copies have

    def handle(self, t: torch.Tensor) -> Handle:
        """The handle on tensor object ``t``, made on first sight.

        Keyed by ``id(t)`` and checked against a weak reference (an id is reused
        once its object is gone): a ``WeakIdKeyDictionary`` costs ten times as
        much per look-up, and the recorder looks up every argument of every op.
        """
        handle = self.by_id.get(id(t))
        if handle is None or handle.ref() is not t:
            handle = self.new(t)
        return handle

    def new(self, t: torch.Tensor) -> Handle:
        if len(self.by_id) >= self._sweep_at:   # the handles of dead tensors, now and then
            self.by_id = {key: h for key, h in self.by_id.items() if h.ref() is not None}
            self._sweep_at = max(SWEEP_AT, 2 * len(self.by_id))
        number = next(self._ids)
        handle = self.by_id[id(t)] = Handle(weakref.ref(t), number, annotate.label_of(t) or f"t{number}")
        return handle

    def known(self, t: torch.Tensor) -> Handle | None:
        handle = self.by_id.get(id(t))
        return handle if handle is not None and handle.ref() is t else None

    def live_tensors(self) -> list[torch.Tensor]:
        """Every tensor object seen and still alive, in the order first seen."""
        handles = sorted(self.by_id.values(), key=lambda h: h.id)
        return [t for t in (h.ref() for h in handles) if t is not None]

    def alive(self) -> Iterator[torch.Tensor]:
        """Every tensor object seen and still alive, in no particular order (``live_tensors``, unsorted)."""
        for handle in list(self.by_id.values()):
            t = handle.ref()
            if t is not None:
                yield t

    def label(self, t: torch.Tensor) -> str:
        """The name ``annotate.label`` gave ``t``, else its base's (a view), else ``t<id>``
        (kept on its handle: made with it, renamed by ``named``)."""
        return self.handle(t).label

    def forget_seen(self) -> None:
        """What tensors went through since the last capture was not watched: no use of theirs
        to compare the next one with."""
        for handle in self.by_id.values():
            handle.seen = None

    def named(self, tensor: torch.Tensor, name: str) -> None:
        """A tensor got its name after the op that made it was recorded: records
        made before that show a placeholder, replaced by the name on exit."""
        handle = self.known(tensor)
        if handle is not None:
            handle.label = name
            self.late_names[handle.id] = name

    def finished(self, records: list[Record], streams: dict[str, str], *, in_place: bool = False) -> list[Record]:
        """``records`` with late names and ``streams``' renaming of stream keys.
        ``in_place`` renames the records themselves (the finished trace: nobody holds them
        yet), else renamed copies (``snapshot``: the recording goes on with the originals)."""
        names = self.late_names
        if not names and not streams:
            return list(records)
        if in_place:
            for record in records:
                rename_in_place(record, streams, names)
            return records
        old = self._copies if self._copies_for == (streams, names) else {}   # names changed: all stale
        self._copies_for, copies = (streams, dict(names)), {}
        self._copies = copies
        out = []
        for r in records:   # a record never changes once written: its copy from the last call stands
            kept = old.get(id(r))
            copy = kept[1] if kept is not None and kept[0] is r else renamed_copy(r, streams, names)
            copies[id(r)] = (r, copy)
            out.append(copy)
        return out
