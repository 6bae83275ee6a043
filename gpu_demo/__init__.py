"""Real PyTorch counterpart of simlib: the dual-stream MoE layer on a GPU.

The public surface is small:

``assert_capture_safe(fn, *example_inputs)``
    a test-suite guard (``gpu_demo.guard``)
``capture_checked()``
    check every CUDA-graph capture inside a ``with`` block (``gpu_demo.autocheck``;
    ``CAPTURE_ORDER_CHECK=1`` checks a whole unmodified program)
``label(tensor, name)``
    name a tensor in recorded traces (``gpu_demo.annotate``)

and the CLI, ``python -m gpu_demo run | bench | decode | record | fidelity``.
"""

from .annotate import label
from .autocheck import CaptureHazardWarning, capture_checked
from .guard import assert_capture_safe

__all__ = ["CaptureHazardWarning", "assert_capture_safe", "capture_checked", "label"]
