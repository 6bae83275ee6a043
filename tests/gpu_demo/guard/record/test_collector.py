"""Full collections are rarer while a recorder records every op, and the program's thresholds come back."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from gpu_demo.guard.record import collector  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_nested_holds_tune_once_and_the_last_release_restores(thresholds):
    collector.hold()
    collector.hold()
    assert gc.get_threshold() == (700, 10, 10 * collector.FEWER)
    collector.release()
    assert gc.get_threshold() == (700, 10, 10 * collector.FEWER)
    collector.release()
    assert gc.get_threshold() == (700, 10, 10)
    collector.release()                                  # one too many: nothing happens
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_the_program_set_meanwhile_or_collection_switched_off_are_left_alone(thresholds):
    collector.hold()
    gc.set_threshold(1000, 5, 5)                         # the program's own, while recorded
    collector.release()
    assert gc.get_threshold() == (1000, 5, 5)
    gc.set_threshold(0, 10, 10)                          # collection off by threshold
    collector.hold()
    assert gc.get_threshold() == (0, 10, 10)
    collector.release()
    assert gc.get_threshold() == (0, 10, 10)


def test_a_recorder_tunes_while_it_records_every_op_and_restores_when_it_stands_aside(
        thresholds, streams, fake_graph_methods):
    graph = FakeGraph()
    with recording(streams) as recorder, torch.no_grad():
        assert gc.get_threshold()[2] == 10 * collector.FEWER
        checker = CaptureChecker(recorder, on_hazard="warn", whole_process=True)
        x = torch.randn(4, 8)
        with cuda_graph(graph, streams):
            y = x * 2
        torch.cuda.CUDAGraph.replay(graph)            # serving: the recorder stands aside
        assert recorder.journal.aside and gc.get_threshold() == (700, 10, 10)
        y.sum()
        checker.check_now()
    assert gc.get_threshold() == (700, 10, 10)


def test_a_recorder_that_never_stood_aside_restores_when_it_stops(thresholds, streams):
    with recording(streams), torch.no_grad():
        torch.ones(3) * 2
        assert gc.get_threshold()[2] == 10 * collector.FEWER
    assert gc.get_threshold() == (700, 10, 10)
