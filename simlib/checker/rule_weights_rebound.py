"""Rule 14, ``weights_rebound``: a tensor a graph uses was replaced on its owner after the capture.

``module.weight = nn.Parameter(new)`` (an RL weight sync, a reload, a LoRA swap)
makes the attribute name a new tensor (``Rebind``); a graph captured before holds
the old tensor's address, not the attribute, so its replays go on with the old
weights, whether the old tensor is still alive or freed and reused. Followed as
the records come (``WeightsRebound.add``): a rebind of a tensor a captured graph
reads or writes waits for that graph's next replay and is reported there, at the
rebind's step. A rebind no replay follows harms nothing (the program captured
again, say); a rebind onto the same memory (a new ``Parameter`` over the old
storage) changes nothing a graph sees.

When the rebind dropped the old tensor's last reference, rule 10 would report
its free under the same graph too; it yields to this rule, which names the cause
(``FreedUnderGraph`` reads the rebinds).
"""

from __future__ import annotations

from ..trace import Arg, Capture, GraphId, Launch, Rebind, Record, Replay
from .findings import Finding
from .index import Index
from .intervals import Intervals
from .rules import WEIGHTS_REBOUND

User = tuple[GraphId, Launch, Arg]


class WeightsRebound:
    """Rule 14 over records in order."""

    READS = (Capture, Rebind, Replay)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._used: Intervals[list[User]] = Intervals()           # what captured graphs' nodes use, by range
        self._unindexed: list[tuple[GraphId, list[Launch]]] = []   # captures not in ``_used`` yet (``_rebound``)
        self._waiting: dict[GraphId, list[tuple[Rebind, User]]] = {}
        self._seen: set[tuple[GraphId, str, str]] = set()         # (graph, owner, attr): reported or waiting

    def add(self, r: Record, index: Index) -> list[Finding]:
        kind = type(r)
        if kind is Replay:
            waiting = self._waiting.pop(r.graph, [])
            return [_finding(rebind, user, r) for rebind, user in waiting]
        if kind is Rebind:
            self._rebound(r)
        elif kind is Capture and r.op == "end":
            g = index.graph(r.graph)
            if not g.failed:
                self._unindexed.append((g.id, g.nodes))   # indexed by range at the next rebind: most programs make none
        return []

    def _captured(self, gid: GraphId, nodes: list[Launch]) -> None:
        added: dict[tuple[int, int], list[User]] = {}
        for node in nodes:
            for a in node.args:
                if a.nbytes:
                    added.setdefault((a.ptr, a.ptr + a.nbytes), []).append((gid, node, a))
        for span, users in list(added.items()):
            known = self._used.get(*span)
            if known is not None:
                known.extend(users)
                del added[span]
        self._used.update(added.items())

    def _rebound(self, r: Rebind) -> None:
        if (r.new_ptr, r.new_nbytes) == (r.old_ptr, r.old_nbytes) or not r.old_ptr:
            return                       # the same memory under a new tensor object: graphs see no change
        for gid, nodes in self._unindexed:
            self._captured(gid, nodes)
        self._unindexed.clear()
        for _, users in self._used.overlapping(r.old_ptr, r.old_ptr + (r.old_nbytes or 1)):
            for user in users:
                key = (user[0], r.owner, r.attr)
                if key not in self._seen:
                    self._seen.add(key)
                    self._waiting.setdefault(user[0], []).append((r, user))


def _finding(r: Rebind, user: User, replay: Replay) -> Finding:
    gid, node, arg = user
    access = {"r": "reads", "w": "writes"}.get(arg.access, "reads and writes")
    return WEIGHTS_REBOUND.finding(
        r.step, f"{r.owner}.{r.attr}", (r.old_ptr, r.new_ptr),
        f"{r.owner}.{r.attr} was rebound at step {r.step}: it named {r.label!r} ({r.old_nbytes} bytes at "
        f"{hex(r.old_ptr)}) and now names a new tensor ({r.new_nbytes} bytes at {hex(r.new_ptr)}). Graph {gid} "
        f"was captured before, and its node {node.label!r} on {node.stream} (step {node.step}) {access} the old "
        f"tensor at {hex(arg.ptr)}: a graph holds the address it was captured with, not the attribute. Graph "
        f"{gid} replayed after the rebind (replay #{replay.index}, at step {replay.step}) with the old tensor, "
        f"whether it is still alive (the old weights) or freed (whatever the allocator put there since).",
        f"Load the new values into the captured tensor in place ({r.owner}.{r.attr}.data.copy_(new), or "
        f"param.copy_(new) under torch.no_grad()), so that the graph reads them; or capture the graph again "
        f"after rebinding, and replay only the new one.")
