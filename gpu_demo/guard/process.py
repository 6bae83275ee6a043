"""Checking captures as a program makes them: ``capture_checked()`` and the whole process.

``capture_checked()`` records everything inside its ``with`` block: the eager
calls before a capture, the capture, and the replays, frees and eager work
after it. It runs ``simlib.checker`` on what was recorded at the end of each
capture; at a graph's first replay, with the graph's static inputs named (no
capture names them: they are the tensors it reads that the program wrote into
since the capture, ``_with_inputs``), so rule 7 sees what the warm-up derived
from them; again at a replay when something a rule follows has happened since
the last check (a block a graph uses was freed, or another graph replayed);
and once more when the block exits. Each finding is reported once, at the
first check that sees it. A hazard raises ``AssertionError`` with the report
when the block exits (``on_hazard="warn"`` warns a ``CaptureHazardWarning``
at once instead, pointing at the user's line that ended the capture or
replayed the graph; ``strict=True`` counts the checker's warnings, the races,
as hazards too).

The program says nothing about where one call of its captured code begins:
``gpu_demo.record.calls.with_calls`` infers the calls from the capture's own
first launch, so rules 7 to 9 compare the eager calls before a capture with
it as ``check_capture`` compares its warm-up calls.

``check_process()`` does the same for every capture until the process ends
(``CAPTURE_ORDER_CHECK=1``; ``gpu_demo.autocheck`` starts it), with a last
check at exit. It keeps the records of every capture and replay; of the
eager work, the warm-ups of the graphs not yet replayed (a server warms each
batch size up right before capturing it, and serves once all are captured),
and never more than ``EAGER_WINDOW`` records, so the trace and each check stay
bounded in a long run. Recording eager work costs what ``capture_checked``
costs per op (``benchmarks``: the start-up that captures 8 batch sizes).
``torch.cuda.make_graphed_callables`` captures through ``torch.cuda.graph``
with a shared pool, so both forms check it unchanged. One capture at a time.
"""

from __future__ import annotations

import atexit
import bisect
import functools
import gc
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import torch

from gpu_demo.protocol.child import run_in_child
from gpu_demo.protocol.cuda_errors import one_line
from gpu_demo.record.call_site import user_stacklevel
from gpu_demo.record.calls import with_calls
from gpu_demo.record.cuda_device import Device
from gpu_demo.record.naming import renamed_text
from gpu_demo.record.recorder import CaptureRecorder
from simlib.checker import Finding, check, format_report
from simlib.checker.intervals import Intervals
from simlib.trace import Alloc, Capture, Free, Launch, Record, Replay, Trace

ON_HAZARD = ("raise", "warn")


class CaptureHazardWarning(UserWarning):
    """A capture froze something the checker says a replay will get wrong."""


@dataclass(frozen=True)
class CaptureReport:
    """What one check found (``findings``: ``simlib.checker.Finding``, each reported once): at a
    capture's end or a replay of ``graph``, or (``graph == -1``) when the block or process ended."""

    graph: int
    findings: tuple[Any, ...]
    text: str
    capture_error: str | None = None

    def fails(self, strict: bool) -> bool:
        """A hazard: an error finding, or with ``strict`` any finding."""
        return any(strict or f.severity == "error" for f in self.findings)


EAGER_WINDOW = 200_000   # eager records the whole-process check keeps (then the newest half)


def _timed(method: Callable[..., None]) -> Callable[..., None]:
    """A check's entry point, timed into ``check_s``: choosing its records counts, not only the rules."""
    @functools.wraps(method)
    def timed(self: "CaptureChecker", *args: Any) -> None:
        started = time.perf_counter()
        try:
            method(self, *args)
        finally:
            self.check_s += time.perf_counter() - started
    return timed


@dataclass
class CaptureChecker:
    """Checks what ``recorder`` records, at each capture end and at replays, and keeps the reports.

    ``raise_at_capture_end`` raises at once (whole-process checking, where no
    block ends); otherwise ``capture_checked`` raises when its block exits.
    ``window``: keep only that many eager records (``None``: all).
    """

    recorder: CaptureRecorder
    strict: bool = False
    on_hazard: str = "raise"
    raise_at_capture_end: bool = False
    window: int | None = None
    reports: list[CaptureReport] = field(default_factory=list)
    check_s: float = 0.0   # seconds spent checking so far (what the recording costs besides, it does not know)
    _reported: set[tuple[Any, ...]] = field(default_factory=set)
    _checked_upto: int = 0
    _last_replayed: int | None = None
    _freed_since_replay: bool = False   # a block a graph uses was freed, and no replay was checked since
    _graph_ranges: list[tuple[int, int]] = field(default_factory=list)   # sorted (lo, hi) the graphs touch
    _replayed: set[int] = field(default_factory=set)   # graphs replayed (their first replay was checked)

    def __post_init__(self) -> None:
        _valid(self.on_hazard)
        self.recorder.capture_ended.append(self.check_graph)
        self.recorder.replayed.append(self.check_replay)

    @property
    def trace(self) -> Trace:
        """Everything recorded so far, with final stream names."""
        return self.recorder.snapshot()

    def failures(self) -> list[CaptureReport]:
        return [r for r in self.reports if r.fails(self.strict)]

    def summary(self, problem: str | None = None) -> dict[str, Any]:
        """What the checks found over a program, as the runners record it: the rules that fired,
        every finding, what stopped the program (``problem``, if something did), the captures seen."""
        findings = [f for report in self.reports for f in report.findings]
        captures = sum(type(r) is Capture and r.op == "begin" for r in self.recorder.trace.records)
        return {"rules": [f"rule {rule} ({code})" for rule, code in sorted({(f.rule, f.code) for f in findings})],
                "findings": [f.to_dict() for f in findings], "problem": problem, "captures": captures}

    @_timed
    def check_graph(self, graph: int) -> None:
        """At the end of ``graph``'s capture: the eager calls before it, the capture, and what
        came before of other graphs."""
        records = self.recorder.trace.records
        end = next(r for r in reversed(records) if type(r) is Capture and r.graph == graph)
        needed = _of_graph(records, graph)
        self._note_ranges(r for r in needed if type(r) is Launch and r.graph == graph)
        failed = f"capture failed: {end.error}\n" if end.error else ""
        # A free of graph memory since the last check: this check moves past it, and the next
        # replay must still be checked after it (rules 10 and 11 fire at replays).
        self._freed_since_replay |= any(map(self._frees_graph_memory, records[self._checked_upto:]))
        self._check(graph, with_calls(needed, graph), f"capture of graph {graph}", failed, end.error, always=True)
        self._trim_warm_ups()

    @_timed
    def check_replay(self, graph: int) -> None:
        """At a replay of ``graph``: its first, with the static inputs the program refreshed
        since the capture (rule 7); and any, when since the last check a block a graph uses
        was freed or another graph replayed (rules 10 and 11 follow those)."""
        records = self.recorder.trace.records
        since = records[self._checked_upto:]
        other, self._last_replayed = self._last_replayed not in (None, graph), graph
        changed = other or self._freed_since_replay or any(map(self._frees_graph_memory, since))
        replay = records[-1]
        what = f"replay #{replay.index if type(replay) is Replay else '?'} of graph {graph}"
        if graph not in self._replayed:
            self._replayed.add(graph)
            self._check(graph, _with_inputs(_of_graph(records, graph), graph), what, "", None)
            self._trim_warm_ups()
        if changed:
            self._freed_since_replay = False
            self._check(graph, _from_replays(self.recorder.trace.records), what, "", None)

    @_timed
    def check_now(self, what: str = "at the end") -> None:
        """A last check (the block exits, the process ends): reads after the last replay. Where no
        graph ever replayed and no capture began or ended since the last check, it could only
        repeat the capture-end checks (rules 10 and 11 need a replay after the free or the
        clobber), so it is skipped: a server's start-up captures every batch size before it
        replays one."""
        records = self.recorder.trace.records
        if self._replayed or any(type(r) is Capture for r in records[self._checked_upto:]):
            self._check(None, _from_replays(records), what, "", None)

    def _check(self, graph: int | None, records: list[Record], what: str, failed: str, error: str | None,
               *, always: bool = False) -> None:
        trace = Trace(records=self.recorder.for_check(records), meta=dict(self.recorder.trace.meta))
        found = [f for f in check(trace) if _key(f) not in self._reported]
        self._reported.update(_key(f) for f in found)   # keyed before renaming: a stream's name may change later
        streams = self.recorder.streams.final()
        found = [replace(f, label=renamed_text(f.label, streams), why=renamed_text(f.why, streams),
                         fix=renamed_text(f.fix, streams)) for f in found]
        self._checked_upto = len(self.recorder.trace.records)
        if self.window is not None and len(self.recorder.trace.records) > self.window:
            self._trim(len(self.recorder.trace.records) - self.window // 2)
        if not found and not always:
            return
        who = f"rank {os.environ['RANK']}: " if "RANK" in os.environ else ""   # one rank of a torchrun job
        text = f"{who}{what} (capture-order check):\n{failed}{format_report(found)}"
        report = CaptureReport(-1 if graph is None else graph, tuple(found), text, error)
        self.reports.append(report)
        if not report.fails(self.strict):
            return
        if self.on_hazard == "warn":
            warnings.warn(text, CaptureHazardWarning, stacklevel=user_stacklevel())
        elif self.raise_at_capture_end:
            raise AssertionError(text)

    def _note_ranges(self, nodes: Iterator[Launch]) -> None:
        """Add the address ranges ``nodes`` read or write to the graphs' (kept sorted and disjoint)."""
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted([*self._graph_ranges,
                              *[(a.ptr, a.ptr + (a.nbytes or 1)) for node in nodes for a in node.args]]):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        self._graph_ranges = merged

    def _touched(self, ptr: int, nbytes: int) -> bool:
        """Does ``[ptr, ptr + nbytes)`` overlap memory a captured node reads or writes?"""
        ranges = self._graph_ranges
        i = bisect.bisect_left(ranges, (ptr + max(nbytes, 1),)) - 1
        return i >= 0 and ranges[i][1] > ptr

    def _frees_graph_memory(self, r: Record) -> bool:
        return type(r) is Free and self._touched(r.ptr, r.nbytes)

    def _trim_warm_ups(self) -> None:
        """Whole-process checking: drop the eager records no check needs again, those before the
        warm-up of the oldest graph not yet replayed (its first replay reads it, for rule 7)."""
        if self.window is None:
            return
        records = self.recorder.trace.records
        ends = [(i, r.graph) for i, r in enumerate(records) if type(r) is Capture and r.op == "end"]
        waiting = [k for k, (_, g) in enumerate(ends) if g not in self._replayed]
        if not waiting:
            self._trim(len(records))               # every graph replayed: no warm-up is needed again
        elif waiting[0]:
            self._trim(ends[waiting[0] - 1][0] + 1)  # from the end of the capture before it on
        # else the oldest one waiting is the first graph: its warm-up is the recording's start

    def _trim(self, cut: int) -> None:
        """Whole-process checking: drop the eager records before index ``cut``; every capture's
        and replay's records stay, every allocation made during a capture (graph memory), and
        every free of memory a graph uses (the rules at later replays need them: a workspace
        grown by ``resize_()`` in the next batch size's warm-up frees the block the last graph
        reads)."""
        records = self.recorder.trace.records
        kept, capturing = [], False
        for r in records[:cut]:
            kind = type(r)
            if kind is Capture:
                capturing = r.op == "begin"
            if (kind in (Capture, Replay) or getattr(r, "graph", None) is not None or (kind is Alloc and capturing)
                    or self._frees_graph_memory(r)):
                kept.append(r)   # an Alloc inside a capture is graph memory (rule 11 follows it)
        self.recorder.trace.records = kept + records[cut:]
        self._checked_upto = len(self.recorder.trace.records)


def _of_graph(records: list[Record], graph: int) -> list[Record]:
    """What a check about ``graph`` needs (at its capture's end, at its first replay): from the
    end of the capture before it on, the records of no graph and of ``graph``; of the other graphs
    only their brackets and the allocations inside them, which stay graph memory. Their nodes,
    frees and replays add nothing new: a finding about them was reported at their own capture's
    end, or needs a replay (rules 10 and 11), and is reported there. Earlier eager work is other
    graphs' warm-ups: calls of other sizes, not ``graph``'s. So each such check is as long as
    that capture and its eager calls, not as long as the start-up so far."""
    begin = next(i for i in range(len(records) - 1, -1, -1)   # from the end: most checks are of the newest
                 if type(records[i]) is Capture and records[i].graph == graph and records[i].op == "begin")
    start = next((i + 1 for i in range(begin - 1, -1, -1) if type(records[i]) is Capture
                  and records[i].op == "end"), 0)
    brackets = [i for i in range(start) if type(records[i]) is Capture]
    kept: list[Record] = []
    for k, i in enumerate(brackets):
        kept.append(records[i])
        if records[i].op == "begin":   # the allocations until the next bracket are graph memory
            stop = brackets[k + 1] if k + 1 < len(brackets) else start
            kept += [r for r in records[i + 1:stop] if type(r) is Alloc]
    return kept + [r for r in records[start:] if getattr(r, "graph", None) in (None, graph) or type(r) is Capture]


def _from_replays(records: list[Record]) -> list[Record]:
    """What a check at a replay or at the end needs: everything but the eager launches before the
    first replay. Those were the warm-ups: the capture-end checks compared them with the captures
    (rules 7 to 9), and before any replay no eager launch can read what one graph's replay
    clobbered of another's (rule 11). Their frees and allocations stay (rule 10)."""
    first = next((i for i, r in enumerate(records) if type(r) is Replay), len(records))
    return [r for r in records[:first] if type(r) is not Launch or r.graph is not None] + records[first:]


def _with_inputs(records: list[Record], graph: int) -> list[Record]:
    """``records`` with ``graph``'s static inputs named on its ``Capture`` records, where its
    capture named none (a whole process: nobody says which tensors are inputs): what the graph
    reads, not written by it first, that an eager launch wrote between the capture's end and
    its latest replay. A program refreshes its inputs so; weights and constants it leaves alone."""
    bracket = [i for i, r in enumerate(records) if type(r) is Capture and r.graph == graph]
    replays = [i for i, r in enumerate(records) if type(r) is Replay and r.graph == graph]
    if len(bracket) != 2 or records[bracket[0]].inputs or not replays or replays[-1] < bracket[1]:
        return records
    written: Intervals[None] = Intervals()
    reads: list[tuple[int, int, int]] = []   # (lo, hi, ptr) the graph reads before writing
    for r in records[bracket[0]:bracket[1]]:
        if type(r) is Launch and r.graph == graph:
            for a in r.args:
                if not a.nbytes:
                    continue
                lo, hi = a.ptr, a.ptr + a.nbytes
                if a.reads and a.ptr and not written.overlapping(lo, hi):
                    reads.append((lo, hi, a.ptr))
                if a.writes:
                    written.put(lo, hi, None)
    refreshed: Intervals[None] = Intervals(((a.ptr, a.ptr + a.nbytes), None) for r in records[bracket[1]:replays[-1]]
                                           if type(r) is Launch and r.graph is None
                                           for a in r.args if a.writes and a.nbytes)
    inputs = tuple(dict.fromkeys(ptr for lo, hi, ptr in reads if refreshed.overlapping(lo, hi)))
    if not inputs:
        return records
    out = list(records)
    for i in bracket:
        out[i] = replace(records[i], inputs=inputs)
    return out


def checked_run(run: Callable[[], Any], what: str) -> dict[str, Any]:
    """``run()`` under the whole-process check (started here if it is not yet), its warnings
    silenced (the reports are the result), then a last check ``what``: the checker's ``summary``,
    with what stopped ``run`` if something did (a capture error or a fault is the program's
    outcome; what the checks said stands). What the corpus and zoo runners' children record."""
    checker = check_process("warn")
    problem = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run()
        except Exception as exc:
            problem = one_line(exc)
        checker.check_now(what)   # records only: a faulted context is not touched
    return checker.summary(problem)


def checked_in_child(entry: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``entry`` (a ``module:function`` that returns ``checked_run``'s summary) in a fresh child
    process; a child that died (a crash, a timeout) is its ``problem``, with no capture seen: a
    safe program whose check never ran has not passed it."""
    result = run_in_child(entry, payload, timeout)
    if "child_error" in result:
        return {"rules": [], "findings": [], "problem": result["child_error"]["message"], "captures": 0}
    return result


def _key(finding: Finding) -> tuple[Any, ...]:
    return finding.rule, finding.step, finding.label, finding.pointers


def _valid(on_hazard: str) -> str:
    if on_hazard not in ON_HAZARD:
        raise ValueError(f"on_hazard={on_hazard!r} is not one of {', '.join(map(repr, ON_HAZARD))}")
    return on_hazard


@contextmanager
def capture_checked(*, strict: bool = False, on_hazard: str = "raise", meta: dict[str, Any] | None = None,
                    device: Device | None = None) -> Iterator[CaptureChecker]:
    """Record the block and check each CUDA-graph capture in it (see the module doc).

    ``device`` says where the current stream comes from (default: CUDA's; tests fake it).
    """
    recorder = CaptureRecorder({"recorder": "gpu_demo.autocheck", "torch": torch.__version__, **(meta or {})},
                               device=device)
    checker = CaptureChecker(recorder, strict=strict, on_hazard=on_hazard)
    try:
        with recorder:
            yield checker
            checker.check_now("when the block ended")
    except BaseException as exc:
        for report in checker.failures():
            exc.add_note(report.text)
        raise
    failed = checker.failures()
    if failed and on_hazard == "raise":
        raise AssertionError("\n\n".join(r.text for r in failed))


# -- whole-process checking ---------------------------------------------------------------

_process: CaptureChecker | None = None


def process_checker() -> CaptureChecker | None:
    """The whole-process checker, if ``CAPTURE_ORDER_CHECK`` or ``check_process`` started one."""
    return _process


def check_process(on_hazard: str = "warn") -> CaptureChecker:
    """Check every capture from now until the process ends; later calls only set ``on_hazard``."""
    global _process
    if _process is not None:
        _process.on_hazard = _valid(on_hazard)
        return _process
    recorder = CaptureRecorder({"recorder": "gpu_demo.autocheck", "torch": torch.__version__})
    _process = CaptureChecker(recorder, strict=True, on_hazard=on_hazard, raise_at_capture_end=True,
                              window=EAGER_WINDOW)
    _young_generation_for_records()
    recorder.__enter__()  # never left: it lasts as long as the process
    atexit.register(_at_exit, _process)
    return _process


GC_YOUNG = 20_000   # the cyclic collector's first threshold while the whole process is recorded


def _young_generation_for_records() -> None:
    """Let the cyclic collector's youngest generation grow to ``GC_YOUNG`` objects (CPython's
    default is 700). Every op recorded leaves records that live on, and at the default each few
    hundred of them start a collection, every tenth an older one, and in turn a full one over
    torch's whole heap: on the H200 start-up benchmark the collector alone took a quarter of the
    checked start-up. Cyclic garbage is still collected, in larger, rarer batches; nothing else changes."""
    young, *older = gc.get_threshold()
    if young and young < GC_YOUNG:
        gc.set_threshold(GC_YOUNG, *older)


def _at_exit(checker: CaptureChecker) -> None:
    """The process ends: a last check, warning only (an exception at exit would only print)."""
    checker.on_hazard = "warn"
    checker.check_now("when the process ended")
