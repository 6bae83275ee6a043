"""Rule 6, ``extent_exceeds_storage``: a captured launch touches more bytes than lie behind its pointer."""

from __future__ import annotations

from typing import Iterator

from ..glossary import GRAPH_HOLDS, NULL_POINTER_NODE
from ..trace import Arg, Launch, TensorId
from .findings import Finding
from .index import Graph
from .rule_empty_argument import Emptied
from .rules import EXTENT_EXCEEDS_STORAGE


def short_extents(g: Graph, emptied: dict[TensorId, Emptied]) -> Iterator[Finding]:
    """Captured arguments whose extent runs past the bytes behind their pointer."""
    explained = {(id(use), k) for e in emptied.values() for use, k in e.uses}   # rule 2's
    short: dict[TensorId, list[tuple[Launch, Arg]]] = {}
    for node in g.nodes:
        for k, arg in enumerate(node.args):
            behind = 0 if arg.ptr == 0 else arg.storage_nbytes
            if arg.nbytes and behind is not None and arg.nbytes > behind \
                    and (id(node), k) not in explained:
                short.setdefault(arg.tensor, []).append((node, arg))
    for found in short.values():
        node, arg = found[0]
        n = len(found) - 1
        more = f" (and {n} more captured launch{'es' if n > 1 else ''})" if n else ""
        if arg.ptr == 0:
            what = (f"there is nothing behind a null pointer: the graph holds "
                    f"{GRAPH_HOLDS[NULL_POINTER_NODE]} (cudaErrorIllegalAddress at address 0)")
        else:
            over = arg.nbytes - (arg.storage_nbytes or 0)
            past = {"r": f"reads {over} bytes past its end, whatever the allocator put there next: "
                         "silently wrong, or a fault past the end of the segment",
                    "w": f"writes {over} bytes past its end, over whatever the allocator put there "
                         "next: a neighbouring tensor is silently corrupted"}
            what = (f"only {arg.storage_nbytes} bytes of storage lie behind that pointer, so every "
                    f"replay {past.get(arg.access, past['w'])}")
        yield EXTENT_EXCEEDS_STORAGE.finding(
            node.step, arg.label, (arg.ptr,),
            f"{node.label!r} on {node.stream} (step {node.step}) was captured with {arg.label!r} at "
            f"{hex(arg.ptr)} and an extent of {arg.nbytes} bytes ({arg.numel} elements){more}, "
            f"but {what}.",
            f"Size the kernel from the tensor it is given (its element count at launch), not from a "
            f"static batch size, or make {arg.label!r} at least {arg.nbytes} bytes: a kernel must "
            f"never get a pointer with fewer bytes behind it than it touches.")
