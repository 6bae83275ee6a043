"""Stories about the host thread, kernel launches, tensor handles and the allocator."""

import pytest

from simlib import ShapeMismatch, Sym, raw
from simlib.engine.allocator import GRANULARITY
from simlib.trace import Alloc, DeviceSpan, Free, Launch, Mutation, SkippedLaunch


def test_launches_are_asynchronous_and_each_host_op_costs_time(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    before = rt.now
    rt.launch("slow", reads=[x], writes=[rt.empty((4, 8), "y")], duration_us=100.0)
    host_after_launch = rt.now
    span = [r for r in rt.trace.records if isinstance(r, DeviceSpan)][-1]
    assert host_after_launch > before                # the launch cost host time ...
    assert span.end_us > host_after_launch + 90      # ... but the host did not wait for the kernel
    rt.synchronize()
    assert rt.now >= span.end_us                     # a sync waits for it


def test_host_steps_are_numbered_in_program_order(rt):
    rt.empty((2,), "a")
    rt.empty((2,), "b")
    steps = [r.step for r in rt.trace.records if isinstance(r, Alloc)]
    assert steps == sorted(steps) and len(set(steps)) == 2


def test_launch_freezes_the_pointer_a_later_set_changes(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    y = rt.empty((4, 8), "y")
    first = rt.launch("k", reads=[x], writes=[y])
    old_ptr = x.ptr
    x.set_(None)
    second = rt.launch("k", reads=[x], writes=[y])
    assert first.args[0].ptr == old_ptr != 0          # frozen before the set_
    assert x.ptr == 0 and x.numel == 0                # the handle itself is now empty
    assert second.args[0].ptr == 0 and second.args[0].numel == 0
    mutation = next(r for r in rt.trace.records if isinstance(r, Mutation))
    assert (mutation.op, mutation.old_ptr, mutation.new_ptr) == ("set_", old_ptr, 0)


def test_zero_element_op_launches_nothing_but_a_raw_pointer_kernel_does(rt):
    empty = rt.empty((0, 8), "empty")
    out = rt.empty((0, 8), "out")
    assert rt.launch("k", reads=[empty], writes=[out]) is None
    skipped = [r for r in rt.trace.records if isinstance(r, SkippedLaunch)]
    assert len(skipped) == 1 and skipped[0].args[0].numel == 0
    buf = rt.empty((4, 8), "buf")
    launched = rt.launch("triton_k", reads=[raw(empty, 32)], writes=[buf])
    assert isinstance(launched, Launch) and launched.args[0].ptr == 0 and launched.args[0].numel == 32


def test_views_share_storage_and_the_last_reference_frees_the_block(rt):
    x = rt.empty((4, 8), "x")
    v = x.view(2, 8, offset=8, label="x_rows_2_3")
    assert v.ptr == x.ptr + 8 * x.itemsize
    x.release()
    assert not any(isinstance(r, Free) for r in rt.trace.records)   # the view keeps it alive
    v.release()
    frees = [r for r in rt.trace.records if isinstance(r, Free)]
    assert len(frees) == 1 and frees[0].pool == "default"


def test_allocator_rounds_to_512_bytes_and_reuses_blocks_on_the_same_stream_only(rt):
    a = rt.empty((1,), "a")            # 2 bytes -> one 512-byte block
    b = rt.empty((1,), "b")
    assert b.ptr - a.ptr == GRANULARITY
    freed = a.ptr
    a.release()
    assert rt.empty((100,), "c").ptr == freed          # 200 bytes: same rounded size, reused
    a2 = rt.empty((1,), "a2")
    a2.release()
    with rt.stream(rt.Stream("other")):
        assert rt.empty((1,), "d").ptr != a2.ptr       # another stream may not reuse it


def test_empty_tensor_has_pointer_zero(rt):
    assert rt.empty((0,), "e").ptr == 0


def test_blocks_freed_during_capture_alias_newer_tensors_in_the_graph_pool(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    with rt.graph(rt.current_stream, inputs=[x]) as g:
        tmp = rt.op("k", x, out_shape=(4, 8), label="tmp")
        stale_ptr = tmp.ptr
        tmp.release()
        newer = rt.op("k2", x, out_shape=(4, 8), label="newer")
    assert stale_ptr != 0 and newer.ptr == stale_ptr         # the freed block was handed out again
    assert hex(stale_ptr).startswith("0x7e")                  # from the graph's private pool
    free = next(r for r in rt.trace.records if isinstance(r, Free))
    assert free.graph == g.id and free.pool == "graph0"


def test_resize_grows_into_a_new_storage(rt):
    x = rt.empty((2,), "x")
    old = x.ptr
    x.resize_(1024)
    assert x.ptr != old and x.numel == 1024
    assert any(isinstance(r, Mutation) and r.op == "resize_" for r in rt.trace.records)


def test_shape_checks_fail_on_the_host_with_a_clear_message(rt):
    x = rt.empty((0,), "x")
    with pytest.raises(ShapeMismatch, match="weight expects 512 features"):
        rt.linear("up", x, 512, 1024)
    with pytest.raises(ShapeMismatch, match=r"size of tensor a \(4\) must match the size of tensor b \(0\)"):
        rt.add(rt.empty((4, 8), "a"), rt.empty((0, 8), "b"))


@pytest.mark.parametrize("bad", [(-1, 2), (2.5,), ("3",)])
def test_bad_shapes_are_refused_with_a_value_error(rt, bad):
    with pytest.raises(ValueError, match="non-negative ints"):
        rt.empty(bad, "t")


def test_values_flow_through_kernels(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    y = rt.op("f", x, out_shape=(4, 8))
    assert rt.read(y) == rt.read(rt.op("f", x, out_shape=(4, 8)))
    assert str(rt.read(y)) == "f(x1)" and rt.read(x) == Sym("x1")
