"""The recorder on plain PyTorch code, without a GPU (see ``gpu_fakes`` for the GPU it is played).

The program under test never uses ``gpu_demo.guard.record.annotate`` (except where a test
says so): it uses streams, events, ``set_``, storage resizes and Triton
launches the way ordinary PyTorch code does.
"""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import (  # noqa: E402
    ALT,
    ALT2,
    SIDE,
    FakeGraph,
    by_kernel,
    cuda_graph,
    fake_graph_methods,
    fork,
    graph_launches,
    join,
    recording,
    runtime,
    streams,
)
from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

from gpu_demo.guard.record import hooks, patches  # noqa: E402
from gpu_demo.guard.record.cuda_device import Device, block_bytes  # noqa: E402
from gpu_demo.lab.measure.overhead import EmptyDispatchMode  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import (  # noqa: E402
    Alloc,
    Capture,
    EventOp,
    Free,
    HostRead,
    HostSync,
    Launch,
    Mutation,
    Replay,
    SkippedLaunch,
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
        "untyped_storage().resize_", "t2", old, 0)
    assert mutation.new_shape == mutation.old_shape == (4, 8)
    (free,) = recorder.trace.of(Free)
    assert (free.ptr, free.nbytes) == (old, 128)
    reader = graph_launches(recorder.trace)[-1]
    assert (reader.args[0].ptr, reader.args[0].numel, reader.args[0].storage_nbytes) == (0, 32, 0)
    assert {(1, "t2"), (2, "t2")} <= {(f.rule, f.label) for f in check(recorder.trace)}
    assert "resize_" not in torch.UntypedStorage.__dict__


def test_every_arg_says_how_many_bytes_its_storage_has_left(streams):
    base = torch.randn(10)
    with recording(streams) as recorder:
        base[4:].add(1)
    (launch,) = recorder.trace.of(Launch)
    arg = launch.args[0]
    assert (arg.numel, arg.nbytes, arg.storage_nbytes) == (6, 24, 24)
    assert launch.args[-1].storage_nbytes == 24


# -- host reads -----------------------------------------------------------------------------

def test_the_host_reading_a_mutated_tensors_shape_in_capture_is_recorded(streams, fake_graph_methods):
    x, other = torch.randn(4, 8) * 1, torch.randn(3)
    with recording(streams) as recorder:
        x.shape                                 # outside capture: not recorded
        with cuda_graph(FakeGraph(), streams):
            x.shape, len(x), other.shape        # x not yet mutated: not recorded
            x.set_(torch.empty(0))
            guard = x.shape[0] == 0
            x.size(), x.numel(), len(x), x.dim(), other.numel()
    reads = list(recorder.trace.of(HostRead))
    assert guard and [r.op for r in reads] == ["shape", "size", "numel", "len", "dim"]
    (mutation,) = recorder.trace.of(Mutation)
    assert all(r.tensor == mutation.tensor and r.shape == (0,) and r.graph == 0 and r.stream == "main"
               and r.step > mutation.step for r in reads)


def test_a_routed_first_dispose_behind_a_shape_guard_is_recorded_as_the_host_saw_it(streams, fake_graph_methods):
    """Plain code: the shared branch guards on ``x.shape[0]``, as fused kernels do."""
    w, out = torch.randn(8, 8), torch.zeros(4, 8)
    x = torch.randn(4, 8) * 1
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        fork()
        with streams.on(ALT):
            routed = x @ w
            x.set_(torch.empty(0))            # dispose_tensor, routed first
        if x.shape[0] > 0:                    # shared expert: skipped, out keeps its old values
            out.copy_(x @ w)
        join()
        routed.add(out)
    trace = recorder.trace
    (dispose,) = trace.of(Mutation)
    (read,) = trace.of(HostRead)
    assert (read.op, read.shape) == ("shape", (0,))
    assert read.tensor == dispose.tensor and read.step > dispose.step
    assert not [a for launch in graph_launches(trace) if launch.step > dispose.step
                for a in launch.args if a.tensor == dispose.tensor]
    # The checker's rules 1 and 2 read launches, and none uses x after the set_: only a
    # rule over HostRead records can flag this program.
    assert not [f for f in check(trace) if f.rule == 2]



def test_the_host_read_watch_wraps_the_tensor_readers_only_during_a_capture(streams, fake_graph_methods):
    from torch.overrides import TorchFunctionMode

    class Program(TorchFunctionMode):   # the program's own mode, entered during the capture
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    original_len = torch.Tensor.__len__

    def wrapped() -> list[str]:
        own = [name for name in ("shape", "ndim", "size", "numel", "dim") if name in torch.Tensor.__dict__]
        return own + (["__len__"] if torch.Tensor.__len__ is not original_len else [])

    x, program = torch.randn(4, 8) * 1, Program()
    with recording(streams) as recorder:
        x.set_(torch.empty(0))                      # eager: nothing to watch
        before = wrapped()
        with cuda_graph(FakeGraph(), streams):
            x.shape
            quiet = wrapped()
            y = torch.randn(3) * 1
            y.set_(torch.empty(0))
            armed = wrapped()
            with program:
                y.shape                             # through the program's mode as well
                len(y)                              # reads dim() and shape inside: one read
        after = wrapped()
    assert (before, after) == ([], [])
    assert quiet == armed == ["shape", "ndim", "size", "numel", "dim", "__len__"]
    assert [r.op for r in recorder.trace.of(HostRead)] == ["shape", "len"]


def test_watches_ending_in_any_order_leave_torch_tensor_as_it_was():
    from gpu_demo.guard.record.host_reads import HostReadWatch

    before = dict(torch.Tensor.__dict__)
    seen: dict[str, list[str]] = {"outer": [], "inner": []}
    outer, inner, x = HostReadWatch(), HostReadWatch(), torch.zeros(2, 3)
    outer.arm(lambda op, t: seen["outer"].append(op))
    inner.arm(lambda op, t: seen["inner"].append(op))
    x.size()
    outer.disarm()                               # not the last armed: the readers stay wrapped
    x.numel()
    inner.disarm()
    x.dim()
    assert seen == {"outer": ["size"], "inner": ["size", "numel"]}
    assert dict(torch.Tensor.__dict__) == before


def test_a_read_on_another_thread_is_not_the_capturing_programs(streams, fake_graph_methods):
    x = torch.randn(4) * 1
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        x.set_(torch.empty(0))
        other = threading.Thread(target=lambda: x.shape)
        other.start()
        other.join()
        x.numel()
    assert [r.op for r in recorder.trace.of(HostRead)] == ["numel"]


# -- what each op reads and writes (from its schema) -------------------------------------------

def test_each_argument_is_read_written_or_both_as_its_schema_says(streams):
    a, b, out = torch.randn(4), torch.randn(4), torch.empty(8)
    with recording(streams) as recorder:
        a.add_(b)                                   # in place: self read and written
        torch.cat([a, b], out=out)                  # a list argument, an out= keyword
        out.copy_(torch.zeros(8))                   # copy_ overwrites its destination
        torch.cat((a, b))                           # no out=: the result is the written argument
    launches = [launch for launch in recorder.trace.of(Launch) if launch.kernel != "aten.zeros.default"]
    assert [[(arg.name, arg.access) for arg in launch.args] for launch in launches] == [
        [("self", "rw"), ("other", "r")],
        [("tensors[0]", "r"), ("tensors[1]", "r"), ("out", "w")],
        [("self", "w"), ("src", "r")],
        [("tensors[0]", "r"), ("tensors[1]", "r"), ("out0", "w")],
    ]


# -- tensor identity ----------------------------------------------------------------------------

def test_a_tensor_object_that_takes_a_dead_ones_address_gets_a_new_id(streams, monkeypatch):
    import gpu_demo.guard.record.handles
    import gpu_demo.guard.record.ops

    x = torch.randn(4)
    # Each t at the address of the t before it, as when CPython hands a dead object's slot on.
    real_id = id
    for module in (gpu_demo.guard.record.ops, gpu_demo.guard.record.handles):
        monkeypatch.setattr(module, "id", raising=False, value=lambda obj: 1234 if (
            obj is not x and isinstance(obj, torch.Tensor) and obj.dim() == 1) else real_id(obj))
    with recording(streams) as recorder:
        for i in range(3):
            t = x + i
            t.sum()
            del t
    made = [launch.args[-1].tensor for launch in recorder.trace.of(Launch) if launch.kernel == "aten.add.Tensor"]
    read = [launch.args[0].tensor for launch in recorder.trace.of(Launch) if launch.kernel.startswith("aten.sum")]
    assert len(set(made)) == 3 and made == read


def test_a_label_belongs_to_its_tensor_object_and_goes_with_it(monkeypatch):
    from gpu_demo.guard.record import annotate

    named = annotate.label(torch.randn(2), "x")
    other = torch.randn(2)
    real_id = id
    monkeypatch.setattr(annotate, "id", raising=False,          # other at named's address
                        value=lambda obj: real_id(named) if obj is other else real_id(obj))  # noqa: F821 (del below)
    assert (annotate.label_of(named), annotate.label_of(other)) == ("x", None)
    before = len(annotate._labels)
    del named
    assert len(annotate._labels) == before - 1

def test_handles_of_dead_tensors_are_dropped_as_the_recording_goes_on(streams, monkeypatch):
    import gpu_demo.guard.record.handles

    monkeypatch.setattr(gpu_demo.guard.record.handles, "SWEEP_AT", 64)
    x = torch.randn(4)
    with recording(streams) as recorder:
        for i in range(1000):
            x + i                              # dies at once
        kept = len(recorder.handles.by_id)
    made = {launch.args[-1].tensor for launch in recorder.trace.of(Launch)}
    assert len(made) == 1000 and kept <= 128

def test_records_built_by_position_follow_the_trace_field_order():
    from dataclasses import fields

    from gpu_demo.guard.record.journal import POSITIONAL

    for kind, names in POSITIONAL.items():
        assert tuple(f.name for f in fields(kind))[2:] == names, kind.__name__


# -- the dry run's held storages ----------------------------------------------------------------

def test_holding_storages_keeps_a_dead_tensors_block_until_the_block_ends():
    from torch.multiprocessing.reductions import StorageWeakRef

    from gpu_demo.guard.record.recorder import CaptureRecorder

    x = torch.randn(64)
    with CaptureRecorder(device=Device(lambda: None, traced=False)) as recorder, recorder.holding_storages():
        temp = x * 2
        ref = StorageWeakRef(temp.untyped_storage())
        del temp
        held_inside = not ref.expired()
    assert held_inside and ref.expired()


def test_a_set_outside_capture_still_frees_a_held_block_and_one_inside_does_not():
    from gpu_demo.guard.record.recorder import CaptureRecorder

    x, y = torch.randn(64) * 1, torch.randn(64) * 1
    with CaptureRecorder(device=Device(lambda: None, traced=False)) as recorder, recorder.holding_storages():
        x.add(1)
        x.set_(torch.empty(0))                       # warm-up disposes x: the block goes
        with recorder.capturing([y]):
            y.add(1)
            y.set_(torch.empty(0))                   # the dry capture lets nothing go
    assert [(f.label, f.graph) for f in recorder.trace.of(Free)] == [("t1", None)]


# -- Triton -----------------------------------------------------------------------------------

def test_a_triton_launch_of_unknown_access_records_each_tensor_argument_as_read_and_written(streams,
                                                                                          fake_graph_methods):
    src, dst = torch.randn(4, 8), torch.zeros(32)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        src.add(1)
        fork()
        with streams.on(ALT):
            patches.record_triton_launch("raw_load", [("src_ptr", src), ("dst_ptr", dst), ("numel", 32)])
    launch = graph_launches(recorder.trace)[-1]
    assert (launch.kernel, launch.label, launch.stream, launch.deps) == ("triton:raw_load", "raw_load", "alt", (0,))
    assert [(a.name, a.access, a.ptr, a.numel, a.shape, a.nbytes, a.storage_nbytes) for a in launch.args] == [
        ("src_ptr", "rw", src.data_ptr(), 32, (4, 8), 128, 128), ("dst_ptr", "rw", dst.data_ptr(), 32, (32,), 128, 128)]


def test_a_triton_kernel_reading_a_disposed_tensor_is_flagged(streams, fake_graph_methods):
    x, out = torch.randn(4, 8) * 1, torch.zeros(32)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        fork()
        with streams.on(ALT):
            x.mul(2)
            x.set_(torch.empty(0))
        patches.record_triton_launch("raw_load", [("src_ptr", x), ("dst_ptr", out), ("numel", 32)])
        join()
    launch = by_kernel(recorder.trace, "triton:")[0]
    assert type(launch) is Launch and (launch.args[0].ptr, launch.args[0].numel) == (0, 0)
    assert {(1, "host_mutation"), (2, "empty_argument")} <= {(f.rule, f.code) for f in check(recorder.trace)}



COPY_SOURCE = """def copy(src, dst, numel, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)
"""


class FakeKernel:
    """A ``JITFunction`` as ``patches``' wrapper of ``JITFunction.run`` sees one."""

    def __init__(self, src: str | None, arg_names: list[str], name: str) -> None:
        self.src, self.arg_names = src, arg_names
        self.fn = SimpleNamespace(__name__=name)


def launch_triton(kernel: FakeKernel, *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``, through the wrapper the recorder installs."""
    run = patches._triton_run(lambda self, *a, grid, warmup, **k: None)
    run(kernel, *args, grid=(1,), warmup=False, **kwargs)


def test_a_triton_kernel_that_only_loads_a_tensor_does_not_race_with_a_read_on_another_stream(
        streams, fake_graph_methods):
    """gpu_demo/lab/corpus/fix_dispose_own_buffer: flip(x) on main, the copy kernel loading x on alt."""
    x, staged = torch.randn(4, 8), torch.zeros(4, 8)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        fork()
        x.flip(0)
        with streams.on(ALT):
            launch_triton(FakeKernel(COPY_SOURCE, ["src", "dst", "numel", "BLOCK"], "copy"), x, staged, 32,
                          BLOCK=1024)
        join()
    (launch,) = by_kernel(recorder.trace, "triton:copy")
    assert [(a.name, a.access) for a in launch.args] == [("src", "r"), ("dst", "w")]
    assert check(recorder.trace) == [] and "triton_access_unknown" not in recorder.trace.meta


def test_a_triton_kernel_whose_source_cannot_be_read_writes_everything_and_the_trace_says_why(
        streams, fake_graph_methods):
    x, out = torch.randn(8), torch.zeros(8)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        fork()
        x.flip(0)
        with streams.on(ALT):
            launch_triton(FakeKernel("def copy(src, dst:\n", ["src", "dst"], "copy"), x, out)
        join()
    (launch,) = by_kernel(recorder.trace, "triton:copy")
    assert [a.access for a in launch.args] == ["rw", "rw"]
    assert "does not parse" in recorder.trace.meta["triton_access_unknown"]["copy"]
    assert [f.code for f in check(recorder.trace)] == ["cross_stream_race"]


def test_a_tensor_descriptor_argument_is_recorded_as_its_base_tensor(streams):
    base = torch.zeros(4, 8)
    source = "def fill(desc):\n    desc.store([0, 0], tl.zeros((4, 8), tl.float32))\n"
    with recording(streams) as recorder:
        launch_triton(FakeKernel(source, ["desc"], "fill"), SimpleNamespace(base=base, block_shape=[4, 8]))
    (launch,) = by_kernel(recorder.trace, "triton:fill")
    assert [(a.name, a.access, a.ptr, a.shape) for a in launch.args] == [("desc", "w", base.data_ptr(), (4, 8))]


@torch.library.custom_op("test_recorder::triton_inside", mutates_args=("out",))
def _triton_inside(x: torch.Tensor, out: torch.Tensor) -> None:
    patches.record_triton_launch("inner", [("x", x), ("out", out)])


def test_a_triton_kernel_launched_inside_a_dispatched_op_is_not_recorded_twice(streams):
    x, out = torch.randn(4), torch.zeros(4)
    with recording(streams) as recorder:
        torch.ops.test_recorder.triton_inside(x, out)
        patches.record_triton_launch("direct", [("x", x)])
    assert [launch.kernel for launch in recorder.trace.of(Launch)] == [
        "test_recorder.triton_inside.default", "triton:direct"]


def test_a_triton_launch_whose_tensors_are_all_empty_still_launches(streams):
    with recording(streams) as recorder:
        patches.record_triton_launch("k", [("a", torch.empty(0))])
    assert [type(r) for r in recorder.trace.records if type(r) in (Launch, SkippedLaunch)] == [Launch]


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


# -- the GPU probe's CPU parts ------------------------------------------------------------------

def test_the_probe_describes_every_record_of_each_capture(streams, fake_graph_methods):
    from gpu_demo.lab.measure.probe_recorder import describe

    x, out = torch.randn(4, 8) * 1, torch.zeros(32)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            fork()
            x.set_(torch.empty(0))
            with streams.on(ALT):
                x.shape
                patches.record_triton_launch("raw_load", [("src_ptr", x), ("dst_ptr", out)])
            join()
    lines = describe(recorder.trace).splitlines()
    assert lines[0] == "records: capture 2, event 4, free 1, host_read 1, launch 1, mutation 1"
    assert lines[1] == "graph 0 (captured on main):" and lines[-1] == "  replays: 0"
    assert [line.split()[1] for line in lines[2:-1]] == [
        "event", "event", "free", "mutation", "hostread", "launch", "event", "event"]
    assert f"src_ptr=t1@0x0[0]rw, dst_ptr=t2@{out.data_ptr():#x}[32]rw" in lines[7]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_the_probe_without_a_gpu_says_so_and_exits_2(capsys):
    from gpu_demo.lab.measure.probe_recorder import main

    assert main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
