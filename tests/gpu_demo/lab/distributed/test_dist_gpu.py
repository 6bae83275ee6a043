"""NCCL with world size 1 on one GPU: the all-reduce captured in the decode graph, judged by replays."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

from gpu_demo.guard.job.ranks import ranks_checked
from gpu_demo.guard.protocol.capture_replay import capture, warm_up
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.lab.distributed.run import replay_truth, replay_us
from gpu_demo.lab.distributed.tp_moe import TensorParallel, TensorParallelMoE
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import check
from simlib.glossary import CORRECT, SILENT_WRONG
from simlib.programs.spec import MoEConfig

pytestmark = pytest.mark.gpu
ONE = TensorParallel(0, 1)


@pytest.fixture
def nccl_world_of_one(tmp_path):
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


SAFE = MoEConfig(order="routed_first", dispose="skip_in_capture")   # a fix; shared_first with the dispose races (rule 4)


def test_the_captured_all_reduce_is_in_the_trace_and_the_fix_is_clean(nccl_world_of_one):
    config, settings = SAFE, RunSettings(device="cuda")
    model = TensorParallelMoE(config, settings, ONE)
    x = settings.random(config.tokens, config.hidden, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        trace = record_capture(model, [x], meta={"rank": 0})
    (reduce,) = [r for r in trace.launches(graph=0) if r.kernel.startswith("c10d.")]
    assert dict(reduce.scalars)["backend"] == "nccl" and reduce.args[0].shape == (config.tokens, config.hidden)
    assert check(trace) == []


@pytest.mark.parametrize("order, outcome", [("shared_first", CORRECT), ("routed_first", SILENT_WRONG)])
def test_replays_with_fresh_inputs_give_the_one_gpu_outcome_of_each_order(nccl_world_of_one, order, outcome):
    truth = replay_truth(MoEConfig(order=order), RunSettings(device="cuda"), ONE)
    assert truth["outcome"] == outcome, truth


def test_replay_latency_is_measured_with_and_without_the_all_reduce(nccl_world_of_one):
    config, settings = MoEConfig(order="shared_first"), RunSettings(device="cuda")
    assert replay_us(config, settings, ONE, reduce=True) > 0 and replay_us(config, settings, ONE, reduce=False) > 0


@pytest.mark.parametrize("config", [SAFE, MoEConfig(order="routed_first")], ids=["fix", "routed_first"])
def test_ranks_checked_passes_the_fix_and_names_the_rank_of_the_incident(nccl_world_of_one, config):
    settings = RunSettings(device="cuda")
    model = TensorParallelMoE(config, settings, ONE)
    x = settings.random(config.tokens, config.hidden, generator=torch.Generator().manual_seed(1))
    verdict = nullcontext() if config is SAFE else pytest.raises(
        AssertionError, match=r"\[rank 0\] ERROR rule 1 \(host_mutation\)")
    with torch.no_grad():
        warm_up(lambda: model(x))
        with verdict, ranks_checked():
            capture(lambda: model(x))
