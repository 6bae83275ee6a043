"""Warm-up and capture, the way PyTorch's CUDA-graph docs prescribe.

Warm-up runs eagerly on a side stream (so lazy initialisation, cuBLAS
handles and Triton compilation happen before capture); then the callable is
captured once with ``torch.cuda.graph``. Shared by the harness, the recorder,
the decode proxy and the benchmark.
"""

from __future__ import annotations

from typing import Callable

import torch


def warm_up(fn: Callable[[], object], iterations: int = 2) -> None:
    """Run ``fn`` eagerly ``iterations`` times on a side stream, then wait for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(iterations):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(fn: Callable[[], torch.Tensor],
            mode: str = "global") -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Capture one call of ``fn`` in capture mode ``mode``; returns the graph and its static output."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=mode):
        out = fn()
    return graph, out
