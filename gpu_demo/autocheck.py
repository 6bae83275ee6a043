"""Check every CUDA-graph capture a program makes, as it makes it.

In a test or a script::

    from gpu_demo import capture_checked

    with capture_checked() as checked:
        warm_up()
        with torch.cuda.graph(g):
            layer(static_in)
    print(checked.reports[0].text)

records everything inside (warm-up too) and, at the end of each capture,
runs ``simlib.checker`` on what was recorded of that graph. A hazard raises
``AssertionError`` with the report when the block exits (``on_hazard="warn"``
warns a ``CaptureHazardWarning`` instead; ``strict=True`` counts the checker's
warnings, the races, as hazards too).

For a whole program, unmodified, in the spirit of ``TORCH_CUDA_SANITIZER=1``::

    CAPTURE_ORDER_CHECK=1 python your_script.py args...                  # needs the .pth (below)
    CAPTURE_ORDER_CHECK=1 python -m gpu_demo.autocheck your_script.py args...

``1`` (or ``warn``) warns at the end of every capture with a finding;
``strict`` raises ``AssertionError`` there (after ``torch.cuda.graph`` has
restored the current stream). The first form works where the package's
``capture_order_check.pth`` is in site-packages: a normal ``pip install``
puts it there, and so does ``make`` for its ``.venv``; an editable install
alone (``pip install -e .``, the conda environment) does not, so there use
``python -m gpu_demo.autocheck``, which works everywhere the package imports.

Whole-process checking records nothing outside captures and forgets each
capture once checked, so the trace stays small in a long run. Its dispatch
mode goes onto the capturing thread's stack when a capture begins and comes
off when it ends: outside captures an op pays only for torch's GPU-trace
callbacks (a few µs where it allocates, frees or records an event), inside
one it pays for the recording. One capture at a time.
"""

from __future__ import annotations

import os
import runpy
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import torch
from simlib.trace import Capture, Trace

from .recorder import CaptureRecorder, Device

ENV = "CAPTURE_ORDER_CHECK"
ON_HAZARD = ("raise", "warn")
ENV_MODES = {"1": "warn", "warn": "warn", "strict": "raise"}


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
        from simlib.checker import check, format_report

        trace = self.recorder.snapshot(graph)
        findings = tuple(check(trace))
        end = next(r for r in reversed(trace.records) if type(r) is Capture and r.graph == graph)
        failed = f"capture failed: {end.error}\n" if end.error else ""
        text = f"capture of graph {graph} (capture-order check):\n{failed}{format_report(list(findings))}"
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
_env_read = False


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


def mode_from(environ: Mapping[str, str]) -> str | None:
    """``warn``, ``raise`` or ``None`` (off) for ``CAPTURE_ORDER_CHECK`` in ``environ``."""
    value = environ.get(ENV, "").strip().lower()
    if value in ("", "0"):
        return None
    if value not in ENV_MODES:
        raise ValueError(f"{ENV}={value!r} is not one of {', '.join(ENV_MODES)} (or 0 for off)")
    return ENV_MODES[value]


def check_process_from_env(environ: Mapping[str, str] = os.environ) -> CaptureChecker | None:
    """Start whole-process checking if ``CAPTURE_ORDER_CHECK`` asks for it (the .pth calls this).

    Python can run the .pth twice (a venv's ``lib64`` links to ``lib``): the second call
    only returns what the first started.
    """
    global _env_read
    if _env_read:
        return _process
    _env_read = True
    try:
        mode = mode_from(environ)
    except ValueError as exc:
        print(f"capture-order check is off: {exc}", file=sys.stderr)
        return None
    return None if mode is None else check_process(mode)


USAGE = "usage: python -m gpu_demo.autocheck [--strict] (script.py | -m module) [args...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run a script or module (``python -m gpu_demo.autocheck``) with every capture checked."""
    args = list(sys.argv[1:] if argv is None else argv)
    strict = bool(args) and args[0] == "--strict"
    args = args[strict:]
    if not args or args[0] in ("-h", "--help") or (args[0] == "-m" and len(args) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        mode = "raise" if strict else mode_from(os.environ) or "warn"
    except ValueError as exc:
        print(f"{exc}\n{USAGE}", file=sys.stderr)
        return 2
    check_process(mode)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    # Run the package's copy of this module, the one a .pth may already have started.
    from gpu_demo.autocheck import main as package_main

    sys.exit(package_main())
