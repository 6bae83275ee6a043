"""What every zoo factory shares: a seeded build on the CPU, and example inputs valid for the model.

Weights are drawn on the CPU under a fixed seed and then moved, so two builds are
identical on any device, and the caller's random state is left as it was. Integer
inputs (token ids) hold the smallest and largest valid value, because the guard
and the runner draw fresh integer inputs between an example's own min and max
(``gpu_demo.guard.protocol.capture_replay.fresh_like``).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

SEED = 0


def seeded(make: Callable[[], nn.Module], device: torch.device, dtype: torch.dtype) -> nn.Module:
    """``make()`` on the CPU under ``SEED``, in eval mode without gradients, moved to ``device`` and ``dtype``."""
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        torch.manual_seed(SEED)
        module = make()
    return module.eval().requires_grad_(False).to(device=device, dtype=dtype)


def generator() -> torch.Generator:
    """The CPU generator example inputs are drawn from (after ``SEED``: not the weights' stream)."""
    return torch.Generator().manual_seed(SEED + 1)


def token_ids(shape: tuple[int, ...], vocab: int, device: torch.device) -> torch.Tensor:
    """Random token ids in ``[0, vocab)``, with 0 first and ``vocab - 1`` last so fresh draws span the vocabulary."""
    ids = torch.randint(0, vocab, shape, generator=generator())
    ids.view(-1)[0], ids.view(-1)[-1] = 0, vocab - 1
    return ids.to(device)
