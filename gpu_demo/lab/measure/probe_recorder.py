"""Ground truth for the recorder: three plain-PyTorch programs captured on a GPU.

    python -m gpu_demo.lab.measure.probe_recorder [--out DIR] [--tokens N] [--hidden N] [--replays N]
    CAPTURE_ORDER_CHECK=1 python -m gpu_demo.autocheck -m gpu_demo.lab.measure.probe_recorder --plain

The programs use only ``torch.cuda.Stream``, ``wait_stream``,
``torch.cuda.stream``, ``torch.cuda.graph``, ``set_`` and a Triton kernel,
nothing from ``gpu_demo.guard.record.annotate``; each runs inside ``capture_checked``. For
each the probe prints what the recorder saw (records by kind, then every
record of the captured graph: launches with stream and deps, events,
allocations and frees, the ``set_``, host reads) and the checker's report;
with ``--out`` it writes each trace as ``trace-<program>.json`` there.
``--plain`` runs the same programs unrecorded, for the whole-process check
(``gpu_demo.autocheck``) to find the same hazards in an unmodified program.

``routed_first_static_buffer``  the incident: the routed branch disposes ``x``
    (``set_``) before the shared branch, which guards on ``x.shape[0]`` and so
    leaves its static output buffer stale (replayed: silently wrong)
``routed_first_raw_kernel``     the same with a Triton kernel that trusts
    ``x``'s pointer and the static size (captured, never replayed: it would fault)
``safe_dual_stream``            shared branch first, dispose after the join
    (replayed: correct)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from gpu_demo.guard.process import CaptureHazardWarning, capture_checked
from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.metric import relative_error
from simlib.trace import Alloc, Capture, EventOp, Free, HostRead, Launch, Mutation, Record, Replay, SkippedLaunch, Trace


class PlainLayer:
    """``residual + routed(x) + shared(x)`` with ``x = rms_norm(residual)``, written as
    plain PyTorch: two streams only while capturing, like SGLang; eager runs one stream."""

    def __init__(self, tokens: int, hidden: int, *, order: str, shared: str) -> None:
        generator = torch.Generator().manual_seed(0)
        self.w_routed, self.w_shared = (
            (torch.randn(hidden, hidden, generator=generator) / hidden ** 0.5).cuda() for _ in range(2))
        self.static_out = torch.zeros(tokens, hidden, device="cuda")
        self.alt = torch.cuda.Stream()
        self.order, self.shared = order, shared

    def __call__(self, residual: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(residual, (residual.shape[-1],))
        if not torch.cuda.is_current_stream_capturing():
            shared = self._shared(x).clone()
            return residual + x @ self.w_routed + shared
        main = torch.cuda.current_stream()
        self.alt.wait_stream(main)
        if self.order == "routed_first":
            routed = x @ self.w_routed
            x.set_(torch.empty(0, device=x.device, dtype=x.dtype))   # dispose_tensor(x)
            with torch.cuda.stream(self.alt):
                shared = self._shared(x)
            main.wait_stream(self.alt)
        else:
            with torch.cuda.stream(self.alt):
                shared = self._shared(x)
            routed = x @ self.w_routed
            main.wait_stream(self.alt)
            x.set_(torch.empty(0, device=x.device, dtype=x.dtype))   # after both branches: safe
        return residual + routed + shared

    def _shared(self, x: torch.Tensor) -> torch.Tensor:
        if self.shared == "raw_kernel":
            from gpu_demo.lab.moe import triton_kernels  # a raw Triton launch: trusts the pointer and the static size

            triton_kernels.raw_load(x, self.static_out, self.static_out.numel())
        elif x.shape[0] > 0:               # fused kernels return early when there are no rows
            self.static_out.copy_(x @ self.w_shared)
        return self.static_out


@dataclass(frozen=True)
class ProbeProgram:
    name: str
    order: str
    shared: str
    replay: bool


PROGRAMS = (
    ProbeProgram("routed_first_static_buffer", "routed_first", "static_buffer", replay=True),
    ProbeProgram("routed_first_raw_kernel", "routed_first", "raw_kernel", replay=False),
    ProbeProgram("safe_dual_stream", "shared_first", "static_buffer", replay=True),
)


def run_program(program: ProbeProgram, tokens: int, hidden: int, replays: int) -> list[float]:
    """Warm up, capture and (if safe to) replay ``program``; each replay's relative error."""
    layer = PlainLayer(tokens, hidden, order=program.order, shared=program.shared)
    reference = PlainLayer(tokens, hidden, order=program.order, shared="static_buffer")
    residual = torch.randn(tokens, hidden, device="cuda")
    errors: list[float] = []
    with torch.no_grad():
        capture_replay.warm_up(lambda: layer(residual))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(residual)
        for _ in range(replays if program.replay else 0):
            fresh = torch.randn_like(residual)
            residual.copy_(fresh)
            graph.replay()
            torch.cuda.synchronize()
            errors.append(relative_error(out, reference(fresh)))
    return errors


def probe(program: ProbeProgram, tokens: int, hidden: int, replays: int) -> tuple[Trace, str, list[float]]:
    """``run_program`` inside ``capture_checked``: the trace, the checker's report, the errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureHazardWarning)   # the reports are printed instead
        with capture_checked(on_hazard="warn", meta={"program": program.name}) as checked:
            errors = run_program(program, tokens, hidden, replays)
    return checked.trace, "\n\n".join(r.text for r in checked.reports), errors


def describe(trace: Trace) -> str:
    """Records by kind, then one line per record made during each capture."""
    kinds = Counter(r.kind for r in trace.records)
    lines = ["records: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))]
    captures = [r for r in trace.of(Capture)]
    for begin, end in zip(captures[::2], captures[1::2]):
        failed = f", failed: {end.error}" if end.error else ""
        lines.append(f"graph {begin.graph} (captured on {begin.stream}{failed}):")
        lines += [f"  {r.step:4} {_line(r)}" for r in trace.records if begin.step < r.step < end.step]
        lines.append(f"  replays: {sum(r.graph == begin.graph for r in trace.of(Replay))}")
    return "\n".join(lines)


def _line(r: Record) -> str:
    if isinstance(r, (Launch, SkippedLaunch)):
        args = ", ".join(f"{a.name}={a.label}@{a.ptr:#x}[{a.numel}]{a.access}" for a in r.args)
        deps = f" deps={list(r.deps)}" if isinstance(r, Launch) else " SKIPPED"
        return f"{r.kind:8} {r.stream:5} {r.kernel}{deps} ({args})"
    if isinstance(r, EventOp):
        return f"event    {r.stream or '-':5} {r.op} e{r.event} deps={list(r.deps)}"
    if isinstance(r, (Alloc, Free)):
        return f"{r.kind:8} {r.stream:5} {r.label} {r.nbytes} bytes at {r.ptr:#x} ({r.pool})"
    if isinstance(r, Mutation):
        return (f"mutation {r.op} {r.label}: {r.old_ptr:#x}{list(r.old_shape)} -> "
                f"{r.new_ptr:#x}{list(r.new_shape)}")
    if isinstance(r, HostRead):
        return f"hostread {r.stream:5} {r.op} of {r.label} -> {list(r.shape)}"
    return repr(r)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_demo.lab.measure.probe_recorder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write each trace here as trace-<program>.json")
    parser.add_argument("--plain", action="store_true",
                        help="run the programs without recording them (for CAPTURE_ORDER_CHECK to check)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_demo.lab.measure.probe_recorder: needs a CUDA GPU and none is visible", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    for program in PROGRAMS:
        if args.plain:
            errors = run_program(program, args.tokens, args.hidden, args.replays)
            print(f"{program.name}: replay relative errors " + (", ".join(f"{e:.3g}" for e in errors) or "-"))
            continue
        trace, report, errors = probe(program, args.tokens, args.hidden, args.replays)
        print(f"\n=== {program.name}\n{describe(trace)}")
        print("replay relative errors: " + (", ".join(f"{e:.3g}" for e in errors) or "not replayed"))
        print(report)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"trace-{program.name}.json").write_text(trace.to_json(indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
