"""The CPU dry run: a program takes its capture path while nothing is captured.

Code that behaves differently under capture asks ``is_capturing()`` (true
while the current CUDA stream captures a graph). Inside ``dry_capture()`` it
is true as well, so a program whose tensors live on the CPU runs exactly the
host steps a capture would run, and the recorder writes them down: what the
host froze, in which order. Nothing is captured or replayed, and no block is
reused. A dry run is of CPU tensors even on a machine with CUDA (a classroom GPU
seat runs the same tests); CUDA work is captured for real
(``gpu_demo.record.capture.record_capture`` picks by the inputs' device).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

NOT_SEEN = ("a CPU dry run only: nothing was captured or replayed, so no replay, no graph-pool reuse and "
            "no cross-stream race was checked")
"""What a dry run cannot see, said first wherever a dry run's result is printed."""

_dry_capture = False


@contextmanager
def dry_capture() -> Iterator[None]:
    """Make ``is_capturing()`` true for the CPU work issued inside."""
    global _dry_capture
    previous = _dry_capture
    _dry_capture = True
    try:
        yield
    finally:
        _dry_capture = previous


def is_capturing() -> bool:
    """True while the current stream captures a graph (or during a dry capture)."""
    if _dry_capture:
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
