"""A Triton kernel called directly, recorded as a ``Launch`` named ``triton:<name>``.

``gpu_demo.record.patches`` reports each direct call of a ``@triton.jit``
kernel. Its tensors are frozen as any op's arguments (``OpRecorder._arg``),
with the access ``gpu_demo.record.triton_access`` reads off the kernel's
source (``rw`` where it cannot: ``meta["triton_access_unknown"]`` says why), and
with the extent the kernel's mask bounds each pointer to, where it has one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

import torch

from gpu_demo.guard.record.op_plans import frozen_scalar, tensor_behind
from gpu_demo.guard.record.triton_access import KernelAccess
from simlib.trace import Arg

if TYPE_CHECKING:   # the recorder imports this module to bind the method: only its type is needed here
    from gpu_demo.guard.record.recorder import CaptureRecorder


def on_triton_launch(recorder: "CaptureRecorder", kernel: str, args: Sequence[tuple[str, Any]],
                     access: KernelAccess | None = None) -> None:
    """A Triton kernel launched directly (``patches``), not from inside an op the dispatcher showed."""
    journal, watch = recorder.journal, recorder.aside.memory_watch
    if journal.busy or not (journal.recording or (watch is not None and watch.touched(args))):
        return  # launched by an op the dispatcher already showed, or on memory no rule follows
    journal.settle()
    if access is not None and access.unknown:
        recorder.trace.meta.setdefault("triton_access_unknown", {})[kernel] = access.unknown
    with journal.quiet():
        given = [(name, tensor, access.of(name) if access else "rw")
                 for name, value in args if (tensor := tensor_behind(value)) is not None]
        frozen = [recorder._arg(*each) for each in given]
        if access is not None and access.extents:
            frozen = _bounded(frozen, given, access.extents, dict(args))
        scalars = tuple((name, text) for name, value in args if (text := frozen_scalar(value)) is not None)
        recorder._launch(f"triton:{kernel}", kernel, tuple(frozen), skips_empty=False, scalars=scalars)


def _bounded(frozen: list[Arg], given: list[tuple[str, torch.Tensor, str]], extents: dict[str, str],
             values: dict[str, Any]) -> list[Arg]:
    """A Triton launch's pointer arguments with the extent their kernel's mask bounds them to
    (``triton_access``: ``n`` elements for ``mask=offs < n``) instead of the tensor's own size."""
    out = []
    for a, (name, t, _) in zip(frozen, given):
        size = values.get(extents.get(name, ""))
        out.append(replace(a, nbytes=size * t.element_size()) if type(size) is int and size >= 0 else a)
    return out
