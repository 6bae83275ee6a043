"""What a real GPU recorded: ``gpu_demo``'s results files, read as plain files.

On a CUDA machine ``python -m gpu_demo run --matrix`` writes ``matrix-h200.json``
(read by the headline, the explorer's GPU table, the lab and
``gpu_demo.measure.conformance``), and ``python -m gpu_demo corpus`` writes
``corpus-h200.json`` (read by the incident gallery: each case's PyTorch twin is
a corpus program of the same name). The caller says where a file is (a notebook
passes ``gpu_demo.lab.results.path("matrix-h200")``): simlib knows no folder of
gpu_demo's, and needs neither torch nor gpu_demo to compare the simulator with a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..programs.spec import MoEConfig


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


# --------------------------------------------------------------------------- the corpus
NOT_RUN = "not yet run on the H200"


@dataclass(frozen=True)
class TwinRun:
    """What the H200 recorded for one corpus program (a gallery case's PyTorch twin).

    ``truth`` is the replays' outcome (a ``simlib.glossary`` word; ``None`` when the
    child died before it had one, ``message`` says why); ``guard`` is ``check_capture``'s
    verdict (``None`` for a script, which only the whole-process check runs);
    ``rules`` what the guard's modes named, as ``rule N (code)``.
    """

    name: str
    truth: str | None
    errors: tuple[float | None, ...]
    guard: str | None
    rules: tuple[str, ...]
    message: str | None
    provenance: str

    def summary(self) -> str:
        """The truth and the guard's verdict in one line, with where they come from."""
        errors = " ".join("fault" if e is None else f"{e:.2g}" for e in self.errors)
        truth = (f"replays {self.truth}" + (f" (errors {errors})" if errors else "")
                 if self.truth else f"no result ({self.message or 'the child died'})")
        guard = f"check_capture says {self.guard}" if self.guard else "a script: the whole-process check ran it"
        return f"H200 ({self.provenance}): {truth}; {guard}; the guard named {', '.join(self.rules) or 'nothing'}"


@dataclass(frozen=True)
class CorpusResults:
    """``python -m gpu_demo corpus``'s results file: each program's record, and its provenance."""

    programs: dict[str, dict[str, Any]]
    recorded: dict[str, Any]
    path: Path

    @property
    def provenance(self) -> str:
        return _describe_provenance(self.recorded)

    def twin(self, name: str) -> TwinRun | None:
        """Program ``name`` as the H200 ran it, or ``None`` if the file has no such program."""
        record = self.programs.get(name)
        if record is None:
            return None
        truth, guard = record.get("truth") or {}, record.get("guard")
        rules = [*(guard or {}).get("rules", []), *(record.get("process") or {}).get("rules", [])]
        return TwinRun(name, truth.get("outcome"), tuple(truth.get("errors") or ()),
                       guard["verdict"] if guard else None, tuple(dict.fromkeys(rules)),
                       truth.get("message"), self.provenance)

    def describe(self, name: str) -> str:
        """``twin(name).summary()``, or a line that says plainly that it has not run yet."""
        twin = self.twin(name)
        return twin.summary() if twin else f"{name}: {NOT_RUN} (not in {self.path.name} of {self.provenance})"


def load_corpus_results(path: Path) -> CorpusResults | None:
    """The corpus results, or ``None`` if the file does not exist yet.

    A file that exists but cannot be read raises a one-line ``ValueError`` that says how to
    make it again.
    """
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        programs = {p["name"]: p for p in data["programs"]}
        recorded = data.get("provenance") or {}
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read corpus results from {path}: {type(exc).__name__}: {exc}. "
                         "Run `python -m gpu_demo corpus` on a GPU to write it again.") from None
    return CorpusResults(programs, recorded, path)


def describe_twin(name: str, path: Path) -> str:
    """What the H200 recorded for corpus program ``name``, or that it has not run there yet."""
    results = load_corpus_results(path)
    return results.describe(name) if results else f"{name}: {NOT_RUN} (no {path.name} yet)"
