"""The small MoE the CPU tests record: sizes and float32 that keep them fast on two cores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_demo.lab.moe.recording import record_moe
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import check
from simlib.programs.spec import MoEConfig
from simlib.trace import Launch, Trace

REPO = Path(__file__).resolve().parents[2]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
SMALL = MoEConfig(tokens=4, hidden=32, intermediate=48, experts=4, top_k=2)
CPU32 = RunSettings(device="cpu", dtype="float32")
SMALL_FLAGS = ["--tokens", "4", "--hidden", "64", "--intermediate", "128", "--dtype", "float32"]


def record(**changes) -> Trace:
    """A dry-run recording of ``SMALL`` with ``changes``, on the CPU."""
    return record_moe(SMALL.with_(**changes), CPU32)


def captured(trace: Trace) -> list[Launch]:
    return trace.launches(graph=0)


def reads_of_x(launches: list[Launch]) -> list:
    return [a for launch in launches for a in launch.args if a.label == "x" and a.reads]


def rules(trace: Trace) -> set[tuple[int, str]]:
    return {(f.rule, f.label) for f in check(trace)}
