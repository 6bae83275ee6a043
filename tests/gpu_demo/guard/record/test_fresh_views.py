"""Standing aside, a view of what the last replay wrote and its copy-out are recorded late, or not at all.

On a CPU, the GPU played by ``gpu_fakes``: what the recorder takes down of a
served step's copy-out (``out[:n].clone()``), and that rule 13, which reads
views by the replay they followed, still sees the ones a program keeps.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from gpu_demo.guard.record.memory_watch import Ranges  # noqa: E402
from simlib.checker.rules import OUTPUT_OVERWRITTEN  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


@contextmanager
def whole_process(streams) -> Iterator[tuple[CaptureChecker, dict[str, int]]]:  # noqa: ANN001
    """A whole-process check, its warnings silenced, and the views and copy-outs its recorder takes
    down (its ``viewed`` and ``cloned``, counted)."""
    with recording(streams) as recorder, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checker = CaptureChecker(recorder, on_hazard="warn", whole_process=True)
        taken = {"viewed": 0, "cloned": 0}
        for name in taken:
            setattr(recorder, name, _counting(getattr(recorder, name), name, taken))
        yield checker, taken
        checker.check_now()


def _counting(method: Callable, name: str, taken: dict[str, int]) -> Callable:
    def counted(*args):  # noqa: ANN002, ANN202
        taken[name] += 1
        return method(*args)
    return counted


def codes(checker: CaptureChecker) -> set[str]:
    return {f.code for report in checker.reports for f in report.findings}


def served(streams, steps: int, read: Callable[[torch.Tensor, int], object],  # noqa: ANN001, ANN201
           after: Callable[[], object] = lambda: None):
    """A graph served ``steps`` replays, ``read(logits, step)`` after each and ``after()`` at the
    end: the checker, what the recorder took down once serving, and what ``read`` returned."""
    head, hidden, graph = torch.nn.Linear(16, 32), torch.randn(4, 16), FakeGraph()
    kept = []
    with whole_process(streams) as (checker, taken):
        with cuda_graph(graph, streams):
            logits = head(hidden)
        torch.cuda.CUDAGraph.replay(graph)   # serving from here: the recorder stands aside
        assert checker.serving
        before = dict(taken)
        for step in range(steps):
            hidden.copy_(torch.full((4, 16), float(step)))
            torch.cuda.CUDAGraph.replay(graph)
            kept.append(read(logits, step))
        after()
        serving = {name: taken[name] - before[name] for name in taken}
    return checker, serving, kept


def test_a_copy_out_right_after_each_replay_is_not_recorded(streams, fake_graph_methods):
    checker, taken, _ = served(streams, 5, lambda logits, step: logits[:2].clone())
    assert taken == {"viewed": 0, "cloned": 0} and codes(checker) == set()


def test_views_the_program_keeps_are_recorded_at_the_next_replay_and_their_stack_is_caught(
        streams, fake_graph_methods):
    head, hidden, graph = torch.nn.Linear(16, 32), torch.randn(4, 16), FakeGraph()
    with whole_process(streams) as (checker, taken):
        with cuda_graph(graph, streams):
            logits = head(hidden)
        captured, last = taken["viewed"], []   # the capture's own views (the weight's transpose)
        for step in range(3):
            hidden.copy_(torch.full((4, 16), float(step)))
            torch.cuda.CUDAGraph.replay(graph)
            last.append(logits[:, -1])   # kept, no copy: each a window onto the next replay's bytes
        torch.stack(last)
    assert taken["viewed"] - captured == 3 and OUTPUT_OVERWRITTEN.code in codes(checker)


def test_an_early_view_kept_and_read_after_later_copies_of_the_same_view_is_caught(streams, fake_graph_methods):
    first: list[torch.Tensor] = []

    def read(logits: torch.Tensor, step: int) -> None:
        if step == 0:
            first.append(logits[:, -1])     # kept from step 0
        else:
            logits[:, -1].clone()           # the same view in a later step, copied out at once

    checker, taken, _ = served(streams, 3, read, after=lambda: first[0].sum())   # read as if it held step 0
    assert taken["viewed"] == 3 and taken["cloned"] == 0   # each later view counts: one of its geometry is kept
    assert OUTPUT_OVERWRITTEN.code in codes(checker)


def test_a_view_of_another_graphs_result_is_recorded_at_once(streams, fake_graph_methods):
    a, b, x, w = FakeGraph(), FakeGraph(), torch.randn(4, 16), torch.randn(16, 8)
    with whole_process(streams) as (checker, taken):
        with cuda_graph(a, streams):
            out_a = x @ w
        with cuda_graph(b, streams):
            out_b = x @ w
        torch.cuda.CUDAGraph.replay(a)
        torch.cuda.CUDAGraph.replay(b)
        out_b[:2].clone()     # b replayed last: nothing recorded
        assert taken == {"viewed": 0, "cloned": 0}
        out_a[:2].clone()     # a's result, another replay since: view and copy recorded
        assert taken == {"viewed": 1, "cloned": 1}


def test_ranges_say_whether_one_range_holds_a_span():
    ranges = Ranges([(100, 200), (300, 400)])
    assert ranges.holds(100, 100) and ranges.holds(150, 10) and ranges.holds(300, 0)
    assert not ranges.holds(150, 100) and not ranges.holds(50, 60) and not ranges.holds(250, 10)
