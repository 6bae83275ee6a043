"""Readable, stable names for the raw CUDA streams a recording met.

A raw stream id is a ``cudaStream_t`` address: different on every run and
meaningless to a reader. The recorder writes each record with a provisional
key (``StreamNames.key``) and renames every record once it knows the final
names (``StreamNames.final``), which depend on the whole recording:

* a stream a capture began on is ``main`` (``main2``... if captures began on
  several);
* any other stream seen during a capture is ``alt``, ``alt2``, ... in the order
  it first appeared during a capture;
* a stream seen only outside captures is ``side``, ``side2``, ..., except the
  legacy default stream (id 0), which is ``default``;
* a stream an ``annotate.issuing_on`` mark named first keeps that name.

Names depend only on the order of first appearance, never on the ids, so the
same program records the same names on every run.

A check of the recording so far (the whole-process check, at every capture's
end) reads the records with their keys: no rule reads a stream's name, only
whether two are the same, and the keys are unique. Only what it found is
renamed (``renamed_text``), so it copies no record for a stream's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Callable

from simlib.trace import Alloc, HostRead, Launch, Mutation, Record, SkippedLaunch, View

RawStream = int
LEGACY_DEFAULT: RawStream = 0


@dataclass(slots=True)
class _Seen:
    key: str                           # the provisional name (``StreamNames.key``)
    began_capture: int | None = None   # order among capture-begin streams
    in_capture: int | None = None      # order of first appearance during a capture
    mark: str | None = None


class StreamNames:
    """What the recording saw of each raw stream, and the names that follow from it."""

    def __init__(self) -> None:
        self._seen: dict[RawStream, _Seen] = {}
        self._captures = 0
        self._in_capture = 0

    @staticmethod
    def key(raw: RawStream) -> str:
        """The provisional name records carry until ``final`` renames them (``KEY`` finds it in text)."""
        return f"cuda-stream-{raw}"

    def saw(self, raw: RawStream, *, capturing: bool, mark: str | None = None) -> str:
        """Note that ``raw`` was used (during a capture or not, under ``mark``); its key."""
        seen = self._seen.get(raw) or self._first_sight(raw)
        if capturing and seen.in_capture is None:
            seen.in_capture, self._in_capture = self._in_capture, self._in_capture + 1
        if mark and seen.mark is None:
            seen.mark = mark
        return seen.key

    def began_capture(self, raw: RawStream) -> str:
        """Note that a capture began on ``raw``; its key."""
        seen = self._seen.get(raw) or self._first_sight(raw)
        if seen.began_capture is None:
            seen.began_capture, self._captures = self._captures, self._captures + 1
        return self.saw(raw, capturing=True)

    def _first_sight(self, raw: RawStream) -> _Seen:
        seen = self._seen[raw] = _Seen(self.key(raw))
        return seen

    def final(self) -> dict[str, str]:
        """Provisional key -> readable name, for every stream seen so far."""
        names = {raw: s.mark for raw, s in self._seen.items() if s.mark}
        taken = set(names.values())

        def assign(raws: list[RawStream], base: str) -> None:
            n = 1
            for raw in raws:
                if raw in names:
                    continue
                while (name := base if n == 1 else f"{base}{n}") in taken:
                    n += 1
                names[raw] = name
                taken.add(name)

        def ordered(field: str) -> list[RawStream]:
            found = [(getattr(s, field), raw) for raw, s in self._seen.items() if getattr(s, field) is not None]
            return [raw for _, raw in sorted(found)]

        assign(ordered("began_capture"), "main")
        assign(ordered("in_capture"), "alt")
        if LEGACY_DEFAULT in self._seen and LEGACY_DEFAULT not in names and "default" not in taken:
            names[LEGACY_DEFAULT] = "default"
            taken.add("default")
        assign(list(self._seen), "side")
        return {self.key(raw): name for raw, name in names.items()}


KEY = re.compile(r"cuda-stream-\d+")   # a provisional key (``StreamNames.key``) in a finding's text


def renamed_text(text: str, streams: dict[str, str]) -> str:
    """``text`` with every provisional stream key in it replaced by the stream's final name."""
    return KEY.sub(lambda m: streams.get(m.group(0), m.group(0)), text) if "cuda-stream-" in text else text


NAMED_BY_TENSOR = (Mutation, View, HostRead, Alloc)   # records labelled with one tensor's name


def rename_in_place(record: Record, streams: dict[str, str], names: dict[int, str]) -> None:
    """Late tensor names and final stream names into ``record`` itself (and its ``Arg``s)."""
    kind = type(record)
    if names:
        if kind is Launch or kind is SkippedLaunch:
            for a in record.args:
                if a.tensor in names:
                    a.label = names[a.tensor]
        elif kind in NAMED_BY_TENSOR and record.tensor in names:
            record.label = names[record.tensor]
    stream = getattr(record, "stream", None)
    if stream in streams:
        record.stream = streams[stream]


def renamed_copy(record: Record, streams: dict[str, str], names: dict[int, str]) -> Record:
    """``rename_in_place`` on a copy of ``record`` and of its ``Arg``s; the record stays as it is."""
    copy = _copy(record)
    if (type(copy) is Launch or type(copy) is SkippedLaunch) and names and any(a.tensor in names for a in copy.args):
        copy.args = tuple(_copy(a) for a in copy.args)   # else its ``Arg``s are the record's: nothing renames them
    rename_in_place(copy, streams, names)
    return copy


_fields_of: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _copy(record: Any) -> Any:
    """A shallow copy of a trace dataclass, built positionally (``dataclasses.replace`` costs
    five times as much, and a snapshot copies every record it has not copied before)."""
    kind = type(record)
    getter = _fields_of.get(kind)
    if getter is None:
        names = [f.name for f in fields(kind)]
        one = attrgetter(*names)
        getter = _fields_of[kind] = one if len(names) > 1 else (lambda r: (one(r),))
    return kind(*getter(record))
