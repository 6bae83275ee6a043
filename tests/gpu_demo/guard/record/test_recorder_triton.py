"""Triton kernels under the recorder, without a GPU: launched directly, inside an op, of unknown or
unreadable access.

Plain PyTorch code, as in ``test_recorder_hooks``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import (  # noqa: E402
    ALT,
    FakeGraph,
    by_kernel,
    cuda_graph,
    fake_graph_methods,
    fork,
    graph_launches,
    join,
    recording,
    streams,
)

from gpu_demo.guard.record import patches  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import Launch, SkippedLaunch  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


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

