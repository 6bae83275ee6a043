"""The deliberate capture mistakes of ``simlib.programs.spec.CAPTURE_FAULTS``.

Each is made for real, between the two branches of an otherwise correct
capture (``shared_first``), so the error comes from CUDA or PyTorch exactly as
a user would meet it:

``device_sync``           ``torch.cuda.synchronize()`` while capturing
``item``                  a host read of a device value (``.item()``)
``unjoined``              the alternate stream never joins back
``uncaptured_wait``       main waits on an event recorded outside the capture
                          (during warm-up, by ``prepare_outside_capture``)
``query_captured_event``  ``event.query()`` on an event recorded in the capture
``missing_fork``          the alternate stream never waits on the capture (no
                          fork): its branch is not captured, then main joins it
"""

from __future__ import annotations

import torch

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.annotate import ALT, MAIN
from gpu_demo.lab.moe.dual_streams import DualStreams, StreamEvent


class CaptureFaults:
    """Makes one configured fault; ``none`` makes none."""

    def __init__(self, fault: str, streams: DualStreams) -> None:
        self.fault = fault
        self._streams = streams
        self._outside: StreamEvent | None = None

    @property
    def skips_join(self) -> bool:
        return self.fault == "unjoined"

    @property
    def skips_fork(self) -> bool:
        return self.fault == "missing_fork"

    def prepare_outside_capture(self) -> None:
        """Record, outside any capture, the event ``uncaptured_wait`` waits on."""
        if self.fault == "uncaptured_wait":
            self._outside = self._streams.record(ALT)

    def between_branches(self, probe: torch.Tensor) -> None:
        """Make the fault while both streams are inside the capture."""
        if self.fault == "device_sync":
            annotate.host_sync("synchronize", "torch.cuda.synchronize()")
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        elif self.fault == "item":
            probe.sum().item()
        elif self.fault == "uncaptured_wait":
            if self._outside is None:
                raise RuntimeError("uncaptured_wait needs an eager run (the warm-up) before the capture")
            self._streams.wait(self._outside, MAIN)
        elif self.fault == "query_captured_event":
            self._streams.query(self._streams.record(MAIN))
