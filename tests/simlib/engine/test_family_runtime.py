"""The runtime calls the incident family needs: frozen scalars, pinned host copies, shared pools,
weak outputs, calls of the code under check, and what a failed capture raises."""

from __future__ import annotations

import pytest
from capture_errors import raises_first

from simlib import StreamCaptureUnsupported
from simlib.engine.errors import first_error
from simlib.memory import graph_pool
from simlib.trace import Call, Capture, Free, Launch


def test_a_scalar_is_frozen_into_the_launch_and_into_its_value(rt):
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(inputs=[x]) as g:
        y = rt.op("mul", x, out_shape=(4,), scalars={"scale": "scale@1", "n": 4})
    node = g.node("mul")
    assert node.scalars == (("scale", "scale@1"), ("n", "4"))
    x.copy_(rt.from_host((4,), "x2", value="x2"))
    g.replay()
    assert str(rt.read(y)) == "mul(x2, scale@1, 4)"      # the replay computes with the value of the capture


def test_a_scalar_of_another_type_is_refused_in_one_line(rt):
    with pytest.raises(TypeError, match="must be a str .* got list"):
        rt.op("mul", rt.empty((4,), "x"), out_shape=(4,), scalars={"scale": [1.0]})


def test_a_pinned_copy_is_captured_and_replays_the_host_value_of_the_capture(rt):
    with rt.graph() as g:
        pos = rt.from_host((4,), "positions", value="pos@1", pinned=True)
        y = rt.op("rope", pos, out_shape=(4,))
    assert g.node("copy_h2d").role == "h2d"
    g.replay()
    assert str(rt.read(y)) == "rope(pos@1)"
    with raises_first(StreamCaptureUnsupported, match="pageable"):
        with rt.graph():
            rt.from_host((4,), "positions", value="pos@2")


def test_every_capture_uses_one_side_stream_and_a_graph_can_share_anothers_pool(rt):
    x = rt.empty((4,), "x")
    with rt.graph(label="g1") as g1:
        rt.release(rt.op("tmp", x, out_shape=(64,)))
    with rt.graph(label="g2", pool=g1.pool()) as g2:
        y = rt.op("tmp2", x, out_shape=(64,))
    assert g1.stream == g2.stream == "capture"
    begins = [r for r in rt.trace.of(Capture) if r.op == "begin"]
    assert [b.pool for b in begins] == ["", graph_pool(0)] and g2.pool() == graph_pool(0)
    freed = next(r for r in rt.trace.of(Free) if r.label == "tmp")
    assert y.ptr == freed.ptr                 # g2's capture got the block g1's capture freed
    with pytest.raises(ValueError, match="not the pool of a captured graph"):
        with rt.graph(pool="graph7"):
            pass


def test_a_weak_reference_keeps_the_address_but_not_the_block(rt):
    y = rt.op("f", rt.from_host((4,), "x", value="x"), out_shape=(4,), label="y")
    weak, x2 = rt.weak_ref(y), rt.from_host((4,), "x2", value="x2")
    ptr = y.ptr
    rt.release(y)
    z = rt.op("g", x2, out_shape=(4,), label="z")
    assert weak.ptr == z.ptr == ptr and str(rt.read(weak)) == "g(x2)"
    rt.release(weak)                              # drops nothing: z keeps its block
    assert str(rt.read(z)) == "g(x2)"


def test_is_current_stream_capturing(rt):
    seen = [rt.is_current_stream_capturing()]
    with rt.graph():
        seen.append(rt.is_current_stream_capturing())
        with rt.stream(rt.Stream("other")):
            seen.append(rt.is_current_stream_capturing())
    assert seen == [False, True, False]


def test_calls_bracket_their_launches_and_every_launch_records_its_site(rt):
    x = rt.empty((4,), "x")
    with rt.call("warmup") as index:
        rt.op("f", x, out_shape=(4,))
    rt.op("outside", x, out_shape=(4,))
    calls = list(rt.trace.of(Call))
    assert [(c.op, c.index, c.phase) for c in calls] == [("begin", index, "warmup"), ("end", index, "warmup")]
    inside, outside = [r for r in rt.trace.of(Launch)]
    here = "tests/simlib/engine/test_family_runtime.py:"
    assert inside.site.startswith(here) and outside.site.startswith(here) and inside.site != outside.site
    with pytest.raises(ValueError, match="not a call phase"):
        with rt.call("later"):
            pass


def test_the_user_sees_invalidated_raised_over_the_first_error(rt):
    with pytest.raises(Exception) as seen:
        with rt.graph(label="g"):
            rt.synchronize()
    error = seen.value
    assert error.code == "cudaErrorStreamCaptureInvalidated"
    assert isinstance(error.__context__, StreamCaptureUnsupported) and first_error(error) is error.__context__
    assert "previous error during capture" in str(error) and "synchronize" in str(error)
    end = [r for r in rt.trace.of(Capture) if r.op == "end"][-1]
    assert end.error == "cudaErrorStreamCaptureUnsupported"


def test_any_other_error_ends_the_capture_and_goes_on(rt):
    with pytest.raises(KeyError):
        with rt.graph():
            raise KeyError("host bug")
    assert [r for r in rt.trace.of(Capture) if r.op == "end"][-1].error == "aborted"


def test_a_trace_with_calls_exports_and_round_trips_with_its_findings():
    from simlib.checker import check
    from simlib.export import to_chrome_trace
    from simlib.programs.gallery import CASES
    from simlib.trace import Trace

    run = CASES["host_scalar_frozen"].run()
    trace = run.result.trace
    marks = [e["name"] for e in to_chrome_trace(trace)["traceEvents"] if e.get("cat") == "call"]
    assert marks[:2] == ["warmup call 0 begins", "warmup call 0 ends"] and "capture call 2 begins" in marks
    again = Trace.from_json(trace.to_json())
    assert [f.code for f in check(again)] == run.rules == ["frozen_host_value"]
