"""What a real GPU recorded: ``gpu_demo``'s matrix results, read as a plain file.

``python -m gpu_demo run --matrix`` writes ``gpu_demo/results/matrix-h200.json``
on a CUDA machine; the headline, the explorer's GPU table, the lab and
``gpu_demo.conformance`` read it here, so simlib needs neither torch nor
gpu_demo to compare the simulator with a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spec import MoEConfig

GPU_RESULTS = Path(__file__).resolve().parent.parent / "gpu_demo" / "results" / "matrix-h200.json"


@dataclass(frozen=True)
class GpuResults:
    """What a real GPU recorded, by configuration, and where it came from."""

    cases: dict[MoEConfig, dict[str, Any]]   # each case as recorded (outcome, errors, ...)
    recorded: dict[str, Any]                 # the file's provenance object
    path: Path

    @property
    def outcomes(self) -> dict[MoEConfig, str]:
        return {config: case["outcome"] for config, case in self.cases.items()}

    @property
    def provenance(self) -> str:
        """The provenance in one line, for table headers."""
        return _describe_provenance(self.recorded)


def load_gpu_results(path: Path) -> GpuResults | None:
    """``gpu_demo``'s matrix results, or ``None`` if there are none yet.

    Accepts the file ``python -m gpu_demo run --matrix`` writes (an object
    with ``provenance`` and ``cases``) and a bare list of cases; each case
    has ``config`` (``MoEConfig.to_dict()``) and ``outcome``.
    """
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    cases = data["cases"] if isinstance(data, dict) else data
    by_config = {MoEConfig.from_dict(c["config"]): c for c in cases}
    prov = data.get("provenance", {}) if isinstance(data, dict) else {}
    return GpuResults(by_config, prov, path)


def _describe_provenance(prov: dict[str, Any]) -> str:
    if not prov:
        return "provenance not recorded"
    parts = [prov.get("gpu") or "unknown GPU"]
    parts += [f"{key} {prov[key]}" for key in ("driver", "torch", "triton") if prov.get(key)]
    if prov.get("date_utc"):
        parts.append(str(prov["date_utc"])[:10])
    return ", ".join(parts)
