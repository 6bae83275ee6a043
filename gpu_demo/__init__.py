"""Real PyTorch counterpart of simlib: the dual-stream MoE layer on a GPU.

The public surface is small:

``assert_capture_safe(fn, *example_inputs)``, ``check_capture(...)``
    a test-suite guard: recording, checker and differential replay (``gpu_demo.guard``)
``label(tensor, name)``
    name a tensor in recorded traces (``gpu_demo.annotate``)

and the CLI, ``python -m gpu_demo run | bench | decode | record | fidelity``.
"""

from .annotate import label
from .guard import assert_capture_safe, check_capture

__all__ = ["assert_capture_safe", "check_capture", "label"]
