"""The dual-stream MoE, tensor-parallel: each rank holds a slice of every expert, and an all-reduce sums them.

Every rank builds the demo's full ``MoEStack`` from the same seed (so the
same weights) and keeps its shard: the intermediate dimension of the shared
expert and of every routed expert, split over the ranks (Megatron's column-
then row-parallel MLP; SGLang's MoE under ``--tp``). The router is
replicated. A rank's layer then computes a *partial* ``routed + shared``; the
merge all-reduces it over the group (``torch.distributed``: gloo on CPUs,
NCCL on GPUs) and adds the residual, so the all-reduce is captured in the
decode graph with both streams, as SGLang's ``forward_normal_dual_stream``
ends in its fused all-reduce.

Both issue orders, the disposal and its fixes are ``MoEConfig``'s, unchanged:
on every rank the host froze what it froze on one GPU.

``shards="last_empty"`` gives the last rank an empty shard (a layout sharded
for one rank fewer); ``skip_empty_shard`` is the hazard that goes with it, a
graph-only shortcut: under capture, a rank whose shard is empty leaves the
all-reduce out of its graph ("its partial is zeros, it has nothing to add").
Its peers' graphs hold the all-reduce, so their replays wait for it
(checker rule 12). The fix is to join the collective on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from gpu_demo.guard.record.dry_run import is_capturing
from gpu_demo.lab.moe.model import DualStreamMoELayer, MoEStack, label_tensors
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig

SHARDS = ("even", "last_empty")


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in the group: ``rank`` of ``world``, and how the experts are split."""

    rank: int
    world: int
    shards: str = "even"
    skip_empty_shard: bool = False

    def __post_init__(self) -> None:
        if self.shards not in SHARDS:
            raise ValueError(f"shards={self.shards!r} is not one of {', '.join(map(repr, SHARDS))}")
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} is not in a group of {self.world}; ranks are 0..{self.world - 1}")
        if self.shards == "last_empty" and self.world < 2:
            raise ValueError("shards='last_empty' needs at least 2 ranks (--tp 2): one rank must keep a shard")

    def bounds(self, size: int) -> tuple[int, int]:
        """This rank's slice ``[start, stop)`` of a dimension of ``size``."""
        owners = self.world - 1 if self.shards == "last_empty" else self.world
        if self.rank >= owners:
            return size, size
        cuts = [round(size * r / owners) for r in range(owners + 1)]
        return cuts[self.rank], cuts[self.rank + 1]


class TensorParallelMoE(nn.Module):
    """The demo's ``MoEStack`` with this rank's shard of each layer and an all-reduce in each merge."""

    def __init__(self, config: MoEConfig, settings: RunSettings, tp: TensorParallel,
                 group: dist.ProcessGroup | None = None, *, reduce: bool = True) -> None:
        super().__init__()
        if config.pdl:
            raise ValueError("pdl=True fuses the residual add with the merge, leaving no place for the "
                             "all-reduce; use pdl=False with tensor parallelism")
        full = MoEStack(config, settings)
        self.streams, self.layers = full.streams, full.layers
        self.tp, self.group = tp, group
        start, stop = tp.bounds(config.intermediate)
        self.shard_size = stop - start
        for layer in self.layers:
            _keep_shard(layer, start, stop, config.intermediate)
            layer.reduce = self._all_reduce if reduce else None
        label_tensors(self)

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            residual = layer(residual)
        return residual

    def _all_reduce(self, partial: torch.Tensor) -> torch.Tensor:
        if self.tp.skip_empty_shard and self.shard_size == 0 and is_capturing():
            return partial   # the hazard: this rank's graph has no all-reduce, its peers' have one
        dist.all_reduce(partial, group=self.group)
        return partial


def _keep_shard(layer: DualStreamMoELayer, start: int, stop: int, intermediate: int) -> None:
    """Slice ``layer``'s expert weights to intermediate columns ``[start, stop)``, in place."""
    def gate_up(w: torch.Tensor, dim: int) -> torch.Tensor:
        gate, up = w.narrow(dim, start, stop - start), w.narrow(dim, intermediate + start, stop - start)
        return torch.cat([gate, up], dim=dim).contiguous()

    routed, shared = layer.routed, layer.shared
    routed.w_gate_up = nn.Parameter(gate_up(routed.w_gate_up.data, 2), requires_grad=False)
    routed.w_down = nn.Parameter(routed.w_down.data[:, start:stop].contiguous(), requires_grad=False)
    shared.w_gate_up = nn.Parameter(gate_up(shared.w_gate_up.data, 0), requires_grad=False)
    shared.w_down = nn.Parameter(shared.w_down.data[:, start:stop].contiguous(), requires_grad=False)
