"""What a check that watched a program says when the program captured nothing.

A check that saw no capture checked nothing, so it must never read as an
all-clear: the whole-process mode (``CAPTURE_ORDER_CHECK``), ``capture_checked()``
and the check of a torchrun job each say ``simlib.glossary.NO_CAPTURE_SEEN``, with
why where that is known. Only ``capture_checked(strict=True)``, where the user
asked for a capture to be checked, makes it an error.
"""

from __future__ import annotations

import torch

from simlib.glossary import NO_CAPTURE_SEEN


class NoCaptureWarning(UserWarning):
    """``capture_checked()`` ended without any CUDA-graph capture in its block."""


def why_none() -> str:
    """Why nothing was captured, as far as this process can tell."""
    if not torch.cuda.is_available():
        return "there is no CUDA device here (torch.cuda.is_available() is False), so nothing could be captured"
    return ("no capture call reached the recorder (torch.cuda.graph, CUDAGraph.capture_begin, "
            "make_graphed_callables, a torch.compile cudagraph)")


def no_capture(where: str) -> str:
    """The one line: ``<NO_CAPTURE_SEEN> <where>: <why>; nothing was checked``."""
    return f"capture-order check: {NO_CAPTURE_SEEN} {where}: {why_none()}; nothing was checked."
