"""Captures and replays under the recorder, without a GPU: the wrapped graph methods, a capture that
fails, one opened by hand, and recording captures only.

Plain PyTorch code, as in ``test_recorder_hooks``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, runtime, streams  # noqa: E402
from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

from gpu_demo.lab.measure.overhead import EmptyDispatchMode  # noqa: E402
from simlib.trace import Capture, Launch, Replay  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


# -- captures and replays -------------------------------------------------------------------------

def test_plain_capture_and_replays_are_bracketed_by_the_wrapped_graph_methods(streams, fake_graph_methods):
    x = torch.randn(4)
    graph = FakeGraph()
    with recording(streams) as recorder:
        assert torch.cuda.CUDAGraph.capture_begin.__name__ == "capture_begin"   # wrapped while recording
        x.add(1)
        with cuda_graph(graph, streams):
            x.mul(2)
        for _ in range(2):
            torch.cuda.CUDAGraph.replay(graph)
        torch.cuda.CUDAGraph.replay(FakeGraph())   # a graph captured before recording: not ours
    trace = recorder.trace
    captures = [(c.op, c.graph, c.stream, c.error) for c in trace.of(Capture)]
    assert captures == [("begin", 0, "main", None), ("end", 0, "main", None)]
    assert [(r.graph, r.index) for r in trace.of(Replay)] == [(0, 0), (0, 1)]
    assert [launch.graph for launch in trace.of(Launch)] == [None, 0]
    assert fake_graph_methods == ["capture_begin", "capture_end", "replay", "replay", "replay"]
    assert torch.cuda.CUDAGraph.capture_begin.__name__ == "<lambda>"    # and restored after


def test_a_capture_block_that_raises_ends_its_capture_with_the_error(streams, fake_graph_methods):
    x = torch.randn(4)
    with recording(streams) as recorder:
        with pytest.raises(RuntimeError, match="size mismatch"):
            with cuda_graph(FakeGraph(), streams):
                x.mul(2)
                raise RuntimeError("size mismatch, m1: [0 x 8]")
        x.add(1)
    (begin, end) = recorder.trace.of(Capture)
    assert end.error == "size mismatch, m1: [0 x 8]"
    assert recorder.trace.launches(graph=None)[0].step > end.step


def test_a_capture_end_that_fails_ends_the_capture_with_its_error(streams, monkeypatch):
    def unjoined(self):
        raise RuntimeError("CUDA error: capturing stream has unjoined work")

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", lambda self, *a, **k: None)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", unjoined)
    with recording(streams) as recorder:
        with pytest.raises(RuntimeError, match="unjoined"):
            with cuda_graph(FakeGraph(), streams):
                pass
    end = [c for c in recorder.trace.of(Capture) if c.op == "end"][0]
    assert "unjoined work" in end.error and recorder.graph is None


def test_a_capture_opened_by_hand_absorbs_the_graph_captured_inside_it(streams, fake_graph_methods):
    x, graph = torch.randn(4), FakeGraph()
    with recording(streams) as recorder:
        with recorder.capturing([x]) as graph_id, cuda_graph(graph, streams):
            x.mul(2)
        torch.cuda.CUDAGraph.replay(graph)
    assert [(c.op, c.graph, c.inputs) for c in recorder.trace.of(Capture)] == [
        ("begin", 0, (x.data_ptr(),)), ("end", 0, (x.data_ptr(),))]
    assert graph_id == 0 and [r.graph for r in recorder.trace.of(Replay)] == [0]


def test_without_eager_recording_only_captures_are_kept(streams, fake_graph_methods):
    x, graph = torch.randn(4), FakeGraph()
    with recording(streams, eager=False) as recorder:
        x.add(1)
        runtime.device_synchronization()
        with cuda_graph(graph, streams):
            x.mul(2)
        torch.cuda.CUDAGraph.replay(graph)
    assert [r.kind for r in recorder.trace.records] == ["capture", "alloc", "launch", "capture"]


def test_without_eager_recording_the_recorder_dispatches_only_while_a_capture_is_open(streams,
                                                                                       fake_graph_methods):
    x, on_top = torch.randn(4), []
    with recording(streams, eager=False) as recorder:
        on_top.append(_get_current_dispatch_mode() is recorder)
        x.add(1)                        # its block is reported, and nobody is left holding it
        assert not recorder.ledger.pending.pointers
        with cuda_graph(FakeGraph(), streams):
            on_top.append(_get_current_dispatch_mode() is recorder)
            x.mul(2)
        on_top.append(_get_current_dispatch_mode() is recorder)
    assert on_top == [False, True, False]
    assert [r.kind for r in recorder.trace.records] == ["capture", "alloc", "launch", "capture"]


def test_a_mode_left_open_across_a_capture_end_keeps_the_recorder_until_a_later_capture_ends(
        streams, fake_graph_methods):
    x, program_mode = torch.randn(4), EmptyDispatchMode()
    with recording(streams, eager=False) as recorder:
        with cuda_graph(FakeGraph(), streams):
            program_mode.__enter__()
        program_mode.__exit__(None, None, None)
        assert _get_current_dispatch_mode() is recorder       # stays, recording nothing
        x.add(1)
        with cuda_graph(FakeGraph(), streams):
            x.mul(2)
        assert _get_current_dispatch_mode() is not recorder
    launches = [r for r in recorder.trace.records if r.kind == "launch"]
    assert [(r.kernel, r.graph) for r in launches] == [("aten.mul.Tensor", 1)]

