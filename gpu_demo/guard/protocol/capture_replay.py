"""Warm up, capture, replay with fresh inputs, compare with eager: the one protocol.

Warm-up runs eagerly on a side stream, the way PyTorch's CUDA-graph docs
prescribe (lazy initialisation, cuBLAS handles and Triton compilation happen
before capture); then the callable is captured once with ``torch.cuda.graph``.
``replay_and_compare`` goes on: before each replay it copies that replay's
inputs into the captured input buffers, replays, synchronises, and compares
every output tensor with the reference's (``gpu_demo.guard.protocol.metric``, within
``gpu_demo.guard.protocol.tolerance``). The conformance matrix (``gpu_demo.lab.moe.harness``),
the guard (``gpu_demo.guard``) and the corpus all judge a capture through it,
so their verdicts cannot drift apart.

Outcomes are ``simlib.glossary`` words: ``correct``, ``silent_wrong`` (an error
above tolerance), ``illegal_address`` (a replay faulted; the context is lost,
so nothing runs after it), ``capture_error:<name>`` (the first error of the
chain, ``gpu_demo.guard.protocol.cuda_errors.first_error``).

The stale-buffer trap: a replay fed exactly the input of the last eager run
sees a branch that was *not* captured still holding the warm-up's answer, and
looks right (error 0.0). Fresh inputs are the only honest check.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch

from gpu_demo.guard.protocol.cuda_errors import classify_capture_failure, first_error, is_illegal_address, one_line
from gpu_demo.guard.protocol.metric import output_error, output_tensors
from gpu_demo.guard.protocol.tolerance import tolerance_for
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG

NO_TENSOR_OUTPUT = ("returned no tensor; a replay is judged by comparing its outputs with the reference's, "
                    "so return the output tensor(s)")


WARM_UP_CALLS = 2
"""Eager calls before the capture; a stateful reference lives them too (``gpu_demo.guard.differential``)."""


def warm_up(fn: Callable[[], object], iterations: int = WARM_UP_CALLS) -> None:
    """Run ``fn`` eagerly ``iterations`` times on a side stream, then wait for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(iterations):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(fn: Callable[[], Any], mode: str = "global") -> tuple[torch.cuda.CUDAGraph, Any]:
    """Capture one call of ``fn`` in capture mode ``mode``; returns the graph and its static output."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=mode):
        out = fn()
    return graph, out


def fresh_like(example: torch.Tensor, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """New random values shaped and typed like ``example``, drawn on the CPU (the same on any device):
    floating standard normal; integer uniform between the example's min and max, so indices stay valid."""
    if example.dtype.is_floating_point or example.dtype.is_complex:
        values = torch.randn(example.shape, generator=generator, dtype=torch.float32)
    elif example.numel():
        low, high = int(example.min()), int(example.max())
        values = torch.randint(low, high + 1, example.shape, generator=generator)
    else:
        values = torch.empty(example.shape)
    return values.to(device=device, dtype=example.dtype)


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
    raw_error: str | None = None   # the whole message of the error in ``message``
    reference_spread: float | None = None
    """error between two eager runs of the reference on one input (``None``: not measured)"""
    first_difference: dict[str, Any] | None = None
    """where the first output that missed differs: ``{"at": i, "graph": [...], "eager": [...]}``"""
    stochastic: list[str] = field(default_factory=list)
    """random ops the recording showed (``gpu_demo.guard.stochastic``); replays and references were reseeded"""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def replay_and_compare(fn: Callable[..., Any], static_inputs: Sequence[torch.Tensor],
                       replay_inputs: Sequence[Sequence[torch.Tensor] | None],
                       want: Callable[[int], Any], reference: str, *, mode: str = "global",
                       before_replay: Callable[[int], None] | None = None) -> ReplayEvidence:
    """Warm up, capture ``fn(*static_inputs)`` in capture mode ``mode``, then replay once per entry of
    ``replay_inputs`` and compare the outputs with ``want(i)`` (called after replay ``i``).

    Entry ``i`` is copied into the captured input buffers before replay ``i``; ``None`` leaves them as
    they are (a forgotten input refresh). ``before_replay(i)`` runs just before replay ``i`` (the guard
    reseeds the generators there, so a graph's random ops draw what the reference drew). Needs CUDA.
    """
    warm_up(lambda: fn(*static_inputs))
    try:
        graph, out = capture(lambda: fn(*static_inputs), mode)
    except Exception as exc:  # a capture that fails is an outcome
        first = first_error(exc)
        return ReplayEvidence(True, classify_capture_failure(first), reference=reference,
                              message=one_line(first), raw_error=str(first))
    outputs = output_tensors(out)
    if not outputs:
        raise ValueError(f"the function {NO_TENSOR_OUTPUT}")
    tolerance = max(tolerance_for(t.dtype) for t in outputs)
    errors: list[float | None] = []
    first_difference = None
    for i, inputs in enumerate(replay_inputs):
        for static, new in zip(static_inputs, inputs or ()):
            static.copy_(new)
        if before_replay is not None:
            before_replay(i)
        try:
            graph.replay()
            torch.cuda.synchronize()
            got = [t.clone() for t in outputs]
        except RuntimeError as exc:
            if not is_illegal_address(exc):
                raise
            return ReplayEvidence(True, ILLEGAL_ADDRESS, [*errors, None], tolerance, reference,
                                  one_line(exc), raw_error=str(exc))
        wanted = want(i)
        errors.append(output_error(got, wanted))
        if first_difference is None and not errors[-1] <= tolerance:
            first_difference = first_values(got, wanted, tolerance)
    correct = all(e is not None and e <= tolerance for e in errors)
    return ReplayEvidence(True, CORRECT if correct else SILENT_WRONG, errors, tolerance, reference,
                          first_difference=first_difference)


def first_values(got: Any, want: Any, tolerance: float, count: int = 4) -> dict[str, Any]:
    """``count`` values of both sides of the first output tensor pair that differs beyond
    ``tolerance``, from its first element that differs (``"at"``), so a report shows the
    difference itself rather than leading values that agree."""
    pairs = list(zip(output_tensors(got), output_tensors(want)))
    for g, w in pairs:
        if g.shape != w.shape or not output_error(g, w) <= tolerance:
            g, w = g.detach().flatten().float(), w.detach().flatten().float()
            at = 0
            if g.shape == w.shape and g.numel():
                scale = w.abs().max().item() or 1.0
                differs = ((g - w).abs() > tolerance * scale) | (g.isnan() != w.isnan())
                at = int(differs.nonzero()[0, 0]) if differs.any() else 0
            return {"at": at, "graph": g[at:at + count].tolist(), "eager": w[at:at + count].tolist()}
    return {"at": 0, "graph": [], "eager": []}
