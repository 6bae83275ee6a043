"""Steps that advance their own state, as users capture them: nothing pinned, nothing patched.

``<model>_stateful_decode(device, dtype)`` (``llama``, ``qwen2``, ``mixtral``, ``deepseek_v3``): one
token per sequence against a prefilled transformers ``StaticCache``. The step keeps its position
on the device and advances it after each call, as the cache advances its own counter
(``cumulative_length``), so call ``k`` writes and attends to slot ``PROMPT + k``. Its graph
does the same on every replay: a correct program whose every call differs from the last,
which the guard can judge only against a reference that has lived the same calls
(``gpu_demo.guard.differential.live_warm_up``; ``docs/guard-state.md``).

``llama_host_counter_decode``: the planted hazard. The position is a Python int made into
``position_ids`` with ``torch.arange`` each call: the graph freezes the capture's rotary
position while the cache's device counter moves on, so replay ``k`` rotates its query and key
as if it were the capture's step (transformers #45274's host ints). Transformers 5.x ignores a
``cache_position`` argument (the cache writes at its own ``cumulative_length``, and positions
default to it), so a host-made ``cache_position``, the planted step's first form, froze a value
no kernel read: its replays were right (the H200, 2026-12-03).

``running_norm(device, dtype)``: running statistics, the other common state: a normaliser
that subtracts a running mean and then updates it in place.

    python -m gpu_demo.lab.zoo.stateful --out stateful-h200.json   # check_capture on each, on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, StaticCache

from gpu_demo.guard.check import check_capture
from gpu_demo.guard.protocol.worker import warm_checks
from gpu_demo.lab.measure.provenance import provenance
from gpu_demo.lab.zoo.build import token_ids
from gpu_demo.lab.zoo.decoders import BATCH, PROMPT, VOCAB, prefilled

PROGRAM = "gpu_demo.lab.zoo.stateful"
DECODERS = ("llama", "qwen2", "mixtral", "deepseek_v3")
PLANTED = "llama_host_counter_decode"


class StatefulDecodeStep(nn.Module):
    """One token per sequence at the step's own device position, which it then advances."""

    def __init__(self, model: PreTrainedModel, cache: StaticCache, device: torch.device) -> None:
        super().__init__()
        self.model, self.cache = model, cache
        self.position = torch.tensor([PROMPT], device=device)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids, past_key_values=self.cache, use_cache=True, cache_position=self.position).logits
        self.position.add_(input_ids.shape[1])
        return logits


class HostCounterDecodeStep(nn.Module):
    """The planted hazard (module docstring): the position is a host int, frozen by the capture."""

    def __init__(self, model: PreTrainedModel, cache: StaticCache) -> None:
        super().__init__()
        self.model, self.cache, self.length = model, cache, PROMPT

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        position = torch.arange(self.length, self.length + input_ids.shape[1], device=input_ids.device)
        self.length += input_ids.shape[1]
        return self.model(input_ids, past_key_values=self.cache, use_cache=True, position_ids=position[None]).logits


class RunningNorm(nn.Module):
    """``x - mean``, then ``mean`` moves a tenth of the way towards the batch's mean (in place)."""

    def __init__(self, features: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.mean = torch.zeros(features, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x - self.mean
        self.mean.lerp_(x.mean(dim=0), 0.1)
        return out


def stateful_decode(name: str, device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    model, cache = prefilled(name, device, dtype)
    return StatefulDecodeStep(model, cache, device), (token_ids((BATCH, 1), VOCAB, device),)


def llama_stateful_decode(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return stateful_decode("llama", device, dtype)


def qwen2_stateful_decode(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return stateful_decode("qwen2", device, dtype)


def mixtral_stateful_decode(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return stateful_decode("mixtral", device, dtype)


def deepseek_v3_stateful_decode(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return stateful_decode("deepseek_v3", device, dtype)


def llama_host_counter_decode(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    model, cache = prefilled("llama", device, dtype)
    return HostCounterDecodeStep(model, cache), (token_ids((BATCH, 1), VOCAB, device),)


def running_norm(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return RunningNorm(64, device, dtype), (torch.randn(8, 64, device=device, dtype=dtype),)


# named by the importable module, never `__main__`: the check imports each target afresh in its worker
TARGETS = (*(f"{PROGRAM}:{m}_stateful_decode" for m in DECODERS), f"{PROGRAM}:running_norm", f"{PROGRAM}:{PLANTED}")


def check_all(dtype: str = "bfloat16", replays: int = 3) -> list[dict[str, Any]]:
    """``check_capture`` on every target, in one warm worker: each report as ``to_dict()``."""
    with warm_checks():
        return [check_capture(target, dtype=dtype, replays=replays).to_dict() for target in TARGETS]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=f"python -m {PROGRAM}", description="check_capture on steps that "
                                     "advance their own state; JSON with provenance")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    reports = check_all()
    for report in reports:
        print(f"{report['target']}: {report['answer']} ({', '.join(report['rules']) or 'no findings'})")
    args.out.write_text(json.dumps({"provenance": provenance(argv, PROGRAM), "reports": reports}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
