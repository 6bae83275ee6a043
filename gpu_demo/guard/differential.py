"""Differential replay: capture a function, replay it on fresh inputs, compare with eager.

The checker reads a recording and *explains*; a replay *proves*. This module
does the halves that need the device, in two processes the guard starts (see
``gpu_demo.protocol.child``): ``record_in_child`` (steps 1 and 4), then
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
   ``gpu_demo.record.recorder`` (no replay, so the recording cannot fault);
5. build the function again (the captured instance) and judge it by the one
   capture -> replay -> compare protocol, ``gpu_demo.protocol.capture_replay``.

On a machine without CUDA only steps 1 and 4 run, step 4 as the recorder's dry run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from gpu_demo.guard.target import Built, TargetError, build
from gpu_demo.protocol.capture_replay import NO_TENSOR_OUTPUT, ReplayEvidence, fresh_like, replay_and_compare
from gpu_demo.protocol.cuda_errors import one_line
from gpu_demo.protocol.metric import output_tensors
from gpu_demo.record.capture import record_capture

NO_CUDA = ("no CUDA device on this machine: only the static dry run ran (the recorder ran the function "
           "eagerly and once more as if capturing; nothing was captured or replayed)")


class EagerFailure(RuntimeError):
    """The function failed on its example inputs without any capture: nothing to check."""


def _clones(tree: Any) -> list[torch.Tensor]:
    return [t.clone() for t in output_tensors(tree)]


# -- the guard's child ---------------------------------------------------------------------

@dataclass
class Subject:
    """Everything a check needs, as it travels to the child (see ``gpu_demo.guard.target.portable``)."""

    target: Any
    """what ``gpu_demo.guard.target.portable`` made of the target (or the object itself, in process)"""
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
    """Steps 1 and 4: the eager check and the recording (``gpu_demo.protocol.child`` entry; also run in-process)."""
    subject: Subject = payload["subject"]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.no_grad():
        built = subject.build(device)
        inputs = subject.example_inputs(built, device)
        try:
            out = built.fn(*(t.clone() for t in inputs))
        except Exception as exc:
            raise EagerFailure(f"{subject.name} fails when run eagerly, before any capture: {one_line(exc)} "
                               "(are the example inputs' shapes and dtypes right?)") from exc
        if not output_tensors(out):
            raise TargetError(f"{subject.name} {NO_TENSOR_OUTPUT}")
        trace = record_capture(built.fn, inputs, replays=0, meta={"target": subject.name})
    return {"mode": "cuda" if device.type == "cuda" else "dry_run", "trace": trace.to_json()}


def replay_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Steps 2, 3 and 5: references, capture and replays (``gpu_demo.protocol.child`` entry; needs CUDA to replay)."""
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
    wanted = [_clones(built.fn(*(t.clone() for t in inputs))) for inputs in fresh]
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

