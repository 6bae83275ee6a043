"""What the guard's child hands back for one check, typed on both sides of the process boundary.

``gpu_demo.guard.differential`` (the child) builds a ``ChildResult`` and sends ``to_dict()``;
``gpu_demo.guard.check`` (the parent) reads the answer back with ``from_dict``. In between it
is JSON, and partial: a checkpoint carries what is known so far, the child protocol adds
``child_error`` when the child died, and a worker reads ``retire``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gpu_demo.guard.protocol.capture_replay import ReplayEvidence
from gpu_demo.guard.protocol.child import ChildError


@dataclass
class ChildResult:
    """One check's recording and replay, as far as the child got; unset fields are left out of ``to_dict``."""

    mode: str | None = None
    """where the recording ran: ``"cuda"`` or ``"dry_run"``; ``None``: the recording did not finish"""
    trace: str | None = None
    """the recording, a ``simlib.trace.Trace`` as JSON"""
    replay: ReplayEvidence | None = None
    """the differential replay's evidence (``None``: it did not finish)"""
    retire: bool = False
    """the child's CUDA context or streams may be unusable: a warm worker must not go on in it"""
    replay_elsewhere: bool = False
    """the recorder's own capture failed: the replay runs in a second, fresh process"""
    child_error: ChildError | None = None
    """why the child handed back less than a whole result"""

    def to_dict(self) -> dict[str, Any]:
        data = {"mode": self.mode, "trace": self.trace, "replay": self.replay and self.replay.to_dict(),
                "retire": self.retire, "replay_elsewhere": self.replay_elsewhere,
                "child_error": self.child_error and self.child_error.to_dict()}
        return {key: value for key, value in data.items() if value not in (None, False)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChildResult:
        return cls(mode=data.get("mode"), trace=data.get("trace"),
                   replay=ReplayEvidence(**data["replay"]) if "replay" in data else None,
                   retire=data.get("retire", False), replay_elsewhere=data.get("replay_elsewhere", False),
                   child_error=ChildError(**data["child_error"]) if "child_error" in data else None)

    def then(self, later: ChildResult) -> ChildResult:
        """This result with what a later step found written over it (the replay after the recording)."""
        return ChildResult.from_dict({**self.to_dict(), **later.to_dict()})
