"""Differential replay: capture a function, replay it on fresh inputs, compare with eager.

The checker reads a recording and *explains*; a replay *proves*. This module
does the halves that need the device, in two processes the guard starts (see
``gpu_demo.child``): ``record_in_child`` (steps 1 and 4), then
``replay_in_child`` (2, 3 and 5), so that a replay that faults cannot cost the
recording, and nothing the recorder hooks into can touch the replay:

1. build the function and run it once eagerly on its example inputs: if that
   fails there is nothing to check (``EagerFailure``, a problem, not a hazard);
2. draw ``replays`` fresh random inputs shaped like the example inputs
   (floating: standard normal; integer: uniform between the example's min and
   max, so indices stay valid);
3. run the **reference** eagerly on clones of each fresh input, *before*
   anything is captured, and keep the outputs. The reference is a separate
   build: a factory is built again under the same seed (its own instance, its
   own static buffers); a plain function is the same function, and running it
   first is what keeps it honest: whatever global state it shares with the
   captured run, the warm-up and the capture come after it and overwrite that
   state, so the reference cannot repair a replay (the stale-buffer trap of
   notebook 03) nor spoil it. A function whose eager result depends on state a
   previous call left behind cannot be checked this way: pass a factory;
4. record a warm-up and a capture of the build of step 1 with
   ``gpu_demo.recorder`` (no replay, so the recording cannot fault);
5. build the function again (the captured instance), warm up, capture with ``torch.cuda.graph``, and for each
   fresh input: copy it into the captured input buffers, replay, synchronise,
   compare every output tensor with the reference's by relative L2 error in
   float32 (``tolerance_for`` the output's dtype).

Outcomes are ``simlib.glossary`` words: ``correct``, ``silent_wrong`` (an error
above tolerance), ``illegal_address`` (a replay faulted; the context is lost,
so nothing runs after it), ``capture_error:<name>``. On a machine without CUDA
only steps 1 and 4 run, step 4 as the recorder's dry run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG
from torch.utils._pytree import tree_flatten

from . import graphs
from .outcomes import classify_capture_failure, first_error, is_illegal_address, one_line
from .settings import DTYPES, TOLERANCES
from .target import Built, TargetError, build

NO_CUDA = ("no CUDA device on this machine: only the static dry run ran (the recorder ran the function "
           "eagerly and once more as if capturing; nothing was captured or replayed)")


def tolerance_for(dtype: torch.dtype) -> float:
    """Largest relative error of a correct replay: a few roundings of the dtype (``gpu_demo.settings``);
    0 for exact dtypes (integers, bool), whose replays must match exactly."""
    names = {torch_dtype: name for name, torch_dtype in DTYPES.items()}
    if dtype in names:
        return TOLERANCES[names[dtype]]
    return 1e-12 if dtype == torch.float64 else 0.0


def fresh_like(example: torch.Tensor, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """New random values shaped and typed like ``example``, drawn on the CPU (the same on any device)."""
    if example.dtype.is_floating_point or example.dtype.is_complex:
        values = torch.randn(example.shape, generator=generator, dtype=torch.float32)
    elif example.numel():
        low, high = int(example.min()), int(example.max())
        values = torch.randint(low, high + 1, example.shape, generator=generator)
    else:
        values = torch.empty(example.shape)
    return values.to(device=device, dtype=example.dtype)


def output_error(got: Any, want: Any) -> float:
    """Largest relative L2 error over the output tensors (``inf`` if their structure or shapes differ)."""
    got_leaves, want_leaves = _tensors(got), _tensors(want)
    if len(got_leaves) != len(want_leaves):
        return math.inf
    worst = 0.0
    for g, w in zip(got_leaves, want_leaves):
        if g.shape != w.shape:
            return math.inf
        g, w = g.detach().float(), w.detach().float()
        scale = float(torch.linalg.vector_norm(w))
        diff = float(torch.linalg.vector_norm(g - w))
        error = diff / scale if scale else diff
        worst = error if math.isnan(error) else max(worst, error)
        if math.isnan(worst):
            return worst
    return worst


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _cloned(tree: Any) -> list[torch.Tensor]:
    return [t.clone() for t in _tensors(tree)]


@dataclass
class ReplayEvidence:
    """What the replays showed (``ran=False``: why they did not run)."""

    ran: bool
    outcome: str | None = None
    errors: list[float | None] = field(default_factory=list)
    tolerance: float | None = None
    reference: str = ""
    message: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def replay_and_compare(fn: Callable[..., Any], static_inputs: Sequence[torch.Tensor],
                       fresh_inputs: Sequence[Sequence[torch.Tensor]],
                       want: Callable[[int], Any], reference: str) -> ReplayEvidence:
    """Warm up, capture ``fn(*static_inputs)``, then replay once per fresh input set and compare
    the outputs with ``want(i)`` (called after replay ``i``). Needs CUDA."""
    graphs.warm_up(lambda: fn(*static_inputs))
    try:
        graph, out = graphs.capture(lambda: fn(*static_inputs))
    except Exception as exc:  # a capture that fails is an outcome
        first = first_error(exc)
        return ReplayEvidence(True, classify_capture_failure(first), reference=reference, message=one_line(first))
    outputs = _tensors(out)
    if not outputs:
        raise TargetError("the function returned no tensor; the guard compares replay outputs with the "
                          "reference, so return the output tensor(s)")
    tolerance = max(tolerance_for(t.dtype) for t in outputs)
    errors: list[float | None] = []
    for i, inputs in enumerate(fresh_inputs):
        for static, new in zip(static_inputs, inputs):
            static.copy_(new)
        try:
            graph.replay()
            torch.cuda.synchronize()
            got = _cloned(outputs)
        except RuntimeError as exc:
            if not is_illegal_address(exc):
                raise
            return ReplayEvidence(True, ILLEGAL_ADDRESS, [*errors, None], tolerance, reference, one_line(exc))
        errors.append(output_error(got, want(i)))
    correct = all(e is not None and e <= tolerance for e in errors)
    return ReplayEvidence(True, CORRECT if correct else SILENT_WRONG, errors, tolerance, reference)


class EagerFailure(RuntimeError):
    """The function failed on its example inputs without any capture: nothing to check."""


# -- the guard's child ---------------------------------------------------------------------

@dataclass
class Subject:
    """Everything a check needs, as it travels to the child (see ``gpu_demo.target.portable``)."""

    target: Any
    """what ``gpu_demo.target.portable`` made of the target (or the object itself, in process)"""
    name: str
    inputs: tuple[torch.Tensor, ...] | None
    dtype: torch.dtype
    replays: int
    seed: int = 0
    reference: Any = None
    reference_name: str | None = None

    def build(self, device: torch.device, reference: bool = False) -> Built:
        sent = self.reference if reference and self.reference is not None else self.target
        return build(sent, device, self.dtype, self.seed)

    def example_inputs(self, built: Built, device: torch.device) -> list[torch.Tensor]:
        """Static input buffers for one build: clones of the given inputs, else of the factory's."""
        examples = self.inputs if self.inputs is not None else built.example_inputs
        if not examples:
            raise TargetError(f"no example inputs for {self.name}: pass example tensors (CLI: --input-shape), "
                              "or make it a factory returning (fn, example_inputs)")
        return [t.detach().to(device).clone() for t in examples]


def record_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Steps 1 and 4: the eager check and the recording (``gpu_demo.child`` entry; also run in-process)."""
    from .recorder import record_capture

    subject: Subject = payload["subject"]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.no_grad():
        built = subject.build(device)
        inputs = subject.example_inputs(built, device)
        try:
            built.fn(*(t.clone() for t in inputs))
        except Exception as exc:
            raise EagerFailure(f"{subject.name} fails when run eagerly, before any capture: {one_line(exc)} "
                               "(are the example inputs' shapes and dtypes right?)") from exc
        trace = record_capture(built.fn, inputs, replays=0, meta={"target": subject.name})
    return {"mode": "cuda" if device.type == "cuda" else "dry_run", "trace": trace.to_json()}


def replay_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Steps 2, 3 and 5: references, capture and replays (``gpu_demo.child`` entry; needs CUDA to replay)."""
    if not torch.cuda.is_available():
        return {"replay": ReplayEvidence(False, reason=NO_CUDA).to_dict()}
    subject: Subject = payload["subject"]
    device = torch.device("cuda")
    with torch.no_grad():
        built = subject.build(device)
        inputs = subject.example_inputs(built, device)
        wanted, fresh, reference = _references(subject, inputs, device)
        evidence = replay_and_compare(built.fn, inputs, fresh, lambda i: wanted[i], reference)
    return {"replay": evidence.to_dict()}


def _references(subject: Subject, examples: Sequence[torch.Tensor],
                device: torch.device) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]], str]:
    """Steps 2 and 3 of the module docstring: fresh inputs and the reference's outputs on them."""
    built = subject.build(device, reference=True)
    generator = torch.Generator().manual_seed(subject.seed + 1)
    fresh = [[fresh_like(t, generator, device) for t in examples] for _ in range(subject.replays)]
    wanted = [_cloned(built.fn(*(t.clone() for t in inputs))) for inputs in fresh]
    torch.cuda.synchronize()
    if subject.reference is not None:
        how = f"the reference {subject.reference_name}, run eagerly"
    elif built.fresh:
        how = f"a separate build of {subject.name}, run eagerly"
    else:
        how = f"{subject.name} itself, run eagerly before the warm-up and the capture"
    return wanted, fresh, how + " on the same fresh inputs"


def describe(evidence: ReplayEvidence) -> str:
    """One line: what the replays showed, or why they did not run."""
    if not evidence.ran:
        return f"replay not run: {evidence.reason}"
    if not evidence.errors and evidence.message:
        return f"the capture failed: {evidence.message}"
    shown = " ".join("fault" if e is None else f"{e:.3g}" for e in evidence.errors)
    line = (f"{len(evidence.errors)} replay(s) with fresh inputs against {evidence.reference}: "
            f"relative error {shown} (tolerance {evidence.tolerance:g})")
    return line + (f"; {evidence.message}" if evidence.message else "")

