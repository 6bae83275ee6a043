"""Torch's GPU-trace reports switched off while no rule can use them, and on again.

Once ``torch._C._activate_gpu_trace()`` has run, torch's C++ calls into Python
for every allocation, free, event and synchronization, for the rest of the
process: each report takes the GIL, imports ``torch.cuda._gpu_trace``, looks up
a registry's ``fire_callbacks`` and calls it, whatever that is. On the H200 that
alone cost a served step about as much as the step (``benchmarks/serving_layers.py``,
layer ``gpu_trace``), and torch has no call to stop it. Before each report torch's
C++ reads one flag, ``c10::impl::GPUTrace::haveState``, an exported symbol of
``libc10``: the gate writes it through ``ctypes``. It only ever shuts what was
open and opens what it shut, so a process that never activated the reports
never gets them. Where the symbol is missing (another build of torch), the gate
cannot shut and the reports keep coming, as before.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

HAVE_STATE = "_ZN3c104impl8GPUTrace9haveStateE"   # c10::impl::GPUTrace::haveState, mangled


def _flag() -> Any:
    try:
        libc10 = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
        return ctypes.c_bool.in_dll(libc10, HAVE_STATE)
    except (OSError, ValueError):   # no such library or symbol: a build the gate does not know
        return None


class ReportGate:
    """``flag``: what torch reads before each report (``.value``), ``None`` where there is none."""

    def __init__(self, flag: Any) -> None:
        self._flag = flag
        self.shut_now = False

    @property
    def available(self) -> bool:
        return self._flag is not None

    def shut(self) -> None:
        """No report reaches Python until ``open``: a no-op where the reports are off already."""
        if self._flag is not None and not self.shut_now and self._flag.value:
            self._flag.value = False
            self.shut_now = True

    def open(self) -> None:
        """The reports come again, if ``shut`` stopped them."""
        if self.shut_now:
            self._flag.value = True
            self.shut_now = False


GATE = ReportGate(_flag())
