"""Torch-side settings a run needs beyond ``simlib.programs.spec.MoEConfig``.

``MoEConfig`` describes the scenario and is shared with the simulator, so it
knows nothing about torch. What only a real run needs (the dtype, the device,
the seed of the random weights and inputs) lives here, validated with
messages that name the valid values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpu_demo.guard.protocol.tolerance import DTYPES, TOLERANCES

DEVICES = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class RunSettings:
    """dtype name, device (``auto`` picks CUDA when present) and random seed."""

    dtype: str = "bfloat16"
    device: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(
                f"dtype={self.dtype!r} is not supported; use one of: "
                + ", ".join(repr(d) for d in DTYPES)
            )
        if self.device not in DEVICES:
            raise ValueError(
                f"device={self.device!r} is not a valid choice; use one of: "
                + ", ".join(repr(d) for d in DEVICES)
            )
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for but this machine has no CUDA device; use 'cpu' or 'auto'")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    @property
    def tolerance(self) -> float:
        return TOLERANCES[self.dtype]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def random(self, *shape: int, generator: torch.Generator) -> torch.Tensor:
        """Standard-normal values drawn on the CPU from ``generator`` (the same on
        every device), moved to this run's device and dtype."""
        return torch.randn(*shape, generator=generator).to(self.torch_device, self.torch_dtype)
