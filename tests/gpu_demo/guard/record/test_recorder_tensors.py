"""What the recorder sees of tensors, without a GPU: the host's reads of shapes, each op's reads and
writes, tensor identity, and the dry run's held storages.

Plain PyTorch code, as in ``test_recorder_hooks``.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import ALT, FakeGraph, cuda_graph, fake_graph_methods, fork, graph_launches, join, recording, streams  # noqa: E402

from gpu_demo.guard.record.cuda_device import Device  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import Free, HostRead, Launch, Mutation, View  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


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



def test_a_weak_reference_is_a_view_of_its_tensor_and_a_shared_storage_links_nothing(streams):
    # vLLM's weak_ref_tensor: a storage made from the tensor's pointer, which no op links to it
    with recording(streams) as recorder:
        logits, other = torch.randn(4, 8) * 1, torch.randn(4, 8) * 1
        storage = torch._C._construct_storage_from_data_pointer(logits.untyped_storage().data_ptr(), logits.device,
                                                                logits.untyped_storage().nbytes())
        weak = torch.empty(0).set_(storage, 0, logits.shape, logits.stride())
        shared = torch.empty(0).set_(other)
        weak.sum(), logits.sum(), shared.sum()
    sums = [r for r in recorder.trace.of(Launch) if "sum" in r.kernel]
    tensor = {name: launch.args[0].tensor for name, launch in zip(("weak", "logits", "shared"), sums)}
    assert [(v.tensor, v.base, v.ptr) for v in recorder.trace.of(View)] == [
        (tensor["weak"], tensor["logits"], logits.data_ptr())]
