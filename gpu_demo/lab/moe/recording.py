"""Recording the demo's MoE stack: the trace ``python -m gpu_demo record`` checks."""

from __future__ import annotations

import torch

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig
from simlib.trace import Trace


def record_moe(config: MoEConfig, settings: RunSettings) -> Trace:
    """Record the MoE stack of ``config`` (dry run unless ``settings`` picks CUDA)."""
    model = MoEStack(config, settings)
    generator = torch.Generator().manual_seed(settings.seed + 1)
    residual = settings.random(config.tokens, config.hidden, generator=generator)
    annotate.label(residual, "residual")
    with torch.no_grad():
        return record_capture(
            model, [residual], replays=config.replays, refresh=config.inputs,
            meta={"config": config.to_dict(), "settings": settings.to_dict()},
        )
