"""Where a result came from: GPU, driver, library versions, date and command.

Deliberately without the host name. Written into every results file, each in
``RESULTS_DIR`` (``gpu_demo.lab.results``, shipped with the package). The corpus and zoo
runners write it too.
"""

from __future__ import annotations

import datetime
import platform
import shlex
import subprocess
from typing import Any

import torch

from gpu_demo.lab.results import RESULTS_DIR

__all__ = ["RESULTS_DIR", "provenance"]


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def provenance(argv: list[str], program: str = "gpu_demo") -> dict[str, Any]:
    """Provenance of a run started as ``python -m <program> <argv>``."""
    cuda = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "driver": _driver_version() if cuda else None,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", program, *argv]),
    }
