"""Collectives under the recorder, and the tensor-parallel MoE, in one process (gloo, world size 1)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from small_moe import CPU32, SMALL

from gpu_demo.guard.protocol.metric import relative_error
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.guard.record.cuda_device import cpu_device
from gpu_demo.guard.record.recorder import CaptureRecorder
from gpu_demo.lab.distributed.tp_moe import TensorParallel, TensorParallelMoE
from gpu_demo.lab.moe.model import MoEStack
from simlib.checker import check


@pytest.fixture
def world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def launches(recorder: CaptureRecorder) -> dict[str, object]:
    return {r.label: r for r in recorder.trace.launches() if r.kernel.startswith("c10d.")}


def test_a_collective_is_a_launch_with_its_buffers_group_and_settings(world_of_one):
    x, gathered = torch.ones(4), [torch.empty(4)]
    with CaptureRecorder(device=cpu_device()) as recorder:
        y = x * 2
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        dist.all_gather(gathered, y)
        dist.broadcast(y, src=0)
    found = launches(recorder)
    reduce, gather, broadcast = found["allreduce_"], found["allgather_"], found["broadcast_"]
    assert [(a.name, a.access, a.shape) for a in reduce.args] == [("tensors[0]", "rw", (4,))]
    assert dict(reduce.scalars) == {"group": "default_pg", "group_ranks": "0", "backend": "gloo",
                                    "reduce_op": "MAX", "async_op": "False", "dtype": "float32"}
    assert [(a.name, a.access) for a in gather.args] == [("output_tensors[0][0]", "w"), ("input_tensors[0]", "r")]
    assert dict(broadcast.scalars)["root_rank"] == "0"
    assert reduce.stream == "main" and reduce.deps == (recorder.trace.launches()[0].id,)


def test_a_reduce_op_that_changes_per_call_is_frozen_per_call(world_of_one):
    """What rule 8 (frozen_host_value) compares across calls: a collective's scalars, call by call."""
    with CaptureRecorder(device=cpu_device()) as recorder:
        for step in range(2):
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.SUM if step == 0 else dist.ReduceOp.MAX)
    reduces = [dict(r.scalars)["reduce_op"] for r in recorder.trace.launches() if r.label == "allreduce_"]
    assert reduces == ["SUM", "MAX"]


def test_the_tensor_parallel_stack_of_one_rank_is_the_full_stack(world_of_one):
    x = torch.randn(SMALL.tokens, SMALL.hidden)
    with torch.no_grad():
        got = TensorParallelMoE(SMALL.with_(shared_mode="plain"), CPU32, TensorParallel(0, 1))(x.clone())
        want = MoEStack(SMALL.with_(shared_mode="plain"), CPU32)(x.clone())
    assert relative_error(got, want) < 1e-6


def test_the_all_reduce_is_captured_in_the_graph_and_the_safe_order_is_clean(world_of_one):
    model = TensorParallelMoE(SMALL.with_(order="shared_first"), CPU32, TensorParallel(0, 1))
    with torch.no_grad():
        trace = record_capture(model, [torch.randn(SMALL.tokens, SMALL.hidden)], meta={"rank": 0})
    captured = [r for r in trace.launches(graph=0) if r.kernel.startswith("c10d.")]
    assert [r.label for r in captured] == ["merge/allreduce_"]
    assert check(trace) == []


def test_shards_split_the_intermediate_dimension():
    assert [TensorParallel(r, 3).bounds(10) for r in range(3)] == [(0, 3), (3, 7), (7, 10)]
    assert [TensorParallel(r, 2, "last_empty").bounds(10) for r in range(2)] == [(0, 10), (10, 10)]


@pytest.mark.parametrize("kwargs, words", [
    ({"rank": 2, "world": 2}, "rank 2 is not in a group of 2"),
    ({"rank": 0, "world": 1, "shards": "last_empty"}, "needs at least 2 ranks"),
    ({"rank": 0, "world": 2, "shards": "odd"}, "shards='odd' is not one of"),
])
def test_a_bad_layout_is_refused_in_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words):
        TensorParallel(**kwargs)


def test_pdl_is_refused_with_tensor_parallelism():
    with pytest.raises(ValueError, match="pdl=True fuses the residual add"):
        TensorParallelMoE(SMALL.with_(pdl=True), CPU32, TensorParallel(0, 1))
