"""The lab on real PyTorch: the guard for any program's captures, and the dual-stream MoE on a GPU.

Subpackages, each one product, lowest first: ``protocol`` (capture, replay,
compare; the child process), ``record`` (the recorder of real captures),
``guard`` (the checks users run on their own code), ``moe`` (the incident's
demo), ``measure`` (benchmarks, calibration, conformance), ``corpus`` (small
programs, hazardous and safe), ``cli``; and ``lab`` (the tutorial's exercise).
The record and guard packages import nothing from the demo.

The public surface is small:

``assert_capture_safe(fn, *example_inputs)``, ``check_capture(...)``
    a test-suite guard: recording, checker and differential replay (``gpu_demo.guard``)
``warm_checks()``
    checks inside share one warm child process: torch and your modules are imported once
    (``gpu_demo.protocol.worker``; for pytest: ``-p gpu_demo.guard.pytest_plugin``)
``capture_checked()``
    check every CUDA-graph capture inside a ``with`` block (``gpu_demo.guard.process``;
    ``CAPTURE_ORDER_CHECK=1`` checks a whole unmodified program)
``label(tensor, name)``
    name a tensor in recorded traces (``gpu_demo.record.annotate``)

and the CLI, ``python -m gpu_demo run | bench | decode | record | check | corpus | fidelity``.
"""

from gpu_demo.guard.check import assert_capture_safe, check_capture
from gpu_demo.guard.process import CaptureHazardWarning, capture_checked
from gpu_demo.protocol.worker import warm_checks
from gpu_demo.record.annotate import label

__all__ = ["CaptureHazardWarning", "assert_capture_safe", "capture_checked", "check_capture", "label", "warm_checks"]
