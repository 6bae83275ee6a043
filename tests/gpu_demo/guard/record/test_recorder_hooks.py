"""The recorder on plain PyTorch code, without a GPU (see ``gpu_fakes`` for the GPU it is played):
streams, events, syncs and memory, as torch reports them.

The program under test never uses ``gpu_demo.guard.record.annotate`` (except where a test
says so): it uses streams, events, ``set_``, storage resizes and Triton
launches the way ordinary PyTorch code does.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import (  # noqa: E402
    ALT,
    ALT2,
    SIDE,
    FakeGraph,
    cuda_graph,
    fake_graph_methods,
    fork,
    graph_launches,
    join,
    recording,
    runtime,
    streams,
)

from gpu_demo.guard.record import hooks, patches  # noqa: E402
from gpu_demo.guard.record.cuda_device import block_bytes  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import (  # noqa: E402
    Alloc,
    EventOp,
    Free,
    HostSync,
    Launch,
    Mutation,
    Trace,
)

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


# -- streams ------------------------------------------------------------------------------

def test_work_goes_on_the_current_stream_named_by_where_it_first_appeared(streams, fake_graph_methods):
    x = torch.randn(8)
    with recording(streams) as recorder:
        x.add(1)                              # eager, legacy default stream
        with streams.on(ALT):
            x.mul(2)                          # warm-up on the stream the capture forks to
        with streams.on(SIDE):
            x.sub(3)                          # only ever eager
        with cuda_graph(FakeGraph(), streams):
            x.add(4)
            fork()
            with streams.on(ALT):
                x.mul(5)
            with streams.on(ALT2):
                x.div(6)
    assert [launch.stream for launch in recorder.trace.of(Launch)] == ["default", "alt", "side", "main", "alt", "alt2"]
    assert fake_graph_methods == ["capture_begin", "capture_end"]


def test_an_annotate_mark_names_the_stream_it_marks(streams, fake_graph_methods):
    from gpu_demo.guard.record import annotate

    x = torch.randn(8)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        with streams.on(ALT), annotate.issuing_on("shared"):
            x.mul(2)
        with streams.on(ALT):
            x.add(1)
    assert [launch.stream for launch in recorder.trace.of(Launch)] == ["shared", "shared"]



def test_the_real_device_asks_torch_for_the_raw_current_stream_once_cuda_is_initialised(monkeypatch):
    from gpu_demo.guard.record.cuda_device import cuda_device

    initialised = [False]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised[0])
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 3, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 1000 + index, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    device = cuda_device()
    assert device.current_stream() is None          # no CUDA context yet: no stream to name
    initialised[0] = True
    assert device.current_stream() == 1003          # the raw cudaStream_t of device 3
    monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream")
    assert cuda_device().current_stream() == 7      # a build without it: the Stream object's


# -- events: fork and join -----------------------------------------------------------------

def test_event_record_and_wait_give_captured_launches_their_fork_and_join_edges(streams, fake_graph_methods):
    x = torch.randn(8)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        x.add(1)                      # 0 main
        fork()
        with streams.on(ALT):
            x.mul(2)                  # 1 alt, after 0
            x.mul(3)                  # 2 alt, after 1
        x.sub(1)                      # 3 main, after 0 only
        join()
        x.div(2)                      # 4 main, after 3 and 2
    trace = recorder.trace
    assert [(e.op, e.stream) for e in trace.of(EventOp)] == [("record", "main"), ("wait", "alt"),
                                                             ("record", "alt"), ("wait", "main")]
    assert [(launch.stream, launch.deps) for launch in graph_launches(trace)] == [
        ("main", ()), ("alt", (0,)), ("alt", (1,)), ("main", (0,)), ("main", (2, 3))]
    first, second = [e.event for e in trace.of(EventOp) if e.op == "record"]
    assert first != second


def test_a_buffer_written_on_alt_and_read_on_main_races_unless_main_waits(streams, fake_graph_methods):
    def program(joined: bool) -> Trace:
        buf = torch.zeros(16)
        with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
            fork()
            with streams.on(ALT):
                buf.add_(1)
            if joined:
                join()
            buf.mul(2)
        return recorder.trace

    assert [(f.rule, f.code) for f in check(program(joined=False))] == [(3, "cross_stream_race")]
    assert check(program(joined=True)) == []


def test_device_stream_and_event_synchronization_are_host_syncs(streams):
    with recording(streams) as recorder:
        runtime.device_synchronization()
        runtime.stream_synchronization(ALT)
        runtime.event_creation(77)
        runtime.event_synchronization(77)
    assert [(s.op, s.stream) for s in recorder.trace.of(HostSync)] == [
        ("synchronize", None), ("stream.synchronize", "side"), ("event.synchronize", None)]


def test_callbacks_reach_no_recorder_once_it_has_stopped(streams):
    with recording(streams) as recorder:
        pass
    runtime.device_synchronization()
    runtime.memory_allocation(1234)
    assert recorder.trace.records == [] and hooks.active() == ()


def _python_calls_in_allocation_report(ptr: int) -> list[str]:
    """The Python functions that run while the runtime reports an allocation, made as
    torch's C++ makes it (C functions not counted)."""
    from torch.cuda import _gpu_trace

    registry, calls = _gpu_trace.MemoryAllocationCallbacks, []

    def profile(frame, event, arg):  # noqa: ANN001 (sys.setprofile's signature)
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        registry.fire_callbacks(ptr)
    finally:
        sys.setprofile(None)
    return calls


def test_an_allocation_report_runs_no_python_while_one_recorder_records(streams, fake_graph_methods):
    with recording(streams) as recorder:
        calls = _python_calls_in_allocation_report(4096)
        recorder.ledger.pending.pointers.remove(4096)
    assert calls == []
    with recording(streams, eager=False) as recorder:
        outside = _python_calls_in_allocation_report(4096)
        with cuda_graph(FakeGraph(), streams):
            inside = _python_calls_in_allocation_report(4096)
            recorder.ledger.pending.pointers.remove(4096)
        assert not recorder.ledger.pending.pointers   # outside a capture the report went nowhere
    assert inside == [] and outside == ["fire_callbacks"]   # torch's own method, calling nobody


def test_callbacks_registered_the_documented_way_still_fire_beside_a_recorder(streams):
    from torch.cuda import _gpu_trace

    theirs: list[int] = []
    _gpu_trace.register_callback_for_memory_deallocation(theirs.append)
    try:
        x, y = torch.randn(8), torch.randn(4)
        with recording(streams) as alone:
            alone._arg("x", x, "r")
            runtime.memory_deallocation(x.data_ptr())
        with recording(streams) as outer, recording(streams) as inner:
            outer._arg("y", y, "r")
            inner._arg("y", y, "r")
            runtime.memory_deallocation(y.data_ptr())
        runtime.memory_deallocation(7)
    finally:
        _gpu_trace.MemoryDeallocationCallbacks.callback_list.remove(theirs.append)
    assert theirs == [x.data_ptr(), y.data_ptr(), 7]
    assert [f.ptr for f in alone.trace.of(Free)] == [x.data_ptr()]
    assert [f.ptr for f in outer.trace.of(Free)] == [f.ptr for f in inner.trace.of(Free)] == [y.data_ptr()]


# -- memory ---------------------------------------------------------------------------------

def test_allocations_get_the_pool_and_the_size_of_the_tensor_that_got_the_block(streams, fake_graph_methods):
    x = torch.randn(8)
    with recording(streams) as recorder:
        eager = torch.empty(64)
        with cuda_graph(FakeGraph(), streams):
            captured = x * 2
    allocs = list(recorder.trace.of(Alloc))
    assert [(a.ptr, a.nbytes, a.pool, a.stream) for a in allocs] == [
        (eager.data_ptr(), 256, "default", "default"), (captured.data_ptr(), 32, "graph0", "main")]
    assert allocs[1].tensor == graph_launches(recorder.trace)[0].args[-1].tensor


def test_a_freed_block_is_sized_from_the_storage_it_was(streams, fake_graph_methods):
    x = torch.randn(8)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            y = x * 2
            ptr = y.data_ptr()
            runtime.memory_deallocation(ptr)     # y dropped: the allocator reports the pointer only
            runtime.memory_deallocation(424242)  # a block the recording never saw: no size, no record
    (free,) = recorder.trace.of(Free)
    assert (free.ptr, free.nbytes, free.pool, free.graph, free.stream) == (ptr, 32, "graph0", 0, "main")


def test_a_block_allocated_below_the_dispatcher_is_claimed_by_the_first_op_that_uses_it(streams, fake_graph_methods):
    # Inductor's generated code allocates with empty_strided_cuda, which no dispatch mode sees: the
    # runtime reports the block, and the first op that reads or writes it (often as out=) gets it,
    # booked to the pool it came from. Without that, its free inside the capture looked like a free
    # of memory outside the graph's pool (rule 10's false alarm on torch.compile's CUDA-graph trees).
    x = torch.randn(8)
    early, scratch, buf = torch.empty(8), torch.empty(8), torch.empty(8)   # made where no mode sees them
    with recording(streams) as recorder:
        runtime.memory_allocation(early.untyped_storage().data_ptr())   # before the capture: default pool
        runtime.memory_allocation(scratch.untyped_storage().data_ptr())
        x.sub(1)
        runtime.memory_deallocation(scratch.untyped_storage().data_ptr())   # given back unused: no record
        with cuda_graph(FakeGraph(), streams):
            runtime.memory_allocation(buf.untyped_storage().data_ptr())
            x.add(1)                          # an op that does not use it
            torch.mul(x, 2, out=buf)          # the first that does
            early.add(buf)
            runtime.memory_deallocation(buf.untyped_storage().data_ptr())   # freed in the capture (del buf0)
    buf_ptr, early_ptr = buf.untyped_storage().data_ptr(), early.untyped_storage().data_ptr()
    allocs = {a.ptr: (a.pool, a.stream) for a in recorder.trace.of(Alloc)}
    assert allocs[buf_ptr] == ("graph0", "main") and allocs[early_ptr] == ("default", "main")
    assert scratch.untyped_storage().data_ptr() not in allocs
    assert [(f.ptr, f.pool) for f in recorder.trace.of(Free)] == [(buf_ptr, "graph0")]
    assert recorder.trace.meta["allocations_without_a_tensor"] == 1   # the scratch block
    assert check(recorder.trace) == []


def test_a_freed_block_is_named_by_the_tensor_it_was_made_for_even_when_named_later(streams, fake_graph_methods):
    from gpu_demo.guard.record import annotate

    x = torch.randn(8)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            y = x * 2
            annotate.label(y, "scaled")    # named after the op that made it, and not used again
            runtime.memory_deallocation(y.data_ptr())
    (free,) = recorder.trace.of(Free)
    assert free.label == "scaled"


def test_a_snapshot_is_renamed_and_leaves_the_recording_as_it_was(streams, fake_graph_methods):
    from gpu_demo.guard.record import annotate

    x = torch.randn(8)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            y = x * 2
            annotate.label(y, "scaled")        # a late name
            y + 1
            seen = recorder.snapshot()
            live = [(a.label, launch.stream) for launch in recorder.trace.of(Launch) for a in launch.args]
    renamed = [(a.label, launch.stream) for launch in seen.of(Launch) for a in launch.args]
    assert renamed == [("t1", "main"), ("scaled", "main"), ("scaled", "main"), ("t3", "main")]
    assert [label for label, _ in live] == ["t1", "t2", "scaled", "t3"]   # provisional until the end
    assert all(stream != "main" for _, stream in live)
    assert [(a.label, launch.stream) for launch in recorder.trace.of(Launch) for a in launch.args] == renamed


def test_a_set_during_capture_frees_the_block_once(streams, fake_graph_methods):
    x = torch.randn(4, 8) * 1
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        old = x.data_ptr()
        x.set_(torch.empty(0))
    (mutation,) = recorder.trace.of(Mutation)
    (free,) = recorder.trace.of(Free)
    assert (mutation.op, mutation.old_ptr, mutation.new_ptr, mutation.new_numel) == ("set_", old, 0, 0)
    assert (free.ptr, free.nbytes, free.pool) == (old, 4 * 8 * 4, "default")   # allocated before the capture


def test_the_caching_allocator_rounds_blocks_to_512_bytes():
    assert [block_bytes(n, "cuda") for n in (0, 1, 512, 513, 4096)] == [0, 512, 512, 1024, 4096]
    assert block_bytes(513, "cpu") == 513


def test_a_storage_resized_to_nothing_is_a_mutation_of_its_tensor_and_a_free(streams, fake_graph_methods):
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        t = torch.randn(4, 8) * 1
        old = t.data_ptr()
        t.untyped_storage().resize_(0)
        # A real CPU op would read address 0; a raw kernel launch reads nothing here.
        patches.record_triton_launch("reader", [("t", t)])
    (mutation,) = recorder.trace.of(Mutation)
    assert (mutation.op, mutation.label, mutation.old_ptr, mutation.new_ptr) == (
        "untyped_storage().resize_", "t", old, 0)   # the variable's own name: no label() gave it one
    assert mutation.new_shape == mutation.old_shape == (4, 8)
    (free,) = recorder.trace.of(Free)
    assert (free.ptr, free.nbytes) == (old, 128)
    reader = graph_launches(recorder.trace)[-1]
    assert (reader.args[0].ptr, reader.args[0].numel, reader.args[0].storage_nbytes) == (0, 32, 0)
    assert {(1, "t"), (2, "t")} <= {(f.rule, f.label) for f in check(recorder.trace)}
    assert "resize_" not in torch.UntypedStorage.__dict__


def test_every_arg_says_how_many_bytes_its_storage_has_left(streams):
    base = torch.randn(10)
    with recording(streams) as recorder:
        base[4:].add(1)
    (launch,) = recorder.trace.of(Launch)
    arg = launch.args[0]
    assert (arg.numel, arg.nbytes, arg.storage_nbytes) == (6, 24, 24)
    assert launch.args[-1].storage_nbytes == 24

