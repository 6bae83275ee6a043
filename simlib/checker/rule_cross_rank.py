"""Rule 12, ``collective_mismatch``: the ranks of one group captured different collective sequences.

A collective is a rendezvous: each rank's graph replays its own frozen list of
collectives, and the n-th collective of one rank meets the n-th of every
other rank of its group. If one rank's graph holds a collective another's
lacks (a branch taken on one rank only: a shape guard that skips the
all-reduce on the rank whose shard is empty), the peers' replays wait for a
partner that never comes (a hang); if the sequences pair up but differ in op,
reduction, size or dtype, each replay combines the wrong buffers (garbage, or a
hang where the sizes disagree). Nothing on one rank shows it: it is a property
of several traces together, so it is checked by ``simlib.checker.check_ranks``,
never by the single-trace ``check``.

The n-th capture of every rank is compared with the n-th of the others (the
ranks of a job capture their graphs in the same order). A collective is a
``Launch`` whose kernel is a ``c10d`` op; its group and member ranks are its
``group`` and ``group_ranks`` scalars, as the recorder freezes them. It is
compared by op, role (the program's name for the code that issued it), buffer
shapes and the other scalars (reduce op, root, dtype), not by how the host
waits for it (``async_op``). One over zero elements launched nothing
(``SkippedLaunch``: gloo returns at once), so its peers have nothing to pair
with; the finding names it. Only the ranks whose traces are given are
compared. Two collectives alike in all of these but issued in a different
order on two ranks pair up without a sign in the traces (their buffers are
each rank's own): give them roles, and the swap shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..trace import Capture, Launch, SkippedLaunch, Trace
from .findings import Finding
from .rules import COLLECTIVE_MISMATCH

COLLECTIVE_PREFIX = "c10d."
# Scalars that name where a collective goes (the grouping) or how the host waits for it:
# ranks may differ in these without pairing different work.
_NOT_COMPARED = frozenset({"group", "group_ranks", "backend", "async_op"})


@dataclass(frozen=True)
class Collective:
    """One collective as one rank's capture froze it."""

    step: int
    op: str                                    # ``allreduce_``, ``allgather_``, ...
    role: str                                  # the program's name for it (``annotate.role``), or ""
    shapes: tuple[tuple[int, ...], ...]        # of its buffers, in schema order
    settings: tuple[tuple[str, str], ...]      # reduce op, root, dtype, ...

    @property
    def signature(self) -> tuple:
        return self.op, self.role, self.shapes, self.settings

    def describe(self) -> str:
        shapes = ", ".join("[" + ", ".join(map(str, s)) + "]" for s in self.shapes)
        settings = " ".join(f"{k}={v}" for k, v in self.settings)
        where = f" in {self.role!r}" if self.role else ""
        return f"{self.op}({shapes}{'; ' + settings if settings else ''}){where} at step {self.step}"


def rank_of(trace: Trace) -> int:
    """The rank a trace was recorded on (``meta["rank"]``)."""
    rank = trace.meta.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise ValueError(f"trace meta 'rank' is {rank!r}; cross-rank checks need each trace's rank, "
                         "a non-negative int: record each rank with meta={'rank': rank}")
    return rank


def collective_mismatches(traces: Sequence[Trace]) -> list[Finding]:
    """Rule 12 over the traces of the ranks of one job (one trace per rank)."""
    by_rank = {}
    for trace in traces:
        rank = rank_of(trace)
        if rank in by_rank:
            raise ValueError(f"two traces say they are rank {rank}; give one trace per rank")
        by_rank[rank] = _captures(trace)
    findings = []
    for n in range(max((len(c) for c in by_rank.values()), default=0)):
        groups: dict[str, set[int]] = {}
        for captures in by_rank.values():
            if n < len(captures):
                for name, members in captures[n].members.items():
                    groups.setdefault(name, set()).update(members)
        for name, members in sorted(groups.items()):
            present = sorted(r for r in members if r in by_rank)
            finding = _compare(n, name, {r: by_rank[r][n] if n < len(by_rank[r]) else None for r in present})
            if finding is not None:
                findings.append(finding)
    return findings


@dataclass
class _CapturedCollectives:
    graph: int
    end_step: int
    sequences: dict[str, list[Collective]]     # group name -> its collectives, in host order
    members: dict[str, tuple[int, ...]]        # group name -> its ranks
    empty: list[Collective]                    # over zero elements: launched nothing, group not frozen


def _captures(trace: Trace) -> list[_CapturedCollectives]:
    found: dict[int, _CapturedCollectives] = {}
    for r in trace.records:
        if type(r) is Capture:
            if r.op == "begin":
                found[r.graph] = _CapturedCollectives(r.graph, r.step, {}, {}, [])
            elif r.graph in found:
                found[r.graph].end_step = r.step
        elif type(r) in (Launch, SkippedLaunch) and r.graph in found and r.kernel.startswith(COLLECTIVE_PREFIX):
            scalars = dict(getattr(r, "scalars", ()))
            captured = found[r.graph]
            collective = Collective(r.step, r.kernel.removeprefix(COLLECTIVE_PREFIX).split(".")[0], r.role,
                                    tuple(a.shape for a in r.args),
                                    tuple((k, v) for k, v in scalars.items() if k not in _NOT_COMPARED))
            if type(r) is SkippedLaunch:
                captured.empty.append(collective)
                continue
            group = scalars.get("group", "?")
            captured.sequences.setdefault(group, []).append(collective)
            ranks = scalars.get("group_ranks", "")
            captured.members[group] = tuple(int(x) for x in ranks.split(",") if x.strip().isdigit())
    return list(found.values())


def _compare(n: int, group: str, captures: dict[int, _CapturedCollectives | None]) -> Finding | None:
    sequences = {r: (c.sequences.get(group, []) if c is not None else None) for r, c in captures.items()}
    shown = {r: s for r, s in sequences.items() if s is not None}
    if len({tuple(c.signature for c in s) for s in shown.values()}) <= 1 and len(shown) == len(sequences):
        return None
    ranks = sorted(sequences)
    missing = [r for r in ranks if sequences[r] is None]
    if missing:
        first = min(r for r in ranks if r not in missing)
        step = captures[first].end_step
        what = (f"rank(s) {_ranks(missing)} made no capture #{n} while rank {first}'s capture #{n} "
                f"(graph {captures[first].graph}) holds {len(shown[first])} collective(s) on group {group!r}")
    else:
        what, step = _first_difference(group, sequences, captures)
    return COLLECTIVE_MISMATCH.finding(
        step=step,
        label=f"capture #{n}, group {group!r}, ranks {_ranks(ranks)}", pointers=(),
        why=(f"{what[0].upper()}{what[1:]}. Each replay pairs every rank's n-th collective with the n-th of its peers, so "
             "the replays wait for a partner that never comes (a hang) or reduce buffers that do not "
             "match (garbage): the ranks' graphs disagree, though each rank's capture looks fine alone."),
        fix=("Issue the same collectives, in the same order, with the same sizes and dtypes on every rank "
             "of the group, inside and outside the capture: a rank with an empty shard still joins the "
             "collective (it contributes zeros or an empty piece); move rank-dependent branches before "
             "the capture, or make them decide the same way on every rank."),
    )


def _first_difference(group: str, sequences: dict[int, list[Collective]],
                      captures: dict[int, _CapturedCollectives | None]) -> tuple[str, int]:
    """The first position where the ranks' sequences differ (``_compare`` found that one does)."""
    ranks = sorted(sequences)

    def at(i: int) -> dict[int, Collective | None]:
        return {r: sequences[r][i] if i < len(sequences[r]) else None for r in ranks}

    i = next(i for i in range(max(map(len, sequences.values())))
             if len({c.signature if c else None for c in at(i).values()}) > 1)
    here = at(i)
    parts = [f"rank {r}: {here[r].describe() if here[r] else _nothing(len(sequences[r]), captures[r])}" for r in ranks]
    first = next(c for c in here.values() if c is not None)
    what = f"collective #{i + 1} on group {group!r} differs between the ranks' captures ({'; '.join(parts)})"
    return what, first.step


def _nothing(count: int, captured: _CapturedCollectives | None) -> str:
    empty = "".join(f"; it issued {c.describe()} over zero elements, which launches nothing"
                    for c in (captured.empty if captured else ()))
    return f"nothing (its graph has {count}{empty})"


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks))
