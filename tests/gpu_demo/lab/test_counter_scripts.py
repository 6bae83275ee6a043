"""The sliding-window counter scripts on the CPU, their CUDA graph played as a GPU plays it.

A capture records the step's ops and leaves the memory as it was (a capture
runs nothing: what its ops changed is undone); a replay runs the recorded ops
again on the same tensors, its host code not at all. On the H200 the fix's
first three replays came out wrong because its script compared them with an
eager twin one token ahead (the twin also ran the capture's token, which the
graph never did). Played here, the fix matches its twin at every replay, and
the host counter goes wrong once a real step would roll the window.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from types import SimpleNamespace
from typing import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_demo.guard.protocol.tolerance import tolerance_for
from gpu_demo.lab import corpus


class PlayedGraph(TorchDispatchMode):
    """A CUDA graph on the CPU: the ops of its capture, replayed on the tensors they were captured with."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self.undo: list[tuple[torch.Tensor, torch.Tensor]] = []   # (tensor written, what it held before)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        written = [a for a, spec in zip(args, func._schema.arguments)
                   if isinstance(a, torch.Tensor) and spec.alias_info is not None and spec.alias_info.is_write]
        self.undo += [(t, t.clone()) for t in written]
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            again = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and again is not out:   # a fresh result: into the captured one
                out.copy_(again)


@contextmanager
def captured(graph: PlayedGraph) -> Iterator[None]:
    with graph:
        yield
    for tensor, before in reversed(graph.undo):
        tensor.copy_(before)


@pytest.fixture
def cuda_played_on_the_cpu(monkeypatch):
    stream = SimpleNamespace(wait_stream=lambda other: None)
    for name, fake in {"Stream": lambda device=None: stream, "current_stream": lambda device=None: stream,
                       "stream": lambda s: nullcontext(), "CUDAGraph": PlayedGraph, "graph": captured,
                       "synchronize": lambda device=None: None}.items():
        monkeypatch.setattr(torch.cuda, name, fake)


def test_the_device_counter_matches_its_eager_twin_at_every_replay(cuda_played_on_the_cpu):
    errors = corpus.load("fix_counter_on_device").run(torch.device("cpu"), torch.float32)
    assert len(errors) == corpus.load("fix_counter_on_device").STEPS
    assert max(errors) <= tolerance_for(torch.float32)


def test_the_host_counter_is_right_until_the_window_would_roll_then_wrong(cuda_played_on_the_cpu):
    program = corpus.load("host_counter_in_capture")
    errors = program.run(torch.device("cpu"), torch.float32)
    filling = program.WINDOW - 2   # replays left before the window is full: the capture's branch is right
    assert max(errors[:filling]) <= tolerance_for(torch.float32)
    assert min(errors[filling:]) > tolerance_for(torch.float32)
