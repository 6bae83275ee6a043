"""Torch-side settings a run needs beyond ``simlib.spec.MoEConfig``.

``MoEConfig`` describes the scenario and is shared with the simulator, so it
knows nothing about torch. What only a real run needs (the dtype, the device,
the seed of the random weights and inputs) lives here, validated with
messages that name the valid values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}
DEVICES = ("auto", "cuda", "cpu")

# Largest relative L2 error (in float32) between a replay and the eager
# reference that still counts as correct. A replay runs the same kernels on
# the same data as eager, so a correct replay is normally bit-identical
# (error 0.0); the tolerance only has to absorb a different reduction order,
# which changes a result by about one rounding of the dtype (unit roundoff:
# bf16 2**-8 = 3.9e-3, fp16 2**-11 = 4.9e-4, fp32 2**-24). The tolerances sit a
# few roundoffs above that, and two orders of magnitude below the errors of
# the failures this lab studies (about 0.9 for the stale shared buffer).
TOLERANCES: dict[str, float] = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


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
