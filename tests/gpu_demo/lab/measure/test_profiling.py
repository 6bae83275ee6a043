"""Reading profiler timelines (synthetic Chrome traces)."""

from __future__ import annotations


def _kernel(name, stream, ts, dur, correlation):
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": correlation, "grid": [2, 1, 1]}}


def test_a_chrome_trace_becomes_replays_with_roles_gaps_and_the_join():
    from gpu_demo.lab.measure.profiling import join_gap, read_chrome_trace, same_stream_gaps, sink_gap, stream_starts

    events = [
        {"cat": "user_annotation", "name": "gate", "ts": 0, "dur": 10},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 1, "args": {"correlation": 1}},
        _kernel("gemm", 7, 20, 4, 1),
        # one graph replay (correlation 2): two streams overlap, then main waits for alt
        _kernel("norm", 7, 100, 2, 2),
        _kernel("routed", 9, 103, 10, 2),
        _kernel("shared", 7, 104, 3, 2),
        _kernel("merge", 7, 115, 1, 2),
    ]
    timeline = read_chrome_trace({"traceEvents": events})
    eager, replay = timeline.per_launch()
    assert [k.name for k in replay] == ["norm", "routed", "shared", "merge"]
    assert timeline.role_of(eager[0]) == "gate" and timeline.role_of(replay[0]) == ""
    assert sorted(same_stream_gaps(replay)) == [2.0, 8.0]
    assert join_gap(replay) == (2.0, True)
    assert eager[0].blocks == 2
    assert sink_gap(replay) == 2.0 and stream_starts(replay) == {3: 0.0, 1: 3.0}


def test_a_pdl_kernel_that_starts_before_its_predecessor_ends_has_a_negative_sink_gap():
    from gpu_demo.lab.measure.profiling import read_chrome_trace, sink_gap

    events = [_kernel("combine", 7, 0, 5, 1), _kernel("residual_add_pdl", 8, 3, 4, 1)]
    (replay,) = read_chrome_trace({"traceEvents": events}).per_launch()
    assert sink_gap(replay) == -2.0
