"""Checking captures as a program makes them: ``capture_checked()`` and the whole process.

``capture_checked()`` records everything inside its ``with`` block: the eager
calls before a capture, the capture, and the replays, frees and eager work
after it. An incremental checker (``simlib.checker.IncrementalChecker``) is
fed what was recorded since the last check, at the end of each capture and at
each replay, so a check costs what happened since the last one, never the
whole history: the capture's own rules when it ends, the eager calls before it
compared with it (rules 8 and 9: ``calls.with_calls`` infers where each call
began), the warm-up against the static inputs the program refreshed at the
graph's first replay (rule 7), and at replays what graphs' memory went through
(rules 10 and 11). Each finding is reported once, at the check that finds it.
A hazard raises ``AssertionError`` with the report when the block exits
(``on_hazard="warn"`` warns a ``CaptureHazardWarning`` at once instead,
pointing at the user's line that ended the capture or replayed the graph;
``strict=True`` counts the checker's warnings, the races, as hazards too).
A block that captured nothing warns ``NoCaptureWarning`` (an ``AssertionError``
with ``strict=True``), and a whole process says so in one line at exit:
nothing checked is never an all-clear (``gpu_demo.guard.no_capture``).

``check_process()`` does the same for every capture until the process ends
(``CAPTURE_ORDER_CHECK=1``; ``gpu_demo.autocheck`` starts it), with a last
check at exit. It keeps no history: what the checker was fed is dropped, and
the checker keeps state per graph and the eager records since the last
capture (the next capture's warm-up, at most ``WINDOW``). Once the program
serves (its first replay: a server captures every batch size, then replays) the
recorder stands aside: it records only what touches memory a rule follows (a graph's
live results, what a graph not yet replayed reads, the blocks graphs use) and
every capture, so a served step costs about what it costs unchecked, however
long the server runs. A capture made after that is checked without its warm-up
(rules 7 to 9 compare the two). A start-up that captures in a loop makes it stand
aside sooner: once a capture repeats the one before it (``_repeats``), the loop's
later warm-ups are not recorded (the first two were compared with their captures),
its captures are, and so are the frees of the blocks graphs use. ``torch.cuda.make_graphed_callables`` captures
through ``torch.cuda.graph`` with a shared pool, so both forms check it
unchanged. One capture at a time.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import re
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import torch

from gpu_demo.guard.no_capture import NoCaptureWarning, no_capture
from gpu_demo.guard.protocol.child import run_in_child
from gpu_demo.guard.protocol.cuda_errors import one_line
from gpu_demo.guard.record.aside import CLONE_KERNEL
from gpu_demo.guard.record.call_site import user_stacklevel
from gpu_demo.guard.record.cuda_device import Device
from gpu_demo.guard.record.naming import renamed_text
from gpu_demo.guard.record.recorder import CaptureRecorder
from simlib.checker import Finding, IncrementalChecker, format_report
from simlib.checker.incremental import WINDOW
from simlib.checker.sites import SiteBook, located
from simlib.trace import Capture, Replay

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


def _timed(method: Callable[..., None]) -> Callable[..., None]:
    """A check's entry point, timed into ``check_s``: feeding its records counts, not only the rules."""
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
    """Feeds what ``recorder`` records to an incremental checker at each capture end and replay,
    and keeps the reports.

    ``whole_process``: checking a whole process, where no block ends: a hazard raises at once
    (``on_hazard="raise"``), what was fed is dropped, and the recorder stands aside once the
    program serves; otherwise ``capture_checked`` raises when its block exits, and the trace
    stays whole (``trace``).
    """

    recorder: CaptureRecorder
    strict: bool = False
    on_hazard: str = "raise"
    whole_process: bool = False
    reports: list[CaptureReport] = field(default_factory=list)
    check_s: float = 0.0   # seconds spent checking so far (what the recording costs besides, it does not know)
    captures: int = 0      # captures begun so far
    serving: bool = False  # the recorder stands aside (whole process, once the program serves)
    looping: bool = False  # it stands aside between captures (whole process, in a capture loop: ``_repeats``)
    checker: IncrementalChecker = field(init=False)
    _fed: int = 0          # records of ``recorder.trace`` fed so far
    _watched: tuple[int, bool] = (-1, False)   # the checker's ``watch_changes`` and ``serving`` the watch was given
    _last_capture: tuple[Any, ...] | None = None   # what the last capture did (``_repeats``)
    _reported: set[tuple[Any, ...]] = field(default_factory=set)
    _sites: SiteBook = field(init=False)   # the user's lines of records fed and dropped

    def __post_init__(self) -> None:
        _valid(self.on_hazard)
        self.checker = IncrementalChecker(whole_program=True, window=WINDOW)
        self._sites = SiteBook(WINDOW)
        self.recorder.capture_ended.append(self.check_graph)
        self.recorder.replayed.append(self.check_replay)
        if self.whole_process:   # a program that records long without capturing or replaying
            self.recorder.records_full = self.check_records

    @property
    def trace(self):  # noqa: ANN201 (a simlib Trace)
        """What was recorded, with final names (a whole process keeps only what was not yet fed)."""
        return self.recorder.snapshot()

    def failures(self) -> list[CaptureReport]:
        return [r for r in self.reports if r.fails(self.strict)]

    def summary(self, problem: str | None = None) -> dict[str, Any]:
        """What the checks found over a program, as the runners record it: the rules that fired,
        every finding, what stopped the program (``problem``, if something did), the captures seen."""
        findings = [f for report in self.reports for f in report.findings]
        return {"rules": [f"rule {rule} ({code})" for rule, code in sorted({(f.rule, f.code) for f in findings})],
                "findings": [f.to_dict() for f in findings], "problem": problem, "captures": self.captures}

    @_timed
    def check_graph(self, graph: int) -> None:
        """At the end of ``graph``'s capture: its own rules, and the eager calls before it."""
        found = self._feed()
        end = self.checker.index.graph(graph).end
        error = end.error if end is not None else None
        failed = f"capture failed: {error}\n" if error else ""
        self._report(graph, found, f"capture of graph {graph}", failed, error, always=True)
        if self.whole_process and self._repeats(graph):
            self.looping = True
        self._watch()

    @_timed
    def check_replay(self, graph: int) -> None:
        """At a replay of ``graph``: what the records since the last check reveal."""
        records = self.recorder.trace.records
        replay = records[-1] if records else None
        found = self._feed()
        if found:
            self._report(graph, found, f"replay #{replay.index if type(replay) is Replay else '?'} of graph {graph}",
                         "", None)
        self.serving = self.serving or self.whole_process
        if self.serving:
            self.checker.forget_eager()
            self.recorder.aside.replayed(graph, lambda: self.checker.results_of(graph))
        self._watch()

    @_timed
    def check_records(self) -> None:
        """The recorder holds ``RECORDS_CAP`` records: feed them (the checker keeps a window)."""
        self._report(None, self._feed(), "while recording", "", None)

    @_timed
    def check_now(self, what: str = "at the end") -> None:
        """A last check (the block exits, the process ends): what is left to feed, then what only
        the end can tell (a free in a capture no replay followed, inputs left stale)."""
        found = self._feed() + self._located(self.checker.finish())
        self._report(None, found, what, "", None)

    def _repeats(self, graph: int) -> bool:
        """Did ``graph``'s capture repeat the one before it: the same line captured the same kernels,
        issued from the same lines (a start-up capturing one graph per batch size)? Then the program
        captures in a loop, and the warm-ups of the loop's later captures would tell the checks
        nothing the first two did not (rules 7 to 9, 15 and 18 compared those with their captures)."""
        g = self.checker.index.graph(graph)
        did = None if g.failed or g.begin is None else (g.begin.site, [(n.site, n.kernel) for n in g.nodes])
        repeated = did is not None and did == self._last_capture
        self._last_capture = did
        return repeated

    def _watch(self) -> None:
        """Standing aside: tell the recorder what to watch whenever the checker's answer changed.
        Between a loop's captures, before any replay, no eager read or write is watched: no graph
        holds a result yet (rules 11 and 13), and what the warm-ups write names no input (rule 7
        names them by the writes between a graph's capture and its first replay, once it serves)."""
        state = (self.checker.watch_changes, self.serving)
        if (self.serving or self.looping) and self._watched != state:
            self._watched = state
            self.recorder.stand_aside(self.checker.watched_reads() if self.serving else [],
                                      self.checker.watched_frees(),
                                      copies_recorded=self.checker.ties_writers(CLONE_KERNEL))

    def _feed(self) -> list[Finding]:
        records = self.recorder.trace.records
        new = records[self._fed:]
        self.captures += sum(type(r) is Capture and r.op == "begin" for r in new)
        found = self.checker.feed(new)
        if self.whole_process:
            self._sites.add(new)   # fed: the checker keeps what it needs, the book their lines
            del records[:]
            self._fed = 0
        else:
            self._fed = len(records)
        return self._located(found)

    def _located(self, found: list[Finding]) -> list[Finding]:
        """``found`` with the user's lines: from the book once records are dropped, else the records."""
        if not found:
            return found
        return self._sites.located(found) if self.whole_process else located(found, self.recorder.trace.records)

    def _report(self, graph: int | None, found: list[Finding], what: str, failed: str, error: str | None,
                *, always: bool = False) -> None:
        found = [f for f in found if _key(f) not in self._reported]
        self._reported.update(map(_key, found))
        if not found and not always:
            return
        streams, names = self.recorder.streams.final(), self.recorder.late_names()
        found = [replace(f, label=_renamed(f.label, streams, names), why=_renamed(f.why, streams, names),
                         fix=_renamed(f.fix, streams, names)) for f in found]
        who = f"rank {os.environ['RANK']}: " if "RANK" in os.environ else ""   # one rank of a torchrun job
        text = f"{who}{what} (capture-order check):\n{failed}{format_report(found, sites=True)}"
        report = CaptureReport(-1 if graph is None else graph, tuple(found), text, error)
        self.reports.append(report)
        if not report.fails(self.strict):
            return
        if self.on_hazard == "warn":
            warnings.warn(text, CaptureHazardWarning, stacklevel=user_stacklevel())
        elif self.whole_process:
            raise AssertionError(text)


PLACEHOLDER = re.compile(r"\bt(\d+)\b")   # a tensor's automatic label (``t<id>``) in a finding's text


def _renamed(text: str, streams: dict[str, str], names: dict[int, str]) -> str:
    """``text`` with final stream names, and the names ``label()`` gave tensors after their records."""
    text = renamed_text(text, streams)
    if names:
        text = PLACEHOLDER.sub(lambda m: names.get(int(m.group(1)), m.group(0)), text)
    return text


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
    if not checker.captures:   # nothing was checked: never an all-clear (``gpu_demo.guard.no_capture``)
        said = no_capture("in the capture_checked() block")
        if strict:
            raise AssertionError(said + " (strict=True asks for one)")
        warnings.warn(said, NoCaptureWarning, stacklevel=user_stacklevel())


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
    _process = CaptureChecker(recorder, strict=True, on_hazard=on_hazard, whole_process=True)
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
    if not checker.captures:
        print(no_capture("in this process"), file=sys.stderr)
