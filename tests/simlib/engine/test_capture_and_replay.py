"""Stories about stream capture, its errors, and replay of the frozen graph."""

import pytest
from capture_errors import raises_first

from simlib import (
    CapturedEvent,
    IllegalAddress,
    Runtime,
    StreamCaptureImplicit,
    StreamCaptureInvalidated,
    StreamCaptureIsolation,
    StreamCaptureUnjoined,
    StreamCaptureUnsupported,
    Sym,
    raw,
)
from simlib.trace import Capture, DeviceSpan, Launch


def test_capture_records_nodes_instead_of_running_them(rt):
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(rt.current_stream, inputs=[x]) as g:
        y = rt.op("f", x, out_shape=(4,))
    assert [n.kernel for n in g.nodes] == ["f"] and g.nodes[0].graph == g.id
    assert not any(isinstance(r, DeviceSpan) and r.launch == g.nodes[0].id for r in rt.trace.records)
    g.replay()
    assert str(rt.read(y)) == "f(x1)"


def test_fork_and_join_produce_dag_edges(rt):
    main, alt = rt.current_stream, rt.Stream("alt")
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(main) as g:
        a = rt.op("a", x, out_shape=(4,))
        alt.wait_stream(main)
        with rt.stream(alt):
            b = rt.op("b", x, out_shape=(4,))
        c = rt.op("c", x, out_shape=(4,))
        main.wait_stream(alt)
        rt.add(a, b, c, label="merge")
    na, nb, nc, nm = (g.node(k) for k in ("a", "b", "c", "merge"))
    assert nb.stream == "alt" and nb.deps == (na.id,)        # forked after a
    assert nc.deps == (na.id,)                                 # main continues in order
    assert set(nm.deps) == {nc.id, nb.id}                      # the join
    g.replay()
    replay = {r.launch: r for r in rt.trace.records if isinstance(r, DeviceSpan) and r.phase == "replay"}
    assert replay[nb.id].start_us < replay[nc.id].end_us       # the branches overlap
    assert replay[nm.id].start_us >= max(replay[nb.id].end_us, replay[nc.id].end_us)


def test_replay_uses_frozen_pointers_and_new_inputs_only_through_copies(rt):
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(rt.current_stream, inputs=[x]) as g:
        y = rt.op("f", x, out_shape=(4,))
    fresh = rt.from_host((4,), "fresh", value="x2")
    g.replay()
    assert str(rt.read(y)) == "f(x1)"          # a new tensor is not the captured input
    x.copy_(fresh)
    g.replay()
    assert str(rt.read(y)) == "f(x2)"


def test_set_after_capture_does_not_change_the_graph(rt):
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(rt.current_stream) as g:
        y = rt.op("f", x, out_shape=(4,))
    frozen = g.nodes[0].args[0].ptr
    x.set_(rt.from_host((4,), "other", value="z"))
    g.replay()
    assert g.nodes[0].args[0].ptr == frozen and str(rt.read(y)) == "f(x1)"


def test_null_pointer_with_a_size_faults_at_replay_and_the_fault_is_sticky(rt):
    x = rt.from_host((4,), "x", value="x1")
    out = rt.empty((4,), "out")
    with rt.graph(rt.current_stream) as g:
        x.set_(None)
        rt.launch("raw_kernel", reads=[raw(x, 4)], writes=[out])
    g.replay()
    with pytest.raises(IllegalAddress, match="address 0"):
        rt.synchronize()
    with pytest.raises(IllegalAddress):
        rt.empty((1,), "anything")                  # every later call fails too


def test_skipped_launch_leaves_its_output_untouched(rt):
    x = rt.from_host((4, 2), "x", value="x1")
    buf = rt.zeros((4, 2), "buf")
    with rt.graph(rt.current_stream) as g:
        x.set_(None)
        rows = x.numel // 2
        rt.launch("f", reads=[x.view(rows, 2)], writes=[buf.view(rows, 2)])
    g.replay()
    assert str(rt.read(buf)) == "0"


def test_reading_a_freed_and_reused_block_sees_the_new_contents(rt):
    main, alt = rt.current_stream, rt.Stream("alt")
    x = rt.from_host((4,), "x", value="x1")
    with rt.graph(main) as g:
        tmp = rt.op("tmp", x, out_shape=(4,), label="tmp", duration_us=1)
        alt.wait_stream(main)
        with rt.stream(alt):
            rt.op("busy", x, out_shape=(4,), duration_us=50)
            late = rt.op("late_reader", tmp, out_shape=(4,), duration_us=1)
        tmp.release()                                      # no record_stream: unsafe
        reuse = rt.op("overwrite", x, out_shape=(4,), label="reuses_tmp", duration_us=1)
        main.wait_stream(alt)
    assert reuse.ptr == g.node("late_reader").args[0].ptr     # same block
    g.replay()
    # The reader on alt ran after the main stream reused and rewrote tmp's block.
    assert str(rt.read(late)) == "late_reader(overwrite(x1))"


def _sync_device(rt, x):
    rt.synchronize()


def _sync_stream(rt, x):
    rt.current_stream.synchronize()


def _item(rt, x):
    rt.item(rt.op("f", x, out_shape=(1,)))


def _upload(rt, x):
    rt.from_host((1,), "host_data", value="v")


@pytest.mark.parametrize("mistake", [_sync_device, _sync_stream, _item, _upload])
def test_sync_and_host_reads_are_unsupported_and_invalidate_the_capture(rt, mistake):
    x = rt.from_host((1,), "x", value="x1")
    with raises_first(StreamCaptureUnsupported, match="captur"):
        with rt.graph(rt.current_stream) as g:
            mistake(rt, x)
    end = [r for r in rt.trace.records if isinstance(r, Capture) and r.op == "end"][-1]
    assert end.error == "cudaErrorStreamCaptureUnsupported" and not g.ok    # the first error, as recorded


def test_an_invalidated_capture_fails_every_later_op_and_its_end():
    rt = Runtime()
    main = rt.Stream("main")
    with rt.stream(main):
        x = rt.from_host((1,), "x", value="x1")
        g = rt._begin_capture(main, "g")
        with pytest.raises(StreamCaptureUnsupported):
            rt.synchronize()
        with pytest.raises(StreamCaptureInvalidated, match="invalidated earlier by cudaErrorStreamCaptureUnsupported"):
            rt.op("f", x, out_shape=(1,))
        with pytest.raises(StreamCaptureInvalidated):
            rt._end_capture(g, (), failing=False)
    assert not g.ok
    with pytest.raises(ValueError, match="capture failed"):
        g.replay()


def test_capture_must_join_forked_streams_back(rt):
    main, alt = rt.current_stream, rt.Stream("alt")
    x = rt.from_host((1,), "x", value="x1")
    with pytest.raises(StreamCaptureUnjoined, match=r"main.wait_stream\(alt\)"):
        with rt.graph(main):
            alt.wait_stream(main)
            with rt.stream(alt):
                rt.op("f", x, out_shape=(1,))


def test_waiting_on_uncaptured_work_breaks_isolation(rt):
    main, alt = rt.current_stream, rt.Stream("alt")
    with rt.stream(alt):
        rt.op("eager", rt.from_host((1,), "x", value="x1"), out_shape=(1,))
    outside = alt.record_event()
    with raises_first(StreamCaptureIsolation, match="recorded outside the capture"):
        with rt.graph(main):
            main.wait_event(outside)


def test_a_captured_event_cannot_be_queried_or_waited_on_after_capture(rt):
    main = rt.current_stream
    with rt.graph(main):
        e = main.record_event()
        with pytest.raises(CapturedEvent):
            e.query()
    with pytest.raises(CapturedEvent):
        e.synchronize()
    with pytest.raises(CapturedEvent, match="has ended"):
        rt.Stream("late").wait_event(e)


def test_capture_is_refused_on_the_legacy_default_stream():
    rt = Runtime()
    with pytest.raises(StreamCaptureUnsupported, match="non-default stream"):
        with rt.graph(rt.default_stream):
            pass


def test_legacy_stream_work_during_capture_of_a_blocking_stream_is_implicit():
    rt = Runtime()
    blocking = rt.Stream("blocking", blocking=True)
    x, y = rt.empty((1,), "x"), rt.empty((1,), "y")   # before capture: no cudaMalloc during it
    with raises_first(StreamCaptureImplicit):
        with rt.graph(blocking):
            with rt.stream(rt.default_stream):
                rt.launch("legacy", reads=[x], writes=[y])


def test_launch_records_carry_the_graph_and_eager_ones_do_not(rt):
    x = rt.from_host((1,), "x", value="x1")
    rt.op("eager", x, out_shape=(1,))
    with rt.graph(rt.current_stream) as g:
        rt.op("captured", x, out_shape=(1,))
    by_kernel = {r.kernel: r for r in rt.trace.records if isinstance(r, Launch)}
    assert by_kernel["eager"].graph is None and by_kernel["captured"].graph == g.id
    assert rt.read(x) == Sym("x1")


def test_executor_lanes_open_reuse_and_never_lose_a_dependency():
    from types import SimpleNamespace

    from simlib.engine.runtime.replay import _Lanes

    lanes = _Lanes()
    node = lambda i, *deps: SimpleNamespace(id=i, deps=deps)  # noqa: E731
    assert lanes.assign(node(0)) is False          # the first root runs on lane 0
    assert lanes.assign(node(1, 0)) is False       # continues lane 0
    assert lanes.assign(node(2, 0)) is True        # a second branch opens lane 1 (starts late)
    assert lanes.assign(node(3, 1, 2)) is False    # the join continues lane 0
    assert lanes.assign(node(4)) is False          # lane 1's work was joined: reused, no delay
    assert lanes.assign(node(5, 2)) is True        # 2 no longer ends a lane: a new one opens
