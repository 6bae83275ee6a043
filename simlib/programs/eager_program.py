"""An eager forward as the host issues it: the real module's ops at their measured host cost.

Eager time is host time. The GPU finishes each of the layer's small kernels
long before the host has issued the next one, so an eager forward takes as
long as the host takes to walk through it: Python, the dispatcher, and one
launch call per kernel. The scenario program (``simlib.programs.scenarios``) issues
only the launches of the story, about a dozen, and is the reference for what
eager *computes*; this program is the reference for how long it *takes*.

It replays the op sequence that ``python -m gpu_demo bench --host-costs``
recorded from the real module (``gpu_demo.moe.model``) on a GPU: for each top-level
aten op, the host spends Python time (a cost per op, plus a cost per
``nn.Module`` call entered before it), the op's dispatch time for its kind
(``view``, ``indexing``, ``matmul``, ...), then one launch call per kernel
the op launched; the kernels run on one stream for their measured durations.
Every number comes from the recorded file; nothing here is measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..engine.runtime import Runtime
from ..engine.timing import Profile
from .spec import MoEConfig

RECORD_COMMAND = "python -m gpu_demo bench --host-costs"


@dataclass(frozen=True)
class EagerOp:
    """One top-level op of the real forward, in issue order."""

    name: str                       # aten op, e.g. ``aten::index_select``
    kind: str
    role: str                       # the part of the layer that issues it (``gate``, ``combine``, ...)
    module_calls: int               # nn.Module calls entered just before it
    kernel_us: tuple[float, ...]    # device time of each kernel it launches (none for a view)


@dataclass(frozen=True)
class HostCosts:
    """What the host spends per op kind, per launch and in Python, and the op sequence."""

    dispatch_us: Mapping[str, float]   # per op kind, launch calls excluded
    launch_us: float                   # one kernel launch call
    python_per_op_us: float
    module_call_us: float
    ops: tuple[EagerOp, ...]
    config: MoEConfig                  # the configuration the sequence was recorded for
    source: str = ""

    def __post_init__(self) -> None:
        costs = {"launch_us": self.launch_us, "python_per_op_us": self.python_per_op_us,
                 "module_call_us": self.module_call_us,
                 **{f"dispatch_us[{k!r}]": v for k, v in self.dispatch_us.items()}}
        for name, us in costs.items():
            if us < 0:
                raise ValueError(f"HostCosts.{name}={us} must be >= 0 (microseconds)")
        missing = sorted({op.kind for op in self.ops} - set(self.dispatch_us))
        if missing:
            raise ValueError(f"ops of kind(s) {missing} have no dispatch cost; the kinds with one are "
                             f"{sorted(self.dispatch_us)}")

    def host_us(self, op: EagerOp) -> float:
        """Host time before ``op``'s launch calls: Python, module calls, dispatch."""
        return self.python_per_op_us + op.module_calls * self.module_call_us + self.dispatch_us[op.kind]

    @property
    def launches(self) -> int:
        return sum(len(op.kernel_us) for op in self.ops)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "") -> "HostCosts":
        """Read the ``host-costs-<gpu>.json`` layout (``gpu_demo/lab/results/README.md``)."""
        try:
            return cls(
                dispatch_us={kind: float(k["dispatch_us"]) for kind, k in data["kinds"].items()},
                launch_us=float(data["launch_us"]),
                python_per_op_us=float(data["python"]["per_op_us"]),
                module_call_us=float(data["python"]["per_module_call_us"]),
                ops=tuple(EagerOp(o["name"], o["kind"], o["role"], int(o["module_calls"]),
                                  tuple(float(us) for us in o["kernel_us"])) for o in data["ops"]),
                config=MoEConfig.from_dict(data["config"]),
                source=source,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"host costs{f' in {source}' if source else ''} lack {exc}; record them with "
                             f"`{RECORD_COMMAND}`") from None


def load(path: Path) -> HostCosts:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read host costs from {path}: {exc}. Record them on a GPU with "
                         f"`{RECORD_COMMAND}`.") from None
    return HostCosts.from_dict(data, source=str(path))


class _HostClock(Runtime):
    """A runtime whose host can also spend time without calling CUDA (Python, dispatch)."""

    def spend(self, us: float) -> None:
        self._host(us)


def run_eager(costs: HostCosts, profile: Profile | None = None) -> tuple[Runtime, float]:
    """Issue one eager forward; returns the runtime (its trace holds the launches)
    and the forward's time: from its first host step to the end of its last
    kernel, or of the host's last step if that is later (what CUDA events
    around the forward measure)."""
    profile = (profile or Profile()).with_(launch_host_us=costs.launch_us)
    rt = _HostClock(profile)
    main = rt.Stream("main")
    with rt.stream(main):
        start = rt.now
        for op in costs.ops:
            rt.spend(costs.host_us(op))
            for i, us in enumerate(op.kernel_us):
                rt.launch(op.name, role=op.role, duration_us=us, label=f"{op.role}: {op.name} #{i}")
        end = max(rt.now, main.ready)
    return rt, end - start


def eager_forward_us(costs: HostCosts, profile: Profile | None = None) -> float:
    return run_eager(costs, profile)[1]
