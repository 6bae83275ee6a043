"""Rule 15, ``view_frozen``: a captured launch was handed a view whose offset or size a host int sets per call.

A view is host metadata (pointer, sizes, strides), frozen at launch like a
scalar: ``x[:n]`` with ``n = int(lengths[0])``, or a cache row ``cache[pos]``
with a Python ``pos``, gives every replay the view of the capture's call. So the
geometry of each view argument is compared across the calls, as rule 8 compares
scalars: lined up by ``(site, kernel, n)``, an argument whose pointer, shape or
span (``nbytes``: where strides change it) took two or more values over the
earlier calls and the capture's call is reported.

Which calls are compared decides whether this is sound. A server captures one
graph per batch size, and its calls of another size read views of other sizes
by design. So an earlier call counts only where its launch differs from the
captured one at most at the argument in question: every other argument has the
same shape and access. A batch of another size changes every argument it
reaches (the input and the output of a layer), a host int that slices one
tensor changes that one: ``attend(q, cache[:pos + 1]) -> out`` varies at the
cache alone. And only views of the same storage are compared (the same storage
end: ``ptr + storage_nbytes``), so a fresh tensor every call (rule 9's
business, or nobody's) is not a moving view.

Limits: an op whose output follows the slice (``y = f(x[:n])``, ``y`` of ``n``
rows) varies at two arguments and is not compared, though it freezes ``n``
alike (its consumer downstream, reading ``y`` into a fixed-size buffer, is);
a stride change that keeps the span (a transpose of a square) is not seen; a
view of a storage reallocated every call at another address is not compared.
"""

from __future__ import annotations

from typing import Iterator

from ..trace import Arg, Launch
from .calls import CAPTURE, CallRecord, LaunchKey, earlier_eager_calls
from .findings import Finding, plural
from .index import Index
from .rules import VIEW_FROZEN
from .wording import more_of_site, shape_text

Geometry = tuple[int, tuple[int, ...], int]      # (pointer, shape, span in bytes)


def frozen_views(calls: list[CallRecord], index: Index) -> Iterator[Finding]:
    """Captured view arguments whose geometry took two or more values over the calls before (and of) the capture."""
    for capture in (c for c in calls if c.phase == CAPTURE):
        earlier = [c.keyed() for c in earlier_eager_calls(calls, capture)]
        if not earlier:
            continue
        found: dict[tuple[int, str, str, str], list[tuple[Launch, Arg, list[Arg]]]] = {}
        for key, node in capture.keyed().items():
            if node.graph is None or index.graph(node.graph).failed:
                continue
            for i, arg in enumerate(node.args):
                if not arg.ptr or not arg.nbytes or arg.storage_nbytes is None:
                    continue
                seen = _views_seen(key, node, i, earlier)
                if seen and len({_geometry(a) for a in (*seen, arg)}) >= 2:
                    found.setdefault((node.graph, node.site, node.kernel, arg.name), []).append((node, arg, seen))
        for (gid, site, _, _), hits in found.items():
            yield _finding(gid, site, hits, capture)


def _views_seen(key: LaunchKey, node: Launch, i: int, earlier: list[dict[LaunchKey, Launch]]) -> list[Arg]:
    """Argument ``i`` of this launch in the earlier calls where it differs from the captured one at
    most there, viewing the same storage."""
    arg, seen = node.args[i], []
    for keyed in earlier:
        launch = keyed.get(key)
        if launch is None or len(launch.args) != len(node.args):
            continue
        other = launch.args[i]
        alike = all((a.shape, a.access) == (b.shape, b.access)
                    for j, (a, b) in enumerate(zip(launch.args, node.args)) if j != i)
        if alike and other.access == arg.access and other.ptr and other.storage_nbytes is not None \
                and other.ptr + other.storage_nbytes == arg.ptr + arg.storage_nbytes:
            seen.append(other)
    return seen


def _geometry(a: Arg) -> Geometry:
    return a.ptr, a.shape, a.nbytes


def _described(a: Arg, end: int) -> str:
    return f"{shape_text(a.shape)} at {hex(a.ptr)} ({end - a.ptr} bytes before the storage's end)"


def _finding(gid: int, site: str, hits: list[tuple[Launch, Arg, list[Arg]]], capture: CallRecord) -> Finding:
    node, arg, seen = hits[0]
    end = arg.ptr + (arg.storage_nbytes or 0)
    changed = [what for what, differs in (
        ("offset", any(a.ptr != arg.ptr for a in seen)), ("size", any(a.shape != arg.shape for a in seen)),
        ("strides", any(a.shape == arg.shape and a.nbytes != arg.nbytes for a in seen))) if differs]
    earlier = "; ".join(dict.fromkeys(_described(a, end) for a in seen))
    where = f" (issued at {site})" if site else ""
    more = more_of_site(len(hits) - 1)
    verb = "writes" if arg.writes and not arg.reads else "reads"
    return VIEW_FROZEN.finding(
        node.step, f"{node.label}: {arg.label}", (arg.ptr,),
        f"{node.label!r} on {node.stream} at step {node.step}{where} was captured into graph {gid} with "
        f"{arg.label!r} ({arg.name}) as the view {_described(arg, end)}, but the same launch got a view of the "
        f"same storage with another {' and '.join(changed)} in the {plural(len(seen), 'earlier call')} before "
        f"the capture's call (call {capture.index}): {earlier}. A host int (a slice x[:n], a cache indexed by "
        f"a Python position) sets the view anew every call, and the graph froze the one of the capture: every "
        f"replay {verb} those bytes, whatever the host computes now.{more}",
        "Index with a device tensor the graph reads (a position or length in a static buffer you fill before "
        "each replay: index_copy_/index_select with a device index, a mask over the whole cache), or capture "
        "one graph per value (a bucket per length) and replay the one that matches.")
