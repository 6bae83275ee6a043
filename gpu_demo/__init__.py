"""Capture-order checks on real PyTorch: the guard for any program's captures, and the lab around it.

Two rooms. ``guard`` holds everything a user's check needs (the recorder in
``guard/record``, the child-process protocol in ``guard/protocol``, the checks,
the whole-process check and its torchrun form in ``guard/job``) and imports
nothing else of ``gpu_demo``. ``lab`` is the lab around it: the incident's
dual-stream MoE, the corpus and the model zoo the guard is measured on, the
measurements, the command lines, the tutorial's exercise and the recorded GPU
results (``gpu_demo.lab.results``, read without torch).

The public surface is small:

``assert_capture_safe(fn, *example_inputs)``, ``check_capture(...)``
    a test-suite guard: recording, checker and differential replay (``gpu_demo.guard``)
``warm_checks()``
    checks inside share one warm child process: torch and your modules are imported once
    (``gpu_demo.guard.protocol.worker``; for pytest: ``-p gpu_demo.guard.pytest_plugin``)
``capture_checked()``
    check every CUDA-graph capture inside a ``with`` block (``gpu_demo.guard.process``;
    ``CAPTURE_ORDER_CHECK=1`` checks a whole unmodified program)
``label(tensor, name)``
    name a tensor in recorded traces (``gpu_demo.guard.record.annotate``)

and the CLI, ``python -m gpu_demo run | bench | decode | record | check | corpus | fidelity``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CaptureHazardWarning", "assert_capture_safe", "capture_checked", "check_capture", "label", "warm_checks"]


def __getattr__(name: str) -> Any:
    """Each public name, imported on first use (PEP 562): a subpackage that needs no torch
    (``gpu_demo.lab.results``) imports without it. The imports are written out, so that
    ``tests/test_layout.py`` sees where each name comes from."""
    if name in ("assert_capture_safe", "check_capture"):
        from gpu_demo.guard import check as home
    elif name in ("CaptureHazardWarning", "capture_checked"):
        from gpu_demo.guard import process as home
    elif name == "warm_checks":
        from gpu_demo.guard.protocol import worker as home
    elif name == "label":
        from gpu_demo.guard.record import annotate as home
    else:
        raise AttributeError(f"module 'gpu_demo' has no attribute {name!r}")
    value = globals()[name] = getattr(home, name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
