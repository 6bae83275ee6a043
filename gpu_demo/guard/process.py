"""Checking captures as a program makes them: ``capture_checked()`` and the whole process.

``capture_checked()`` records everything inside its ``with`` block (warm-up
too) and, at the end of each capture, runs ``simlib.checker`` on what was
recorded of that graph. A hazard raises ``AssertionError`` with the report when
the block exits (``on_hazard="warn"`` warns a ``CaptureHazardWarning`` instead;
``strict=True`` counts the checker's warnings, the races, as hazards too).

``check_process()`` does the same for every capture until the process ends
(``CAPTURE_ORDER_CHECK=1``; ``gpu_demo.autocheck`` starts it). It records
nothing outside captures and forgets each capture once checked, so the trace
stays small in a long run. Its dispatch mode goes onto the capturing thread's
stack when a capture begins and comes off when it ends: outside captures an op
pays only for torch's GPU-trace callbacks (a few µs where it allocates, frees
or records an event), inside one it pays for the recording. One capture at a
time.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from gpu_demo.record.cuda_device import Device
from gpu_demo.record.recorder import CaptureRecorder
from simlib.checker import check, format_report
from simlib.trace import Capture, Trace

ON_HAZARD = ("raise", "warn")


class CaptureHazardWarning(UserWarning):
    """A capture froze something the checker says a replay will get wrong."""


@dataclass(frozen=True)
class CaptureReport:
    """What the checker found in one capture (``findings``: ``simlib.checker.Finding``)."""

    graph: int
    findings: tuple[Any, ...]
    text: str
    capture_error: str | None = None

    def fails(self, strict: bool) -> bool:
        """A hazard: an error finding, or with ``strict`` any finding."""
        return any(strict or f.severity == "error" for f in self.findings)


@dataclass
class CaptureChecker:
    """Checks each capture ``recorder`` sees end and keeps the reports.

    ``raise_at_capture_end`` raises at once (whole-process checking, where no
    block ends); otherwise ``capture_checked`` raises when its block exits.
    ``forget`` drops each capture's records once checked.
    """

    recorder: CaptureRecorder
    strict: bool = False
    on_hazard: str = "raise"
    raise_at_capture_end: bool = False
    forget: bool = False
    reports: list[CaptureReport] = field(default_factory=list)

    def __post_init__(self) -> None:
        _valid(self.on_hazard)
        self.recorder.capture_ended.append(self.check_graph)

    @property
    def trace(self) -> Trace:
        """Everything recorded so far, with final stream names."""
        return self.recorder.snapshot()

    def failures(self) -> list[CaptureReport]:
        return [r for r in self.reports if r.fails(self.strict)]

    def check_graph(self, graph: int) -> None:
        trace = self.recorder.snapshot(graph)
        findings = tuple(check(trace))
        end = next(r for r in reversed(trace.records) if type(r) is Capture and r.graph == graph)
        failed = f"capture failed: {end.error}\n" if end.error else ""
        who = f"rank {os.environ['RANK']}: " if "RANK" in os.environ else ""   # one rank of a torchrun job
        text = f"{who}capture of graph {graph} (capture-order check):\n{failed}{format_report(list(findings))}"
        report = CaptureReport(graph, findings, text, end.error)
        self.reports.append(report)
        if self.forget:
            self.recorder.trace.records.clear()
        if not report.fails(self.strict):
            return
        if self.on_hazard == "warn":
            warnings.warn(text, CaptureHazardWarning, stacklevel=2)
        elif self.raise_at_capture_end:
            raise AssertionError(text)


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
    recorder = CaptureRecorder({"recorder": "gpu_demo.autocheck", "torch": torch.__version__}, eager=False)
    _process = CaptureChecker(recorder, strict=True, on_hazard=on_hazard, raise_at_capture_end=True, forget=True)
    recorder.__enter__()  # never left: it lasts as long as the process
    return _process
