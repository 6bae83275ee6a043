"""What the recorder writes down for the incident family's rules (8 to 11), on the CPU.

Host numbers a launch freezes (``Launch.scalars``), the user's line that issued it
(``Launch.site``), the calls of a recording (``Call``), host-to-device copies
(``role="h2d"``) and storage changed under a tensor object with no recorded op
(``Mutation(op="storage_swap")``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo.guard.record.capture import RECORDED_WARMUPS, record_capture  # noqa: E402
from gpu_demo.guard.record.op_plans import H2D, copy_role, frozen_scalar  # noqa: E402
from gpu_demo.guard.record.triton_access import access_of  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import Call, HostRead, Launch, Mutation, SkippedLaunch, Trace  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name
HERE = __file__.rsplit("/", 1)[-1]


def kernels(trace: Trace, name: str) -> list[Launch]:
    return [launch for launch in trace.of(Launch) if launch.kernel.startswith(name)]


class Scaled(torch.nn.Module):
    """A module that changes a Python float every call, as vLLM #46913's did."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale += 0.25
        return x * self.scale


# -- host numbers and sites --------------------------------------------------------------------

def test_each_launch_freezes_its_host_numbers_and_the_users_line_that_issued_it():
    trace = record_capture(Scaled(), [torch.randn(4)], replays=0)
    muls = kernels(trace, "aten.mul")
    assert [dict(m.scalars)["other"] for m in muls] == ["0.75", "1.0", "1.25"]
    line = next(i for i, text in enumerate(open(__file__), 1) if "return x * self.scale" in text)
    assert {m.site for m in muls} == {f"tests/gpu_demo/guard/record/{HERE}:{line}"}


@pytest.mark.parametrize("value, frozen", [
    (3, "3"), (0.5, "0.5"), (True, "True"), ([2, 3], "[2, 3]"), ((1.0,), "[1.0]"),
    (None, None), ("mean", None), ([], None), (torch.float32, None), ([1, None], None),
])
def test_only_host_numbers_and_sizes_are_frozen_as_scalars(value, frozen):
    assert frozen_scalar(value) == frozen


def test_a_triton_launch_freezes_its_number_arguments_beside_its_tensors(streams):
    from gpu_demo.guard.record.patches import record_triton_launch

    x = torch.randn(8)
    with recording(streams) as recorder:
        record_triton_launch("scale_kernel", [("x_ptr", x), ("n", 8), ("scale", 0.5), ("BLOCK", 16)])
    (launch,) = recorder.trace.of(Launch)
    assert launch.scalars == (("n", "8"), ("scale", "0.5"), ("BLOCK", "16"))
    assert launch.site.startswith(f"tests/gpu_demo/guard/record/{HERE}:")


def test_the_same_function_in_two_files_gives_each_launch_its_own_file(streams, tmp_path):
    """Two cells of a notebook (or two copies of a helper) define the same function on the same
    line: their code objects compare equal, but a launch names the file it came from."""
    source = "def step(x):\n    return x * 2\n"
    steps = []
    for name in ("cell_a.py", "cell_b.py"):
        namespace: dict = {}
        exec(compile(source, str(tmp_path / name), "exec"), namespace)
        steps.append(namespace["step"])
    assert steps[0].__code__ == steps[1].__code__   # what a cache keyed by the code object would merge
    x = torch.randn(4)
    with recording(streams) as recorder:
        for step in steps:
            step(x)
    first, second = kernels(recorder.trace, "aten.mul")
    assert (first.site, second.site) == (f"{tmp_path / 'cell_a.py'}:2", f"{tmp_path / 'cell_b.py'}:2")


def test_an_op_issued_where_no_python_frame_is_above_the_recorder_has_no_site(streams):
    """The autograd engine runs a CUDA backward's ops on a C++ thread of its own: there the
    recorder's ``__torch_dispatch__`` is the first Python frame (a thread started on a C
    callable stands in for it)."""
    import _thread
    import functools
    import time

    x, y = torch.randn(4), torch.randn(4)
    with recording(streams) as recorder:
        _thread.start_new_thread(functools.partial(recorder.__torch_dispatch__, torch.ops.aten.add.Tensor, (),
                                                   (x, y)), ())
        deadline = time.monotonic() + 10   # an op that raised there records nothing
        while not kernels(recorder.trace, "aten.add") and time.monotonic() < deadline:
            time.sleep(0.01)
    (launch,) = kernels(recorder.trace, "aten.add")
    assert launch.site == ""


# -- calls ---------------------------------------------------------------------------------------

def test_a_recording_brackets_each_warm_up_call_and_the_capture_call():
    trace = record_capture(Scaled(), [torch.randn(4)], replays=1)
    calls = [(c.op, c.index, c.phase) for c in trace.of(Call)]
    phases = ["warmup"] * RECORDED_WARMUPS + ["capture"]
    assert calls == [(op, i, phase) for i, phase in enumerate(phases) for op in ("begin", "end")]
    begins = [c.step for c in trace.of(Call) if c.op == "begin"]
    ends = [c.step for c in trace.of(Call) if c.op == "end"]
    for launch in kernels(trace, "aten.mul"):   # each launch inside exactly one call
        assert sum(b < launch.step < e for b, e in zip(begins, ends)) == 1
    assert [m.graph for m in kernels(trace, "aten.mul")] == [None] * RECORDED_WARMUPS + [0]


# -- host-to-device copies -------------------------------------------------------------------------

def test_a_copy_from_host_memory_into_device_memory_is_an_h2d_launch():
    host, device = SimpleNamespace(is_cuda=False), SimpleNamespace(is_cuda=True)
    assert copy_role([host], [device]) == H2D
    assert copy_role([device], [device]) == "" and copy_role([device], [host]) == ""


def test_a_copy_between_host_tensors_keeps_the_marks_role(streams):
    static, host = torch.zeros(4), torch.randn(4)
    with recording(streams) as recorder:
        static.copy_(host)
    (launch,) = recorder.trace.of(Launch)
    assert launch.role == "" and launch.kernel.startswith("aten.copy_")


# -- storage changed under a tensor object ----------------------------------------------------------

def swaps(trace: Trace) -> list[Mutation]:
    return [m for m in trace.of(Mutation) if m.op == "storage_swap"]


def test_data_assignment_is_a_storage_swap_at_the_next_use(streams, fake_graph_methods):
    x = torch.randn(4)
    with recording(streams) as recorder:
        x.add(1)
        with cuda_graph(FakeGraph(), streams):
            x.data = torch.empty(0)    # DeepSpeed-style disposal: no aten op
            x.mul(2)
    (swap,) = swaps(recorder.trace)
    (use,) = recorder.trace.of(SkippedLaunch)   # an empty result: PyTorch launches nothing
    assert (swap.old_numel, swap.new_numel, swap.new_ptr, swap.graph) == (4, 0, x.data_ptr(), 0)
    assert swap.step < use.step and "x.data = ..." in swap.why


def test_data_assignment_before_a_shape_guard_is_a_swap_then_a_host_read(streams, fake_graph_methods):
    h = torch.randn(4)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            x = h * 1
            x.data = torch.empty(0)
            if x.shape[0] == 0:       # the guard skips every launch on x
                pass
    (swap,) = swaps(recorder.trace)
    (read,) = recorder.trace.of(HostRead)
    assert swap.step < read.step and read.shape == (0,)
    assert {f.code for f in check(recorder.trace)} == {"host_mutation"}


@torch.library.custom_op("capture_order_test::dispose", mutates_args=("x",))
def dispose(x: torch.Tensor) -> None:
    x.set_(torch.empty((0,), dtype=x.dtype))


def test_a_set_inside_a_custom_op_is_a_storage_swap_named_after_the_op(streams, fake_graph_methods):
    x = torch.randn(4)
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            dispose(x)
            x.mul(2)
    (swap,) = swaps(recorder.trace)
    (op,) = kernels(recorder.trace, "capture_order_test.dispose")
    assert op.step < swap.step and "dispose changed its storage inside the op" in swap.why
    assert (swap.old_numel, swap.new_numel) == (4, 0)


def test_recorded_changes_and_out_results_resized_to_fit_are_no_swaps(streams):
    x, out = torch.randn(4), torch.empty(0)
    with recording(streams) as recorder:
        x.add(1)
        x.set_(torch.randn(6))
        x.add(1)
        torch.add(x, 1, out=out)      # out= resizes its result: the op's documented effect
        out.mul(2)
        values, indices = torch.empty(0), torch.empty(0, dtype=torch.long)
        torch.topk(x, 2, out=(values, indices))   # named out= results, resized too
        values.add(1), indices.add(1)
        x.resize_(3)
        x.add(1)
    assert swaps(recorder.trace) == []
    assert [m.op for m in recorder.trace.of(Mutation)] == ["set_", "resize_"]


# -- how far a raw Triton kernel reaches ----------------------------------------------------------

COPY_KERNEL = '''
@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs, mask=offs < n)
    tl.store(dst_ptr + offs, x, mask=offs < n)
'''


def test_a_size_argument_in_every_mask_bounds_the_kernels_reach_through_each_pointer():
    access = access_of(COPY_KERNEL, ("src_ptr", "dst_ptr", "n", "BLOCK"))
    assert access.extents == {"src_ptr": "n", "dst_ptr": "n"}
    unbounded = COPY_KERNEL.replace("tl.store(dst_ptr + offs, x, mask=offs < n)", "tl.store(dst_ptr + offs, x)")
    assert access_of(unbounded, ("src_ptr", "dst_ptr", "n", "BLOCK")).extents == {"src_ptr": "n"}
    named_mask = COPY_KERNEL.replace("x = tl.load(src_ptr + offs, mask=offs < n)",
                                     "mask = offs < n\n    x = tl.load(src_ptr + offs, mask=mask)")
    assert access_of(named_mask, ("src_ptr", "dst_ptr", "n", "BLOCK")).extents == {"src_ptr": "n", "dst_ptr": "n"}
    by_constexpr = COPY_KERNEL.replace("offs < n", "offs < BLOCK")
    assert access_of(by_constexpr, ("src_ptr", "dst_ptr", "n", "BLOCK")).extents == {}


@pytest.mark.parametrize("n, flagged", [(8, False), (24, True)])
def test_a_kernel_told_to_reach_past_its_tensor_is_an_extent_past_the_storage(n, flagged, streams,
                                                                              fake_graph_methods):
    from gpu_demo.guard.record.patches import record_triton_launch

    src, dst = torch.randn(8), torch.zeros(32)
    access = access_of(COPY_KERNEL, ("src_ptr", "dst_ptr", "n", "BLOCK"))
    with recording(streams) as recorder:
        with cuda_graph(FakeGraph(), streams):
            record_triton_launch("copy_kernel", [("src_ptr", src), ("dst_ptr", dst), ("n", n), ("BLOCK", 16)],
                                 access)
    (launch,) = recorder.trace.of(Launch)
    assert [a.nbytes for a in launch.args] == [4 * n, 4 * n]
    found = {(f.code, f.label) for f in check(recorder.trace)}
    assert (("extent_exceeds_storage", launch.args[0].label) in found) == flagged
    assert not any(label == launch.args[1].label for _, label in found)   # dst holds 32 elements


# -- pools -------------------------------------------------------------------------------------

def test_eager_allocations_routed_into_a_graph_pool_are_booked_to_it_and_a_capture_into_it_shares_its_name(streams):
    # torch.compile's CUDA-graph trees warm up with allocations routed into the pool they then capture into
    # (torch._C._cuda_beginAllocateCurrentThreadToPool): those blocks are the pool's, not the default pool's.
    from simlib.trace import Alloc, Capture

    handle = (7, 1)
    with recording(streams) as recorder:
        recorder.on_pool_routing(handle, True)
        routed = torch.ones(64) * 2
        recorder.on_pool_routing(handle, False)
        plain = torch.ones(64) * 3
        graph = object()
        recorder.on_capture_begin(graph, handle)
        recorder.on_capture_end(graph, None)
    pools = {r.ptr: r.pool for r in recorder.trace.of(Alloc)}
    assert pools[routed.untyped_storage().data_ptr()] == "mempool0"
    assert pools[plain.untyped_storage().data_ptr()] == "default"
    assert {r.pool for r in recorder.trace.of(Capture)} == {"mempool0"}
