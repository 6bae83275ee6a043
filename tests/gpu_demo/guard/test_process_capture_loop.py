"""The whole-process check through a start-up's capture loop, on a CPU (the GPU played by ``gpu_fakes``).

A server captures one graph per batch size from one line: once a capture repeats
the one before it (the same line, the same kernels from the same lines), the
recorder stands aside between the loop's captures, as it does once the program
serves. The first two captures' warm-ups were recorded and compared with them;
the later warm-ups are not recorded, their captures are, and the frees of the
blocks graphs use are still seen.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo import CaptureHazardWarning  # noqa: E402
from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from simlib.checker.rules import FREED_UNDER_GRAPH, FROZEN_HOST_VALUE  # noqa: E402
from simlib.trace import Capture, Launch  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + x


class Drifting(Block):
    """Passes a Python float that changes every call (vLLM #46913): frozen at each capture."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale += 0.5
        return super().forward(x) * self.scale


def start_up(model: torch.nn.Module, sizes: tuple[int, ...], streams, graphs: list, inputs: list) -> None:  # noqa: ANN001
    """Warm up twice and capture, one graph per batch size, each input kept with its graph."""
    for size in sizes:
        x = torch.randn(size, 8)
        for _ in range(2):
            model(x)
        graph = FakeGraph()
        with cuda_graph(graph, streams):
            model(x)
        graphs.append(graph)
        inputs.append(x)


@contextmanager
def process_checked(streams) -> Iterator[CaptureChecker]:  # noqa: ANN001
    """The whole-process check over the block, its warnings kept in its reports only."""
    with recording(streams) as recorder, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureHazardWarning)
        yield CaptureChecker(recorder, on_hazard="warn", whole_process=True)


def fed_to(checker: CaptureChecker) -> list:
    """Every record the checker is fed from now on, in order."""
    fed: list = []
    feed = checker.checker.feed
    checker.checker.feed = lambda records: (fed.extend(records), feed(records))[1]
    return fed


def warm_up_launches(fed: list) -> list[int]:
    """Eager launches recorded before each capture began."""
    counts, n = [], 0
    for r in fed:
        if type(r) is Launch and r.graph is None:
            n += 1
        elif type(r) is Capture and r.op == "begin":
            counts.append(n)
            n = 0
    return counts


def test_after_a_capture_repeats_the_one_before_it_the_loops_warm_ups_are_not_recorded(streams, fake_graph_methods):
    model, graphs, inputs = Block(), [], []
    with recording(streams) as recorder, torch.no_grad():
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        fed = fed_to(checker)
        start_up(model, (1, 2, 4, 8), streams, graphs, inputs)
        assert checker.looping and not checker.serving
    per_capture = warm_up_launches(fed)
    assert per_capture[1] > 0 and per_capture[2:] == [0, 0]     # two calls of three launches each, then none
    captured = [sum(1 for r in fed if type(r) is Launch and r.graph == g) for g in range(4)]
    assert captured[2:] == captured[:2] and captured[0] > 0     # every capture is recorded in full
    assert not checker.failures()


def test_a_value_frozen_in_the_loops_body_is_found_at_its_first_capture(streams, fake_graph_methods):
    model, graphs, inputs = Drifting(), [], []
    with process_checked(streams) as checker:
        start_up(model, (1, 2, 4, 8), streams, graphs, inputs)
    assert [(r.graph, f.code) for r in checker.reports for f in r.findings if f.code == FROZEN_HOST_VALUE.code][:1] \
        == [(0, FROZEN_HOST_VALUE.code)]


def test_a_static_input_of_a_loop_capture_freed_before_its_replay_is_still_found(streams, fake_graph_methods):
    model, graphs, inputs = Block(), [], []
    with process_checked(streams) as checker:
        start_up(model, (1, 2, 4, 8), streams, graphs, inputs)
        assert checker.looping
        del inputs[3]                                              # graph 3's input: its storage dies
        torch.cuda.CUDAGraph.replay(graphs[3])
    assert FREED_UNDER_GRAPH.code in {f.code for r in checker.reports for f in r.findings}


def test_two_captures_of_different_code_are_no_loop_and_every_warm_up_is_recorded(streams, fake_graph_methods):
    first, second = Block(), Drifting()
    with process_checked(streams) as checker:
        fed = fed_to(checker)
        start_up(first, (4,), streams, [], [])
        start_up(second, (4,), streams, [], [])
        start_up(first, (4,), streams, [], [])
        assert not checker.looping
    assert all(n > 0 for n in warm_up_launches(fed))
