"""How long things take: the parameters of the time model, and its one rule.

All times are microseconds. The defaults of ``Profile()`` are round numbers of
the right order for a recent datacenter GPU driven from Python; the ``H200``
profile (``simlib.engine.profiles``) replaces them with values measured on a real
H200 where the project has measurements. Every field can be overridden:
``Profile(stream_gap_us=0.5)`` or ``profile.with_(kernel_us={"routed": 12.0})``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

ROLES = ("norm", "gate", "topk", "copy", "routed", "shared", "merge", "fill", "other")

_DEFAULT_KERNEL_US = {
    "norm": 2.5,
    "gate": 3.0,
    "topk": 2.5,
    "copy": 2.0,
    "routed": 9.0,
    "shared": 6.0,
    "merge": 2.0,
    "fill": 1.5,
    "other": 3.0,
}


@dataclass(frozen=True)
class Profile:
    """Parameters of the time model.

    host_op_us           host cost of an op that launches nothing (alloc, ``set_``)
    launch_host_us       host cost of one eager kernel launch (dispatch + enqueue)
    launch_latency_us    from the host's enqueue to the earliest device start
    stream_gap_us        idle gap between consecutive eager kernels on one stream
    graph_node_gap_us    gap between dependent nodes on one stream inside a replay
    cross_stream_gap_us  delay a cross-stream dependency (event join) adds on top of
                         the ordinary gap between dependent kernels
    graph_launch_us      host cost of launching a whole captured graph
    graph_branch_launch_us  in a replay, the earliest start of the first kernel of a
                         second concurrent branch (the graph executor opens another
                         internal stream for it), counted from the replay's start
    pdl_prologue_us      part of a PDL kernel that runs before it waits for its
                         predecessor (programmatic dependent launch)
    kernel_us            kernel duration by kernel name or, failing that, by role;
                         a launch may also pass its own ``duration_us``
    """

    name: str = "generic"
    host_op_us: float = 1.0
    launch_host_us: float = 5.0
    launch_latency_us: float = 4.0
    stream_gap_us: float = 1.0
    graph_node_gap_us: float = 0.6
    cross_stream_gap_us: float = 0.3
    graph_launch_us: float = 8.0
    graph_branch_launch_us: float = 8.0
    pdl_prologue_us: float = 1.0
    kernel_us: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_KERNEL_US))
    source: str = "round numbers of the right order; not a measurement"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float | int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"Profile.{f.name}={value} must be >= 0 (microseconds)")
        for role, us in self.kernel_us.items():
            if us < 0:
                raise ValueError(f"Profile.kernel_us[{role!r}]={us} must be >= 0 (microseconds)")

    def duration(self, role: str, kernel: str | None = None) -> float:
        """Kernel duration: by kernel name if listed, else by role (else ``other``'s)."""
        us = self.kernel_us
        if kernel is not None and kernel in us:
            return us[kernel]
        return us.get(role, us.get("other", 3.0))

    def with_(self, **changes: Any) -> "Profile":
        """A copy with some fields changed; ``kernel_us`` entries are merged."""
        if "kernel_us" in changes:
            changes["kernel_us"] = {**self.kernel_us, **changes["kernel_us"]}
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(
                f"unknown Profile field(s) {sorted(unknown)}; valid: "
                + ", ".join(f.name for f in fields(self))
            )
        return replace(self, **changes)


class Slot(NamedTuple):
    """When a kernel runs: ``start``, when its inputs are ready (``data``), ``end``."""

    start: float
    data: float
    end: float


def place(issue: float, duration: float, same_stream_end: float | None, same_stream_start: float,
          cross_ready: float | None, gap: float, pdl: bool, profile: Profile) -> Slot:
    """The one timing rule, shared by eager launches and graph replays.

    A kernel starts when the host has issued it (``issue``), its predecessor on
    the same stream has finished plus ``gap``, and every cross-stream
    dependency has finished plus the join gap. With programmatic dependent
    launch (``pdl``) and a same-stream predecessor, it may start up to
    ``pdl_prologue_us`` before the predecessor ends and with no gap; it still
    reads its inputs only once the predecessor is done (``gdc_wait``).
    """
    start = issue
    data_floor = issue
    if same_stream_end is not None:
        if pdl:
            prologue = min(profile.pdl_prologue_us, duration)
            start = max(start, same_stream_start, same_stream_end - prologue)
        else:
            start = max(start, same_stream_end + gap)
        data_floor = same_stream_end
    if cross_ready is not None:
        start = max(start, cross_ready + gap + profile.cross_stream_gap_us)
        data_floor = max(data_floor, start)
    data = max(start, data_floor)
    prologue_done = min(profile.pdl_prologue_us, duration) if pdl else 0.0
    end = max(start + duration, data + duration - prologue_done)
    return Slot(start, data, end)
