"""Rule 10, ``freed_under_graph``: a block a graph uses, outside its pool, freed while the graph lives.

Followed as the records come (``FreedUnderGraph.add``): a free waits, per graph
that uses the block, for that graph's next replay, and is reported there (a
free during a capture once the capture has ended, against every node it
captured); a free during a capture that no replay followed is reported when the
program ends (``finish``). So a check costs what happened since the last one.

A free that follows a ``Rebind`` of the block's tensor after a graph's capture is
rule 14's (``weights_rebound``) for that graph: it names the cause, the owner's
attribute rebound, and this rule yields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory import graph_pool
from ..trace import Alloc, Arg, Capture, DataPtr, Free, GraphId, Launch, Rebind, Record, Replay
from .findings import Finding
from .index import Graph, Index
from .intervals import Intervals
from .rules import FREED_UNDER_GRAPH

User = tuple[Launch, Arg]


def capture_pool(g: Graph) -> str:
    """The pool ``g``'s capture allocated from: its own, or the graph's it shared."""
    return (g.begin.pool if g.begin is not None else "") or graph_pool(g.id)


@dataclass(slots=True)
class _Waiting:
    """A free of a block graph ``graph`` uses, waiting for that graph's next replay."""

    free: Free
    user: User
    during: bool                 # freed while the graph was being captured
    again: Alloc | None = None   # who the allocator handed the block to since


@dataclass
class _Lived:
    """A graph captured with nodes: what its nodes use, and its frees awaiting a replay."""

    graph: Graph
    pool: str
    used: Intervals[User]
    waiting: list[_Waiting] = field(default_factory=list)
    waiting_keys: set[tuple[GraphId, int, str]] = field(default_factory=set)   # their users' ``_key``s


class FreedUnderGraph:
    """Rule 10 over records in order. Every block counts, pointer 0 and small addresses included;
    a block allocated during a capture belongs to a graph pool (whatever its pool is called), so
    freeing it is not this rule's business."""

    READS = (Alloc, Free, Replay, Capture, Rebind)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._lived: dict[GraphId, _Lived] = {}
        self._users: Intervals[list[tuple[_Lived, User]]] = Intervals()   # every lived graph's, by range
        self._from_capture: dict[DataPtr, bool] = {}   # block -> was its last allocation made in a capture?
        self._pool_blocks: Intervals[None] = Intervals()   # the blocks whose last allocation a capture made
        self._during: list[Free] = []                  # frees in the open capture
        self._reported: set[tuple[GraphId, int, str]] = set()   # (graph, node, argument): once each
        self._rebound: Intervals[set[GraphId]] = Intervals()   # a rebound tensor's block -> graphs rule 14 follows
        self._capturing = False
        self._again: dict[DataPtr, list[_Waiting]] = {}   # freed block -> its waiting frees no allocation reused yet
        self._watching: Intervals[None] = Intervals()   # the ranges of ``_users`` a free of is watched
        self._dirty: list[tuple[DataPtr, DataPtr]] = []   # blocks back to eager memory since ``watched``
        self._pooled: list[tuple[DataPtr, DataPtr]] = []   # blocks a capture allocated since ``watched``
        self._dirty_keys: list[tuple[DataPtr, DataPtr]] = []   # ranges of ``_users`` a new user or a wait changed

    def watched(self) -> list[tuple[DataPtr, DataPtr]]:
        """The address ranges a free of which a later replay would make a finding: what graphs use,
        but for blocks a capture allocated (graph-pool memory, whose free ``_freed`` passes by) and
        ranges whose every user has a free waiting or reported already (one finding says it).
        Asked at every capture's end: only the ranges something touched since are judged again (a
        range a new user or a waiting free changed, by its key; those a block back in eager memory
        overlaps; and of the ranges watched, those a block a capture allocated overlaps, since a
        capture's block can only end a watch, never start one)."""
        users_of, watching = self._users, self._watching
        for span in self._dirty_keys:
            users = users_of.get(*span)
            if users is not None:
                self._judge(span, users)
        for span in self._dirty:
            for key, users in users_of.overlapping(*span):
                self._judge(key, users)
        for span in self._pooled:
            for key, _ in watching.overlapping(*span):
                self._judge(key, users_of.get(*key))
        self._dirty.clear()
        self._dirty_keys.clear()
        self._pooled.clear()
        return [span for span, _ in watching.items()]

    def _judge(self, span: tuple[DataPtr, DataPtr], users: list[tuple["_Lived", User]]) -> None:
        if self._verdict(span, users):
            self._watching.put(*span, None)
        else:
            self._watching.discard(*span)

    def _verdict(self, span: tuple[DataPtr, DataPtr], users: list[tuple["_Lived", User]]) -> bool:
        """Is a free of ``span`` worth watching: a user with nothing waiting or reported, outside every
        block a capture allocated?"""
        lo, hi = span
        return (any(self._new(lived, user) for lived, user in users)
                and not any(blo <= lo and hi <= bhi for (blo, bhi), _ in self._pool_blocks.overlapping(lo, hi)))

    def add(self, r: Record, index: Index) -> list[Finding]:
        """``r`` as ``index`` indexed it (a ``Free`` sized from its block)."""
        kind = type(r)
        if kind is Free:
            return self._freed(r)
        if kind is Rebind:
            if r.old_nbytes and (r.old_ptr, r.old_nbytes) != (r.new_ptr, r.new_nbytes):
                self._rebound.put(r.old_ptr, r.old_ptr + r.old_nbytes, set(self._lived))
        elif kind is Alloc:
            span = (r.ptr, r.ptr + (r.nbytes or 1))
            self._rebound.clear(*span)
            self._from_capture[r.ptr] = self._capturing
            if self._capturing:
                self._pool_blocks.put(*span, None)
                self._pooled.append(span)
            elif self._pool_blocks.touches(r.ptr, r.ptr + 1):
                self._pool_blocks.clear(r.ptr, r.ptr + 1)   # the block is eager memory now
                self._dirty.append(span)
            for w in self._again.pop(r.ptr, ()):
                w.again = r
        elif kind is Replay:
            return self._replayed(r)
        elif kind is Capture:
            self._capturing = r.op == "begin"
            if r.op == "end":
                return self._captured(index.graph(r.graph))
        return []

    def _freed(self, free: Free) -> list[Finding]:
        if self._from_capture.get(free.ptr, False):
            return []                    # graph-pool memory
        if self._capturing:
            self._during.append(free)
        span = (free.ptr, free.ptr + (free.nbytes or 1))
        seen: set[GraphId] = set().union(*(gids for _, gids in self._rebound.overlapping(*span)))   # rule 14's
        for _, users in self._users.overlapping(*span):
            for lived, user in users:
                gid = lived.graph.id
                if gid not in seen and free.pool != lived.pool and self._new(lived, user):
                    self._wait(lived, _Waiting(free, user, during=False))
                seen.add(gid)
        return []

    def _replayed(self, replay: Replay) -> list[Finding]:
        lived = self._lived.get(replay.graph)
        if lived is None or not lived.waiting:
            return []
        found = []
        for w in lived.waiting:
            self._reported.add(_key(lived.graph, w.user))
            found.append(_finding(lived.graph, w, replay))
        lived.waiting.clear()
        lived.waiting_keys.clear()
        return found

    def finish(self) -> list[Finding]:
        """The program ended: frees during a capture that no replay followed (every replay would use
        the block); a free after the last replay harms nothing."""
        found = []
        for lived in self._lived.values():
            found += [_finding(lived.graph, w, None) for w in lived.waiting if w.during]
            self._dirty_keys += [(w.user[1].ptr, w.user[1].ptr + w.user[1].nbytes) for w in lived.waiting]
            lived.waiting.clear()
            lived.waiting_keys.clear()
        return found

    def _new(self, lived: "_Lived", user: User) -> bool:
        """Nothing reported or waiting yet about this node's argument: a block rebound every step
        frees many blocks under the same argument, one finding says it."""
        key = _key(lived.graph, user)
        return key not in self._reported and key not in lived.waiting_keys

    def _captured(self, g: Graph) -> list[Finding]:
        during, self._during = self._during, []
        if g.failed or g.begin is None or not g.nodes:
            return []
        lived = _Lived(g, capture_pool(g), Intervals(((a.ptr, a.ptr + a.nbytes), (node, a))
                                                      for node in g.nodes for a in node.args if a.nbytes))
        self._lived[g.id] = lived
        for (lo, hi), user in lived.used.items():
            self._dirty_keys.append((lo, hi))
            users = self._users.get(lo, hi)
            if users is None:
                self._users.put(lo, hi, [(lived, user)])
            else:
                users.append((lived, user))
        for free in during:
            users = lived.used.overlapping(free.ptr, free.ptr + (free.nbytes or 1))
            if users and free.pool != lived.pool and self._new(lived, users[0][1]):
                again = next((a for a in g.allocs if a.step > free.step and a.ptr == free.ptr), None)
                self._wait(lived, _Waiting(free, users[0][1], True, again))
        return []

    def _wait(self, lived: _Lived, waiting: _Waiting) -> None:
        """``waiting`` waits for ``lived``'s next replay: its user's range may no longer be watched,
        and the next allocation of its block is who the allocator handed it to."""
        lived.waiting.append(waiting)
        lived.waiting_keys.add(_key(lived.graph, waiting.user))
        arg = waiting.user[1]
        self._dirty_keys.append((arg.ptr, arg.ptr + arg.nbytes))
        if waiting.again is None:
            self._again.setdefault(waiting.free.ptr, []).append(waiting)


def _key(g: Graph, user: User) -> tuple[GraphId, int, str]:
    return g.id, user[0].id, user[1].name


def _finding(g: Graph, waiting: _Waiting, replay: Replay | None) -> Finding:
    free, (node, arg), again = waiting.free, waiting.user, waiting.again
    when = (f"while graph {g.id} was being captured" if waiting.during
            else f"after graph {g.id} was captured (step {g.end.step if g.end else '?'})")
    access = {"r": "reads", "w": "writes"}.get(arg.access, "reads and writes")
    handed = (f" The allocator handed it out again to {again.label!r} at step {again.step}."
              if again is not None else "")
    if replay is not None:
        replayed = (f"graph {g.id} replayed after it (replay #{replay.index}, at step {replay.step}) "
                    f"and used it")
    else:
        replayed = f"every replay of graph {g.id} will use it"
    return FREED_UNDER_GRAPH.finding(
        free.step, free.label, (free.ptr,),
        f"{free.label!r} ({free.nbytes} bytes at {hex(free.ptr)}, pool {free.pool}) was freed at step "
        f"{free.step} on stream {free.stream} {when}, but graph {g.id}'s node {node.label!r} on "
        f"{node.stream} (step {node.step}) {access} it. The block lies outside the graph's pool "
        f"(it was allocated before the capture), so once freed the allocator may hand it to any "
        f"tensor, and {replayed}: the replays read or overwrite whatever lives there then.{handed}",
        f"Keep {free.label!r} alive for as long as graph {g.id} may replay (hold it where the graph "
        f"is held), size it once, before capturing, for the largest case instead of resizing or "
        f"replacing it, or capture the graph again after replacing it.")
