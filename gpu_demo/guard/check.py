"""A guard for test suites: is this function safe to capture into a CUDA graph?

    from gpu_demo import assert_capture_safe

    def test_my_layer_is_capture_safe():
        assert_capture_safe("mypkg.layers:make")            # a factory, built in the child
        assert_capture_safe(my_function, hidden_states)      # a module-level function

``check_capture(fn, *inputs)`` gathers two kinds of evidence and returns a
``GuardReport``; ``assert_capture_safe`` raises ``CaptureNotSafe`` (an
``AssertionError`` carrying the report) unless it passes.

* **Static** (explains): ``gpu_demo.guard.record.recorder`` records a warm-up and a capture
  and ``simlib.checker`` reads the trace: the host emptied a tensor a later
  launch froze, a null argument, a race, a block reused across streams, ...
* **Differential replay** (proves): ``gpu_demo.guard.differential`` captures ``fn``,
  replays it on fresh random inputs and compares every replay with an eager
  reference. A fault, a capture error or a mismatch fails.

Both run in one child process (``gpu_demo.guard.protocol.child``), so a replay that faults
(``cudaErrorIllegalAddress`` loses the CUDA context) cannot kill the caller; inside
``warm_checks()`` (or with the pytest plugin ``gpu_demo.guard.pytest_plugin``) that
process is a warm worker (``gpu_demo.guard.protocol.worker``) kept for the next check, so
torch and your modules are imported once. How ``fn`` reaches the child and which
callables count as factories is in ``gpu_demo.guard.target``. ``isolate=False`` runs
everything in this process instead (a device fault then ends it).

The report has one of four answers (``simlib.glossary.GUARD_ANSWERS``), its first words (``GuardReport.answer``):

* ``passed``: replayed on a GPU, every replay right, and no checker error;
* ``NOT capture-safe``: a hazard, proved by the replays or read off the capture
  by the checker; or ``graph and eager differ`` (below);
* ``could not check``: the check itself could not be done here (the function
  fails without any capture, a Triton kernel without CUDA, a child that died, a
  reference that disagrees with itself): neither safe nor unsafe;
* ``NOT CHECKED ON A GPU``: without CUDA only the CPU dry run ran and found nothing.
  Nothing was captured or replayed, so no pool reuse and no race was seen: this
  is never a pass (``passed`` is False), and ``assert_capture_safe`` raises
  ``CaptureNotChecked`` unless ``dry_run_ok=True`` accepts the static part alone.

The verdict uses ``simlib.glossary``'s words: what the replays showed
(``correct``, ``silent_wrong``, ``illegal_address``, ``capture_error:<name>``),
``unordered`` when they were correct but the checker found a race (rules 3 and
4), a hazard the hardware has not lost yet, and ``graph_eager_differ`` when the
replays missed the reference but the checker found nothing in the capture: the
guard then shows both sides and does not name the capture as the culprit (a
program whose captured path deliberately differs, random numbers it could not
reseed). Two guards against a misleading reference: it runs twice on one input
first (a reference that disagrees with itself is reported, not blamed on the
capture), and random ops draw the same numbers in the reference and the replay
(``gpu_demo.guard.stochastic``). ``unordered`` fails only with ``strict=True``; a
checker error (rules 1, 2, 5, ...) fails even when the replays were correct, since
the checker read it off what the capture froze.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from gpu_demo.guard.differential import Subject, check_in_child, describe, replay_in_child
from gpu_demo.guard.protocol.capture_replay import ReplayEvidence
from gpu_demo.guard.protocol.child import ChildError
from gpu_demo.guard.protocol.child_result import ChildResult
from gpu_demo.guard.protocol.tolerance import dtype_named
from gpu_demo.guard.protocol.worker import run_checked
from gpu_demo.guard.record.dry_run import NOT_SEEN
from gpu_demo.guard.stochastic import random_ops
from gpu_demo.guard.target import Target, TargetError, factory_call, floating_dtype, name_of, portable, resolve
from simlib.checker import ERROR, Finding, check, format_report
from simlib.checker.verdict import verdict
from simlib.glossary import (
    CAPTURE_ERROR_PREFIX,
    CORRECT,
    COULD_NOT_CHECK,
    GRAPH_EAGER_DIFFER,
    NOT_ON_GPU,
    NOT_SAFE,
    PASSED,
    SILENT_WRONG,
    UNORDERED,
    words,
)
from simlib.trace import Trace

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
    ``recording_message`` where and with which error (PyTorch's own text) it failed
    ``problem``           the check itself could not be completed (the function failed eagerly,
                          the child died, the reference disagrees with itself); never passes
    """

    target: str
    mode: str
    verdict: str | None
    replay: ReplayEvidence
    findings: list[Finding] = field(default_factory=list)
    recording_error: str | None = None
    problem: str | None = None
    strict: bool = False
    recording_message: str | None = None
    """PyTorch's error of the failed recording, and the call it failed in"""

    @property
    def rules(self) -> list[str]:
        """The rules that fired, once each: ``["rule 1 (host_mutation)", ...]``."""
        return [f"rule {rule} ({code})" for rule, code in sorted({(f.rule, f.code) for f in self.findings})]

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    @property
    def answer(self) -> str:
        """``NOT capture-safe``, ``could not check``, ``graph and eager differ``, ``NOT CHECKED ON A GPU``
        or ``passed`` (module docstring), in that order: a hazard the replays or the checker proved
        stands even when the rest of the check could not be done."""
        proved = self.verdict not in (None, CORRECT, UNORDERED, GRAPH_EAGER_DIFFER)
        if proved or any(f.severity == ERROR for f in self.findings) or (self.strict and self.findings):
            return NOT_SAFE
        if self.problem:
            return COULD_NOT_CHECK
        if self.verdict == GRAPH_EAGER_DIFFER:
            return words(GRAPH_EAGER_DIFFER)
        return NOT_ON_GPU if self.verdict is None else PASSED

    @property
    def passed(self) -> bool:
        """True only when replays on a GPU proved it (a dry run never passes)."""
        return self.answer == PASSED

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        """The report a person reads: the answer (and, on a CPU, what was not done) first, then the
        replay's proof and the checker's explanation."""
        said = "not replayed" if self.verdict is None else f"{words(self.verdict)} ({self.verdict})"
        first = f"{self.target}: {self.answer}"
        if self.mode == "dry_run":
            first += f" ({NOT_SEEN})"
        lines = [first + f"; verdict: {said}"]
        if self.problem:
            lines.append(f"could not check: {self.problem}")
        if self.verdict == GRAPH_EAGER_DIFFER:
            lines.append("the replays and the eager reference disagree, and the checker found nothing in the "
                         "capture: both are shown below; which one you meant, the guard cannot tell")
        lines.append("replay (the proof): " + describe(self.replay))
        if self.recording_error:
            lines.append(f"recording: failed with {self.recording_error}"
                         + (f" in {self.recording_message}" if self.recording_message else ""))
        lines.append("checker (the explanation): " + (", ".join(self.rules) or "no findings"))
        if self.verdict == UNORDERED and not self.strict:
            lines.append("unordered fails only with strict=True (CLI: --strict)")
        if self.mode == "dry_run":
            lines.append(DRY_RUN_LIMIT)
        text = "\n".join(textwrap.fill(line, 100, subsequent_indent="  ") for line in lines)
        return text + ("\n\n" + format_report(self.findings, sites=True) if self.findings else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "mode": self.mode, "answer": self.answer, "verdict": self.verdict,
            "passed": self.passed, "strict": self.strict, "rules": self.rules, "codes": self.codes,
            "recording_error": self.recording_error, "recording_message": self.recording_message,
            "problem": self.problem,
            "replay": self.replay.to_dict(), "findings": [f.to_dict() for f in self.findings],
        }


class CaptureNotSafe(AssertionError):
    """``assert_capture_safe`` failed; ``.report`` is the ``GuardReport``."""

    def __init__(self, report: GuardReport) -> None:
        super().__init__(report.format())
        self.report = report


class CaptureNotChecked(CaptureNotSafe):
    """``assert_capture_safe`` could not prove it: no GPU (only a dry run), or the check itself
    could not be done (``report.answer`` says which)."""


def check_capture(
    fn: Target,
    *inputs: torch.Tensor,
    reference: Target | None = None,
    replays: int = 3,
    strict: bool = False,
    isolate: bool = True,
    dtype: torch.dtype | str | None = None,
    seed: int = 0,
    timeout: float = 600.0,
    kwargs: dict[str, Any] | None = None,
    fresh_inputs: Callable[..., Any] | None = None,
) -> GuardReport:
    """Record, check and (on a GPU) differentially replay ``fn(*inputs)``; never raises on a hazard.

    ``fn``           the function under test, a factory of it (a ``functools.partial`` of one too),
                     or a ``"module:callable"`` or ``"file.py:callable"`` string (``gpu_demo.guard.target``);
                     a factory may supply the example inputs
    ``inputs``       example tensors: their shapes and dtypes are the captured static inputs
    ``reference``    computes the right answer eagerly (default: ``fn`` itself, see ``gpu_demo.guard.differential``)
    ``dtype``        for factories: a ``torch.dtype`` or a name (``"bfloat16"``, ``"bf16"``, ``"float16"``,
                     ``"fp16"``, ``"float32"``, ...; ``gpu_demo.guard.protocol.tolerance.dtype_named``);
                     default: the first floating input's, else the factory's own example inputs' (a
                     factory without parameters), else bfloat16 (a ``(device, dtype)`` factory)
    ``kwargs``       keyword arguments for the factory: ``check_capture("mod:make", kwargs={"layers": 4})``
    ``fresh_inputs`` ``fresh_inputs(examples, generator) -> inputs``: each replay's new inputs (CPU
                     tensors shaped and typed like ``examples``), for ids, positions or lengths that
                     need structure; default: normal floats, integers between the example's min and max

    With CUDA, everything runs on the GPU: the inputs are moved there and factories build
    there; an ``nn.Module`` instance passed as ``fn`` must already be there.
    """
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("check_capture(fn, *inputs): the inputs must be tensors (or none, when fn is a "
                        "factory returning (fn, example_inputs))")
    if not isinstance(replays, int) or isinstance(replays, bool) or replays < 1:
        raise ValueError(f"replays must be a positive integer, got {replays!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds (the child is abandoned after it), "
                         f"got {timeout!r}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict of the factory's keyword arguments, got {type(kwargs).__name__}")
    if fresh_inputs is not None and not callable(fresh_inputs):
        raise TypeError("fresh_inputs must be a callable fresh_inputs(examples, generator) -> inputs")
    call = factory_call(resolve(fn), kwargs)
    if call is None and kwargs:
        raise TargetError(f"kwargs were given but {name_of(fn)} is not a factory with those parameters: kwargs "
                          "go to a factory (a class, or a function of device, dtype and options)")
    if call is None and not inputs:
        raise TargetError(f"no example inputs for {name_of(fn)}: pass example tensors after it (CLI: "
                          "--input-shape), or pass a factory that returns (fn, example_inputs)")
    if reference is not None:
        resolve(reference)
    if dtype is not None:
        dtype = dtype_named(dtype)
    send = portable if isolate else resolve
    subject = Subject(
        target=send(fn), name=name_of(fn),
        inputs=tuple(t.detach().cpu() for t in inputs) or None,
        dtype=dtype or floating_dtype(inputs), replays=replays, seed=seed,
        reference=None if reference is None else send(reference),
        reference_name=None if reference is None else name_of(reference),
        kwargs=dict(kwargs) if kwargs else None,
        fresh_inputs=None if fresh_inputs is None else (portable(fresh_inputs) if isolate else fresh_inputs),
    )
    in_child = isolate and torch.cuda.is_available()
    result = _run(check_in_child, subject, in_child, timeout)
    if result.replay_elsewhere and result.child_error is None:
        result = result.then(_run(replay_in_child, subject, in_child, timeout))
    return _report(subject.name, result, strict)


def assert_capture_safe(fn: Target, *inputs: torch.Tensor, dry_run_ok: bool = False, **options: Any) -> GuardReport:
    """``check_capture`` (same arguments), returning the report when it passes.

    Raises ``CaptureNotSafe`` on a hazard, and ``CaptureNotChecked`` (a subclass) when nothing proved
    it either way: the check could not be done, or there is no GPU and only the dry run ran. With
    ``dry_run_ok=True`` a clean dry run is returned instead (a CPU test of the static part alone;
    ``report.passed`` stays False).
    """
    report = check_capture(fn, *inputs, **options)
    if report.passed or (dry_run_ok and report.answer == NOT_ON_GPU):
        return report
    if report.answer in (NOT_ON_GPU, COULD_NOT_CHECK):
        raise CaptureNotChecked(report)
    raise CaptureNotSafe(report)


def _run(step: Callable[..., dict[str, Any]], subject: Subject, in_child: bool, timeout: float) -> ChildResult:
    """``step`` in a child (a warm worker inside ``warm_checks()``), or in this process."""
    if in_child:
        return ChildResult.from_dict(run_checked(f"{step.__module__}:{step.__name__}", {"subject": subject}, timeout))
    known: dict[str, Any] = {}
    try:
        known.update(step({"subject": subject}, known.update))
    except Exception as exc:  # the function failed: a result to report, like the child's
        known["child_error"] = ChildError.raised(exc).to_dict()
    return ChildResult.from_dict(known)


def _report(name: str, result: ChildResult, strict: bool) -> GuardReport:
    trace = Trace.from_json(result.trace) if result.trace is not None else None
    findings = check(trace) if trace is not None else []
    recording_error = trace.meta.get("capture_error") if trace is not None else None
    recording_message = None
    if recording_error and trace is not None and "capture_error_message" in trace.meta:
        recording_message = f"{trace.meta['capture_error_call']}: {trace.meta['capture_error_message']}"
    problem = result.child_error.message if result.child_error is not None else None
    replay = result.replay
    if replay is None:
        stage = "the recording" if trace is None else "the replay"
        replay = ReplayEvidence(False, reason=f"{stage} did not finish" + (f": {problem}" if problem else ""))
    if trace is not None:
        replay.stochastic = random_ops(trace)
    verdict, doubt = judge(replay, recording_error, findings)
    return GuardReport(target=name, mode=result.mode or "none", findings=findings, verdict=verdict,
                       replay=replay, recording_error=recording_error, problem=problem or doubt, strict=strict,
                       recording_message=recording_message)


def judge(replay: ReplayEvidence, recording_error: str | None, findings: list[Finding]) -> tuple[str | None, str | None]:
    """The verdict, and why the check could not be done (``None``: it could), from the evidence.

    The replays decide, read beside the findings as replays on a GPU are
    (``simlib.checker.verdict.verdict(..., on_gpu=True)``): a race turns ``correct`` into
    ``unordered``; a miss is ``silent_wrong`` only when the checker found something in the
    capture, else ``graph_eager_differ``. When the reference disagreed with itself on one
    input the comparison proves nothing (no verdict, and the reason). Without replays, the
    dry run's capture error is the verdict if it had one.
    """
    if not (replay.ran and replay.outcome is not None):
        failed = recording_error if recording_error and recording_error.startswith(CAPTURE_ERROR_PREFIX) else None
        return failed, None
    spread, tolerance = replay.reference_spread, replay.tolerance or 0.0
    if replay.outcome == SILENT_WRONG and spread is not None and not spread <= tolerance:
        return None, (f"the reference is nondeterministic: two eager runs of it on the same input differ by "
                      f"{spread:.3g} (tolerance {tolerance:g}), so a replay's error of "
                      f"{max(e for e in replay.errors if e is not None):.3g} cannot be blamed on the capture "
                      "(random draws it does not seed, or state one call leaves for the next): seed them, pass "
                      "a factory (a fresh instance per run), or a deterministic reference=")
    return verdict(replay.outcome, findings, on_gpu=True), None
