"""Standing aside with torch's GPU-trace reports off: the gate that stops them, and the frees still seen."""

from __future__ import annotations

import gc
import warnings
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from gpu_demo.guard.record import hooks, report_gate  # noqa: E402
from gpu_demo.guard.record.free_watch import FreeWatch  # noqa: E402
from gpu_demo.guard.record.report_gate import GATE, ReportGate  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


def span(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


def test_the_gate_shuts_only_reports_that_were_on_and_opens_only_what_it_shut():
    flag = SimpleNamespace(value=True)              # torch's flag, after ``_activate_gpu_trace``
    gate = ReportGate(flag)
    gate.shut()
    assert flag.value is False and gate.shut_now
    gate.open()
    assert flag.value is True and not gate.shut_now
    never = SimpleNamespace(value=False)            # a process that never activated the reports
    gate = ReportGate(never)
    gate.shut()
    gate.open()
    assert never.value is False
    missing = ReportGate(None)                      # a torch without the symbol: reports as before
    missing.shut()
    assert not missing.available and not missing.shut_now


def test_this_torch_exports_the_flag_the_gate_writes():
    assert GATE.available


def test_a_watched_blocks_free_is_told_when_its_storage_dies_not_when_its_tensor_does():
    freed: list[int] = []
    static, weight, other = torch.randn(64), torch.randn(16, 16), torch.randn(64)
    watch = FreeWatch(freed.append)
    tensors = [static, weight, other]
    assert watch.watch([span(static), span(weight[2:4])], lambda: iter(tensors))
    view, ptr = weight[4:], weight.data_ptr()
    del tensors[:], weight                          # the tensor object dies, its storage lives in the view
    gc.collect()
    assert freed == []
    other = None                                    # not watched: no word of it
    del view
    gc.collect()
    assert freed == [ptr]
    static.set_(torch.randn(8))                     # its block let go under the same tensor object
    assert len(freed) == 2 and watch.covers        # a freed block stays covered: rule 10 has its free


def test_a_span_on_no_live_storage_is_not_covered_and_a_stopped_watch_tells_nothing():
    freed: list[int] = []
    watch = FreeWatch(freed.append)
    held = [torch.randn(8)]
    assert not watch.watch([(1, 2)], lambda: iter(held))
    assert watch.watch([span(held[0])], lambda: iter(held))   # asked again with other spans: those
    held.append(torch.randn(8))
    assert watch.watch([span(held[1])], lambda: iter(held))   # the first no longer watched, the second is
    watch.stop()
    held.clear()
    gc.collect()
    assert freed == [] and not watch.covers


def test_a_watch_asked_again_says_what_a_fresh_watch_would_and_is_told_each_free():
    # Asked at every capture's end, the watch looks again only at new spans, uncovered ones and those
    # whose storage died or went: the same answer as a fresh watch of the same spans, on random
    # storages born, watched, unwatched and freed; and a watched storage's death is told.
    import random

    told = 0
    for seed in range(30):
        draw, freed, ignored = random.Random(seed), [], []
        watch, held = FreeWatch(freed.append), []
        for _ in range(20):
            if draw.random() < 0.6:
                held.append(torch.randn(draw.choice([4, 16, 64])))
            spans = [span(t) for t in held if draw.random() < 0.7]
            if held and draw.random() < 0.3:
                spans.append((held[0].data_ptr() + 1, held[0].data_ptr() + 2))   # a span inside a block
            if draw.random() < 0.2:
                spans.append((8, 16))   # on no storage
            fresh = FreeWatch(ignored.append)
            covers = watch.watch(spans, lambda: iter(list(held)))
            assert covers == fresh.watch(spans, lambda: iter(list(held))), seed
            assert sorted(watch.uncovered) == sorted(fresh.uncovered), seed
            fresh.stop()
            if held and draw.random() < 0.4:
                t = held.pop(draw.randrange(len(held)))
                ptr, end = span(t)
                watched = any(ptr <= lo < end for lo, _ in spans)
                del t   # its storage dies now (no cycle holds it)
                assert (ptr in freed) == watched, seed
                told += watched
                freed.clear()
        watch.stop()
    assert told > 30   # the draws free watched storages often


def test_reports_go_off_while_nobody_needs_them_and_come_on_when_a_callback_is_registered(monkeypatch):
    flag = SimpleNamespace(value=True)
    monkeypatch.setattr(report_gate, "GATE", ReportGate(flag))
    listener = SimpleNamespace(quiet=True, on_allocated=None, **{name: lambda *a: None for name in (
        "on_event_created", "on_event_deleted", "on_event_recorded", "on_event_waited", "on_freed",
        "on_synchronized")})
    with hooks.listening(listener):
        assert flag.value is False
        listener.quiet = False
        hooks.reroute()
        assert flag.value is True
        listener.quiet = True
        hooks.reroute()
        assert flag.value is False
        from torch.cuda import _gpu_trace
        _gpu_trace.register_callback_for_memory_allocation(print)   # a sanitizer's, registered the documented way
        try:
            assert flag.value is True                   # at once: no route change needed
        finally:
            _gpu_trace.MemoryAllocationCallbacks.callback_list.remove(print)
        hooks.reroute()
        assert flag.value is False
    assert flag.value is False                      # nobody listens: no report is made for nobody
    _gpu_trace.register_callback_for_stream_creation(print)   # the sanitizer enabled after a check
    try:
        assert flag.value is True
    finally:
        _gpu_trace.StreamCreationCallbacks.callback_list.remove(print)
        hooks.reroute()
    assert flag.value is False


def test_a_server_that_rebuilds_a_static_input_is_caught_with_no_free_report(streams, fake_graph_methods):
    # Serving, the recorder stands aside quiet: the rebuilt input's old block is freed with no report
    # from the runtime (the fakes report none for a dropped tensor), and rule 10 still fires.
    graph, inputs = FakeGraph(), {}
    with recording(streams) as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        weight, inputs["x"] = torch.randn(64), torch.randn(64) * 1
        with cuda_graph(graph, streams):
            out = inputs["x"] * weight + 1            # ``inputs["x"] * weight``: an intermediate, gone at once
        torch.cuda.CUDAGraph.replay(graph)
        # Quiet: the input and the weight are followed through their storages; the dead intermediate's
        # block is the graph pool's, whose free no rule uses.
        assert recorder.aside.quiet and not checker.reports[-1].findings
        out.clone()                                   # a read of the graph's result: still recorded
        torch.cuda.CUDAGraph.replay(graph)
        inputs["x"] = torch.randn(64) * 1             # rebuilt: the graph still reads the old block
        torch.cuda.CUDAGraph.replay(graph)
    assert [f.code for r in checker.reports for f in r.findings] == ["freed_under_graph"]


def test_a_capture_while_serving_into_the_pool_its_inputs_were_routed_to_frees_them_as_pool_memory(
        streams, fake_graph_methods):
    # torch.compile's CUDA-graph trees, serving: after the first replay a new shape is recorded. Its inputs
    # are copied into blocks routed into the tree's pool (``_cuda_beginAllocateCurrentStreamToPool``), then
    # freed during the capture (the compiled function clears its argument list) while the graph keeps their
    # addresses: the pool's memory, which rule 10 leaves alone. Found on the H200: standing aside, the
    # recorder missed the routed allocations and booked their frees to the default pool.
    from gpu_fakes import runtime

    pool, first, second = (7, 1), FakeGraph(), FakeGraph()
    with recording(streams) as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        weight = torch.randn(64)
        with streams.on(2):
            torch.cuda.CUDAGraph.capture_begin(first, pool=pool)
            kept = weight * 2
            torch.cuda.CUDAGraph.capture_end(first)
        torch.cuda.CUDAGraph.replay(first)
        assert recorder.journal.aside                 # serving: the recorder stands aside
        recorder.on_pool_routing(pool, True)
        inputs = [torch.randn(64) * 1]                # the recording input, in the pool
        recorder.on_pool_routing(pool, False)
        with streams.on(2):
            torch.cuda.CUDAGraph.capture_begin(second, pool=pool)
            out = inputs[0] * weight
            ptr = inputs[0].untyped_storage().data_ptr()
            inputs.clear()                            # the compiled function drops its inputs
            runtime.memory_deallocation(ptr)
            torch.cuda.CUDAGraph.capture_end(second)
        torch.cuda.CUDAGraph.replay(second)
        torch.cuda.CUDAGraph.replay(first)
    assert kept is not None and out is not None
    assert [f.code for r in checker.reports for f in r.findings] == []


@pytest.mark.gpu
def test_after_a_check_in_the_same_process_an_error_on_the_gpu_stays_the_programs_own():
    # With the reports left on after a recording, a free reported while an error unwound failed in torch's
    # C++ ("cuda trace hook execution failed") and the program saw ``SystemError: error return without
    # exception set`` instead of its own error (on the H200, in test_where_and_why).
    from gpu_demo import check_capture

    check_capture(lambda: (torch.nn.Linear(16, 16), (torch.randn(4, 16),)), isolate=False, dtype="float32")
    assert not hooks.active() and GATE.shut_now   # nobody listens: no report is made
    x = torch.randn(2, 4, device="cuda")
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        x @ x.new_ones(3, 3)
