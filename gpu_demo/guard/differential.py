"""Differential replay: capture a function, replay it on fresh inputs, compare with eager.

The checker reads a recording and *explains*; a replay *proves*. This module
does the halves that need the device, in one process the guard starts (see
``gpu_demo.guard.protocol.child``, or a warm ``gpu_demo.guard.protocol.worker``):
``check_in_child`` records (steps 1 and 4), checkpoints the recording, then
replays (2, 3 and 5). The checkpoint is why one process is enough: a replay
that faults kills only what comes after it, and the recording comes back. The
recorder takes its hooks and patches off when it stops, so they cannot touch
the replay. Only when the recorder's own capture failed (a failed capture can
leave the stream or context unusable) does the replay run in a second, fresh
process (``replay_in_child``, asked for by ``ChildResult.replay_elsewhere``). Both
sides read and write the answer as a ``gpu_demo.guard.protocol.child_result.ChildResult``.

1. build the function and run it once eagerly on its example inputs: if that
   fails there is nothing to check (``EagerFailure``, a problem, not a hazard);
2. draw ``replays`` fresh inputs shaped like the example inputs (floating:
   standard normal; integer: uniform between the example's min and max, so
   indices stay valid; or the user's ``fresh_inputs`` generator, for ids,
   positions and lengths that need structure);
3. run the **reference** eagerly on clones of each fresh input, *before* the
   replay's warm-up and capture, and keep the outputs. The reference is a separate
   build: a factory is built again under the same seed (its own instance, its
   own static buffers); a plain function is the same function, and running it
   first is what keeps it honest: whatever global state it shares with the
   captured run, the warm-up and the capture come after it and overwrite that
   state, so the reference cannot repair a replay (the stale-buffer trap of
   notebook 03) nor spoil it. Before it is trusted, the reference is run twice
   on the first input (a second build for a factory): the error between the two
   is ``reference_spread``, and a reference that disagrees with itself cannot
   blame the capture (``gpu_demo.guard.check``). Every reference run and every
   replay starts from one reseeded generator state, so random ops draw the same
   numbers in both (``gpu_demo.guard.stochastic``). A separate build first lives
   the captured build's history (``live_warm_up``: the warm-up's calls, then one
   call per replay), so a step that advances its own state (a KV cache and its
   counter, running statistics) is compared at the same point of its history
   (``docs/guard-state.md``);
4. record a warm-up and a capture of the build of step 1 with
   ``gpu_demo.guard.record.recorder`` (no replay, so the recording cannot fault);
5. build the function again (the captured instance) and judge it by the one
   capture -> replay -> compare protocol, ``gpu_demo.guard.protocol.capture_replay``.

On a machine without CUDA only steps 1 and 4 run, step 4 as the recorder's dry run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from gpu_demo.guard.protocol.capture_replay import (
    NO_TENSOR_OUTPUT,
    WARM_UP_CALLS,
    ReplayEvidence,
    fresh_like,
    replay_and_compare,
)
from gpu_demo.guard.protocol.child import Checkpoint
from gpu_demo.guard.protocol.child_result import ChildResult
from gpu_demo.guard.protocol.cuda_errors import one_line
from gpu_demo.guard.protocol.metric import output_error, output_tensors
from gpu_demo.guard.record.call_site import raised_at
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.guard.stochastic import reseed
from gpu_demo.guard.target import Built, TargetError, build, unpack
from simlib.glossary import CORRECT, SILENT_WRONG
from simlib.trace import Trace

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
    dtype: torch.dtype | None
    """``None``: the factory's own (``gpu_demo.guard.target.build``)"""
    replays: int
    seed: int = 0
    reference: Any = None
    reference_name: str | None = None
    kwargs: dict[str, Any] | None = None
    """keyword arguments for a factory (``check_capture(..., kwargs=...)``)"""
    fresh_inputs: Any = None
    """``portable`` form of the user's ``fresh_inputs(examples, generator)``, or ``None``"""

    def build(self, device: torch.device, reference: bool = False) -> Built:
        if reference and self.reference is not None:
            return build(self.reference, device, self.dtype, self.seed)
        return build(self.target, device, self.dtype, self.seed, self.kwargs)

    def draw_inputs(self, examples: Sequence[torch.Tensor], device: torch.device) -> list[list[torch.Tensor]]:
        """Step 2: the fresh inputs of every replay, on ``device``."""
        generator = torch.Generator().manual_seed(self.seed + 1)
        if self.fresh_inputs is None:
            return [[fresh_like(t, generator, device) for t in examples] for _ in range(self.replays)]
        make = unpack(self.fresh_inputs)
        drawn = [list(make(tuple(t.cpu() for t in examples), generator)) for _ in range(self.replays)]
        for inputs in drawn:
            got = [(tuple(t.shape), t.dtype) for t in inputs if isinstance(t, torch.Tensor)]
            want = [(tuple(t.shape), t.dtype) for t in examples]
            if got != want or len(got) != len(inputs):
                raise TargetError(f"fresh_inputs returned {got} but the example inputs are {want}: it must "
                                  "return tensors with the examples' shapes and dtypes, in their order")
        return [[t.to(device) for t in inputs] for inputs in drawn]

    def example_inputs(self, built: Built, device: torch.device) -> list[torch.Tensor]:
        """Static input buffers for one build: clones of the given inputs, else of the factory's."""
        examples = self.inputs if self.inputs is not None else built.example_inputs
        if not examples:
            raise TargetError(f"no example inputs for {self.name}: pass example tensors (CLI: --input-shape), "
                              "or make it a factory returning (fn, example_inputs)")
        return [t.detach().to(device).clone() for t in examples]


def check_in_child(payload: dict[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """Every step in one process (``gpu_demo.guard.protocol.child`` entry; also run in-process and in a
    warm worker): the recording, checkpointed, then the replay (module docstring)."""
    subject: Subject = payload["subject"]
    trace, mode = _record(subject)
    recorded = ChildResult(mode=mode, trace=trace.to_json())
    checkpoint(recorded.to_dict())
    if torch.cuda.is_available() and "capture_error" in trace.meta:
        return replace(recorded, replay_elsewhere=True, retire=True).to_dict()
    return recorded.then(_replay(subject)).to_dict()


def replay_in_child(payload: dict[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """Steps 2, 3 and 5 alone: the ``gpu_demo.guard.protocol.child`` entry of a second process,
    when the recording's capture failed."""
    return _replay(payload["subject"]).to_dict()


def _record(subject: Subject) -> tuple[Trace, str]:
    """Steps 1 and 4: the eager check and the recording; the trace and where it ran."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.no_grad():
        built = subject.build(device)
        inputs = subject.example_inputs(built, device)
        try:
            out = built.fn(*(t.clone() for t in inputs))
        except Exception as exc:
            needs_cuda = device.type == "cpu" and "CUDA" in str(exc)
            hint = "it needs CUDA: check it on a GPU" if needs_cuda else "are the example inputs' shapes and dtypes right?"
            site = raised_at(exc)
            raise EagerFailure(f"{subject.name} fails when run eagerly, before any capture"
                               + (f", at {site}" if site else "")
                               + f": {type(exc).__name__}: {one_line(exc)} ({hint})") from exc
        if not output_tensors(out):
            raise TargetError(f"{subject.name} {NO_TENSOR_OUTPUT}")
        trace = record_capture(built.fn, inputs, replays=0, meta={"target": subject.name})
    return trace, "cuda" if device.type == "cuda" else "dry_run"


def _replay(subject: Subject) -> ChildResult:
    """Steps 2, 3 and 5: references, capture and replays (needs CUDA to replay)."""
    if not torch.cuda.is_available():
        return ChildResult(replay=ReplayEvidence(False, reason=NO_CUDA))
    device = torch.device("cuda")
    with torch.no_grad():
        built = subject.build(device)
        inputs = subject.example_inputs(built, device)
        wanted, fresh, reference, spread = _references(subject, inputs, device)
        evidence = replay_and_compare(built.fn, inputs, fresh, lambda i: wanted[i], reference,
                                      before_replay=lambda i: reseed(_rng_seed(subject)))
    evidence.reference_spread = spread
    # A fault or a failed capture may leave the context unusable: a warm worker must not go on in it.
    return ChildResult(replay=evidence, retire=evidence.outcome not in (CORRECT, SILENT_WRONG))


def _rng_seed(subject: Subject) -> int:
    """The generator state every reference run and every replay starts from."""
    return subject.seed + 2


def _references(subject: Subject, examples: Sequence[torch.Tensor], device: torch.device
                ) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]], str, float]:
    """Steps 2 and 3 of the module docstring: fresh inputs, the reference's outputs on them, and
    the error between two reference runs on the first of them."""
    built = subject.build(device, reference=True)
    fresh = subject.draw_inputs(examples, device)

    def run(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        reseed(_rng_seed(subject))
        return _clones(fn(*(t.clone() for t in inputs)))

    if built.fresh:
        live_warm_up(built.fn, examples)
    wanted = [run(built.fn, fresh[0])]
    again = subject.build(device, reference=True).fn if built.fresh else built.fn
    if built.fresh:
        live_warm_up(again, examples)
    second = run(again, fresh[0])
    wanted += [run(built.fn, inputs) for inputs in fresh[1:]]
    torch.cuda.synchronize()
    spread = output_error(second, wanted[0])
    if subject.reference is not None:
        how = f"the reference {subject.reference_name}, run eagerly"
    elif built.fresh:
        how = f"a separate build of {subject.name}, run eagerly"
    else:
        how = f"{subject.name} itself, run eagerly before the warm-up and the capture"
    return wanted, fresh, how + " on the same fresh inputs", spread


def live_warm_up(fn: Callable[..., Any], examples: Sequence[torch.Tensor]) -> None:
    """Give a reference build the history the captured build has before its first replay: the
    warm-up's calls on the example inputs (one set of clones, as the warm-up reuses its static
    buffers). The capture's own call runs no kernel, so the device state it leaves is the
    warm-up's; every replay is then one call of the reference (``docs/guard-state.md``)."""
    inputs = [t.clone() for t in examples]
    for _ in range(WARM_UP_CALLS):
        fn(*inputs)


def describe(evidence: ReplayEvidence) -> str:
    """One line: what the replays showed, or why they did not run."""
    if not evidence.ran:
        return f"replay not run: {evidence.reason}"
    if not evidence.errors and evidence.message:
        return f"the capture failed: {evidence.message}"
    shown = " ".join("fault" if e is None else f"{e:.3g}" for e in evidence.errors)
    line = (f"{len(evidence.errors)} replay(s) with fresh inputs against {evidence.reference}: "
            f"relative error {shown} (tolerance {evidence.tolerance:g})")
    if evidence.message:
        line += f"; {evidence.message}"
    if evidence.reference_spread is not None:
        line += f"; two eager runs of the reference on one input differ by {evidence.reference_spread:.3g}"
    if evidence.stochastic:
        line += (f"; random ops {', '.join(evidence.stochastic)}: every reference run and replay started from "
                 "one reseeded generator state, so both drew the same numbers")
    if evidence.first_difference:
        diff = evidence.first_difference
        show = {side: "[" + ", ".join(f"{v:.4g}" for v in diff[side]) + ", ...]" for side in ("graph", "eager")}
        line += f"; first values that differ (from element {diff.get('at', 0)}): graph {show['graph']}, eager {show['eager']}"
    return line

