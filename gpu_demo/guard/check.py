"""A guard for test suites: is this function safe to capture into a CUDA graph?

    from gpu_demo import assert_capture_safe

    def test_my_layer_is_capture_safe():
        assert_capture_safe("mypkg.layers:make")            # a factory, built in the child
        assert_capture_safe(my_function, hidden_states)      # a module-level function

``check_capture(fn, *inputs)`` gathers two kinds of evidence and returns a
``GuardReport``; ``assert_capture_safe`` raises ``CaptureNotSafe`` (an
``AssertionError`` carrying the report) unless it passes.

* **Static** (explains): ``gpu_demo.record.recorder`` records a warm-up and a capture
  and ``simlib.checker`` reads the trace: the host emptied a tensor a later
  launch froze, a null argument, a race, a block reused across streams, ...
* **Differential replay** (proves): ``gpu_demo.guard.differential`` captures ``fn``,
  replays it on fresh random inputs and compares every replay with an eager
  reference. A fault, a capture error or a mismatch fails.

Each runs in a child process (``gpu_demo.protocol.child``), so a replay that faults
(``cudaErrorIllegalAddress`` loses the CUDA context) cannot kill the caller;
how ``fn`` reaches the child and which callables count as factories is in
``gpu_demo.guard.target``. ``isolate=False`` runs everything in this process instead
(a lambda then works, and a device fault ends this process). Without CUDA only
the recorder's dry run runs, and the report says the replay was not run.

The verdict uses ``simlib.glossary``'s words: what the replays showed
(``correct``, ``silent_wrong``, ``illegal_address``, ``capture_error:<name>``),
or ``unordered`` when they were correct but the checker found a race (rules
3 and 4), a hazard the hardware has not lost yet. ``unordered`` fails only with
``strict=True``; a checker error (rules 1, 2, 5, ...) fails even when the
replays were correct, since the checker read it off what the capture froze.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from gpu_demo.guard.differential import Subject, describe, record_in_child, replay_in_child
from gpu_demo.guard.target import Target, TargetError, factory_call, name_of, portable, resolve
from gpu_demo.protocol.capture_replay import ReplayEvidence
from gpu_demo.protocol.child import run_in_child
from simlib.checker import ERROR, Finding, check, format_report
from simlib.glossary import CAPTURE_ERROR_PREFIX, CORRECT, UNORDERED, words
from simlib.trace import Trace

RACE_CODES = frozenset({"cross_stream_race", "reuse_after_free"})
DRY_RUN_LIMIT = ("A dry run sees only what the code does on the CPU: a path taken only under a real CUDA "
                 "capture (torch.cuda.is_current_stream_capturing(), CUDA streams, Triton kernels) did not run. "
                 "Run the check on a GPU for the real capture and the replays.")


def check_trace(trace: Trace) -> tuple[list[Finding], str]:
    """``simlib.checker``'s findings for ``trace`` and its printable report."""
    findings = check(trace)
    return findings, format_report(findings)


@dataclass
class GuardReport:
    """What the guard found for one function: the verdict, the proof and the explanation.

    ``verdict``           a ``simlib.glossary`` outcome, or ``None`` when nothing was replayed
                          and the dry-run capture went through (no evidence either way)
    ``replay``            the differential replay's evidence (``ran=False`` and why)
    ``findings``          the checker's findings on the recording
    ``recording_error``   the recorder's capture failed with this outcome (``capture_error:<name>``)
    ``problem``           the check itself could not be completed (the function failed eagerly,
                          the child died, ...); such a report never passes
    """

    target: str
    mode: str
    verdict: str | None
    replay: ReplayEvidence
    findings: list[Finding] = field(default_factory=list)
    recording_error: str | None = None
    problem: str | None = None
    strict: bool = False

    @property
    def rules(self) -> list[str]:
        """The rules that fired, once each: ``["rule 1 (host_mutation)", ...]``."""
        return [f"rule {rule} ({code})" for rule, code in sorted({(f.rule, f.code) for f in self.findings})]

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    @property
    def passed(self) -> bool:
        if self.problem or self.verdict not in (None, CORRECT, UNORDERED):
            return False
        if any(f.severity == ERROR for f in self.findings):
            return False
        return not (self.strict and self.findings)

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        """The report a person reads: verdict, the replay's proof, the checker's explanation."""
        said = "not replayed" if self.verdict is None else f"{words(self.verdict)} ({self.verdict})"
        lines = [f"{self.target}: {'passed' if self.passed else 'NOT capture-safe'}, verdict: {said}"]
        if self.problem:
            lines.append(f"could not check: {self.problem}")
        lines.append("replay (the proof): " + describe(self.replay))
        if self.recording_error:
            lines.append(f"recording: the recorder's capture failed: {self.recording_error}")
        lines.append("checker (the explanation): " + (", ".join(self.rules) or "no findings"))
        if self.verdict == UNORDERED and not self.strict:
            lines.append("unordered fails only with strict=True (CLI: --strict)")
        if self.mode == "dry_run":
            lines.append(DRY_RUN_LIMIT)
        text = "\n".join(textwrap.fill(line, 100, subsequent_indent="  ") for line in lines)
        return text + ("\n\n" + format_report(self.findings) if self.findings else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "mode": self.mode, "verdict": self.verdict, "passed": self.passed,
            "strict": self.strict, "rules": self.rules, "codes": self.codes,
            "recording_error": self.recording_error, "problem": self.problem,
            "replay": self.replay.to_dict(), "findings": [f.to_dict() for f in self.findings],
        }


class CaptureNotSafe(AssertionError):
    """``assert_capture_safe`` failed; ``.report`` is the ``GuardReport``."""

    def __init__(self, report: GuardReport) -> None:
        super().__init__(report.format())
        self.report = report


def check_capture(
    fn: Target,
    *inputs: torch.Tensor,
    reference: Target | None = None,
    replays: int = 3,
    strict: bool = False,
    isolate: bool = True,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    timeout: float = 600.0,
) -> GuardReport:
    """Record, check and (on a GPU) differentially replay ``fn(*inputs)``; never raises on a hazard.

    ``fn``        the function under test, a factory of it, or a ``"module:callable"`` string
                  (``gpu_demo.guard.target``); a factory may supply the example inputs
    ``inputs``    example tensors: their shapes and dtypes are the captured static inputs
    ``reference`` computes the right answer eagerly (default: ``fn`` itself, see ``gpu_demo.guard.differential``)
    ``dtype``     for factories (default: the first floating input's, else bfloat16)

    With CUDA, everything runs on the GPU: the inputs are moved there and factories build
    there; an ``nn.Module`` instance passed as ``fn`` must already be there.
    """
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("check_capture(fn, *inputs): the inputs must be tensors (or none, when fn is a "
                        "factory returning (fn, example_inputs))")
    if not isinstance(replays, int) or isinstance(replays, bool) or replays < 1:
        raise ValueError(f"replays must be a positive integer, got {replays!r}")
    if factory_call(resolve(fn)) is None and not inputs:
        raise TargetError(f"no example inputs for {name_of(fn)}: pass example tensors after it (CLI: "
                          "--input-shape), or pass a factory that returns (fn, example_inputs)")
    if reference is not None:
        resolve(reference)
    floating = [t.dtype for t in inputs if t.dtype.is_floating_point]
    subject = Subject(
        target=portable(fn) if isolate else resolve(fn), name=name_of(fn),
        inputs=tuple(t.detach().cpu() for t in inputs) or None,
        dtype=dtype or (floating[0] if floating else torch.bfloat16), replays=replays, seed=seed,
        reference=None if reference is None else (portable(reference) if isolate else resolve(reference)),
        reference_name=None if reference is None else name_of(reference),
    )
    raw: dict[str, Any] = {}
    for step in (record_in_child, replay_in_child):
        if isolate and torch.cuda.is_available():
            raw.update(run_in_child(f"{step.__module__}:{step.__name__}", {"subject": subject}, timeout))
        else:
            raw.update(_in_process(step, subject))
        if "child_error" in raw:
            break
    return _report(subject.name, raw, strict)


def assert_capture_safe(fn: Target, *inputs: torch.Tensor, **options: Any) -> GuardReport:
    """``check_capture`` (same arguments), raising ``CaptureNotSafe`` unless the report passes;
    returns the report when it does."""
    report = check_capture(fn, *inputs, **options)
    if not report.passed:
        raise CaptureNotSafe(report)
    return report


def _in_process(step: Callable[..., dict[str, Any]], subject: Subject) -> dict[str, Any]:
    known: dict[str, Any] = {}
    try:
        known.update(step({"subject": subject}, known.update))
    except Exception as exc:  # the function failed: a result to report, like the child's
        known["child_error"] = {"message": f"{type(exc).__name__}: {exc}".splitlines()[0], "detail": ""}
    return known


def _report(name: str, raw: dict[str, Any], strict: bool) -> GuardReport:
    trace = Trace.from_json(raw["trace"]) if "trace" in raw else None
    findings = check(trace) if trace is not None else []
    recording_error = trace.meta.get("capture_error") if trace is not None else None
    problem = raw["child_error"]["message"] if "child_error" in raw else None
    if "replay" in raw:
        replay = ReplayEvidence(**raw["replay"])
    else:
        stage = "the recording" if trace is None else "the replay"
        replay = ReplayEvidence(False, reason=f"{stage} did not finish" + (f": {problem}" if problem else ""))
    return GuardReport(target=name, mode=raw.get("mode", "none"), findings=findings,
                       verdict=_verdict(replay, recording_error, findings), replay=replay,
                       recording_error=recording_error, problem=problem, strict=strict)


def _verdict(replay: ReplayEvidence, recording_error: str | None, findings: list[Finding]) -> str | None:
    """What the replays proved (a race turns ``correct`` into ``unordered``); without replays,
    the dry run's capture error if it had one."""
    if replay.ran and replay.outcome is not None:
        if replay.outcome == CORRECT and any(f.code in RACE_CODES for f in findings):
            return UNORDERED
        return replay.outcome
    return recording_error if recording_error and recording_error.startswith(CAPTURE_ERROR_PREFIX) else None

