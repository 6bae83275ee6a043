"""Real PyTorch counterpart of simlib: the dual-stream MoE layer on a GPU.

The public surface is small:

``assert_capture_safe(fn, *example_inputs)``, ``check_capture(...)``
    a test-suite guard: recording, checker and differential replay (``gpu_demo.guard``)
``capture_checked()``
    check every CUDA-graph capture inside a ``with`` block (``gpu_demo.autocheck``;
    ``CAPTURE_ORDER_CHECK=1`` checks a whole unmodified program)
``label(tensor, name)``
    name a tensor in recorded traces (``gpu_demo.annotate``)

and the CLI, ``python -m gpu_demo run | bench | decode | record | check | corpus | fidelity``.
"""

from .annotate import label
from .autocheck import CaptureHazardWarning, capture_checked
from .guard import assert_capture_safe, check_capture

__all__ = ["CaptureHazardWarning", "assert_capture_safe", "capture_checked", "check_capture", "label"]
