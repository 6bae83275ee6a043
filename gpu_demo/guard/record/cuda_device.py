"""Where the recorder learns which stream is current, and how big a block is.

A seam: the real CUDA device (``cuda_device``), the CPU of a dry run
(``cpu_device``), or a fake in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

CACHING_ALLOCATOR_BLOCK = 512


def block_bytes(nbytes: int, device_type: str) -> int:
    """Bytes of the block a storage of ``nbytes`` occupies: the CUDA caching allocator
    rounds up to 512 bytes; other devices' sizes are taken as they are."""
    if device_type != "cuda":
        return nbytes
    return -(-nbytes // CACHING_ALLOCATOR_BLOCK) * CACHING_ALLOCATOR_BLOCK


@dataclass
class Device:
    """Where the recorder learns which CUDA stream is current (a seam: tests fake it).

    ``current_stream`` returns the raw ``cudaStream_t`` id, or ``None`` where
    there are no streams (a CPU); ``traced`` says the ``torch.cuda._gpu_trace``
    callbacks report events and syncs, so ``gpu_demo.record.annotate``'s reports of
    the same would be counted twice.
    """

    current_stream: Callable[[], int | None]
    traced: bool


def cuda_device() -> Device:
    """The real one: the current CUDA stream once CUDA is initialised.

    The raw ``cudaStream_t`` comes from ``torch._C._cuda_getCurrentRawStream``
    (what Inductor's launchers use) where this build has it: asked once per op,
    ``torch.cuda.current_stream().cuda_stream`` would build a ``Stream`` object
    each time.
    """
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    device_index = getattr(torch._C, "_cuda_getDevice", None)
    initialised = False

    def current_stream() -> int | None:
        nonlocal initialised
        if not initialised:
            if not torch.cuda.is_initialized():
                return None
            initialised = True
        if raw_stream is None or device_index is None:
            return torch.cuda.current_stream().cuda_stream
        return raw_stream(device_index())

    return Device(current_stream, torch.cuda.is_available())


def cpu_device() -> Device:
    """A dry run's: no streams, and every event and sync is reported by ``gpu_demo.record.annotate``
    (torch's GPU-trace callbacks never fire for CPU work, even on a machine with CUDA)."""
    return Device(lambda: None, False)
