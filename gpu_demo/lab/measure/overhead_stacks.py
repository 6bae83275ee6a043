"""The two 61-layer stacks the recorder's overhead is measured on, and one plain pass of either.

``moe_stack``: the project's ``MoEStack`` (``order="shared_first"``);
``plain_stack``: ``safe_dual_stream`` corpus layers, plain PyTorch with no project
annotations (what the recorder sees in user code). ``gpu_pass`` is the warm-up
and capture that ``record_capture`` runs, without the recording. Both the
recording process (``gpu_demo.lab.measure.overhead``) and the untraced child
(``gpu_demo.lab.measure.untraced_passes``) build their stacks here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.record.capture import RECORDED_WARMUPS
from gpu_demo.lab.corpus import safe_dual_stream
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig

Stack = tuple[Callable[..., Any], list[torch.Tensor]]


def gpu_pass(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> None:
    """One plain pass: warm-up and capture, as ``record_capture`` runs them (its first,
    unrecorded warm-up call and the ``RECORDED_WARMUPS`` it records)."""
    capture_replay.warm_up(lambda: fn(*inputs), iterations=1 + RECORDED_WARMUPS)
    graph, _ = capture_replay.capture(lambda: fn(*inputs))
    torch.cuda.synchronize()
    del graph


def moe_stack(layers: int, settings: RunSettings, **sizes: int) -> Stack:
    config = MoEConfig(layers=layers, order="shared_first", **sizes)
    generator = torch.Generator().manual_seed(settings.seed + 1)
    return MoEStack(config, settings), [settings.random(config.tokens, config.hidden, generator=generator)]


def plain_stack(layers: int, settings: RunSettings) -> Stack:
    torch.manual_seed(settings.seed)
    made = [safe_dual_stream.make(settings.torch_device, settings.torch_dtype) for _ in range(layers)]
    return nn.Sequential(*(layer for layer, _ in made)), [made[0][1][0]]


STACKS: dict[str, Callable[..., Stack]] = {"moe_stack": moe_stack, "plain_pytorch_stack": plain_stack}
