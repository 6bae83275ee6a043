"""The phrases findings share: what the graph holds for a consumer, in the glossary's words."""

from __future__ import annotations

from typing import Iterable

from ..glossary import GRAPH_HOLDS, HOST_BRANCH, NO_NODE, NULL_POINTER_NODE
from ..trace import Arg, HostRead, Record, SkippedLaunch, View

Consumer = tuple[Record, Arg | None]     # what used a tensor in a capture, and with which argument


def what_the_graph_holds(consumers: list[Consumer]) -> str:
    """``for 'a' on alt at step 5 the graph holds ...; for ...``: per consumer, in glossary words."""
    groups: dict[str, list[str]] = {}
    for record, arg in consumers:
        groups.setdefault(_holds(record, arg), []).append(consumer_name(record))
    return "; ".join(f"for {_listed(names)} the graph holds {holds}" for holds, names in groups.items())


def _holds(record: Record, arg: Arg | None) -> str:
    """What the graph holds for one consumer of a changed or emptied tensor."""
    kind = type(record)
    if kind is SkippedLaunch:
        return GRAPH_HOLDS[NO_NODE]
    if kind is HostRead:
        seen = f"{'emptied' if 0 in record.shape else 'changed'} shape {shape_text(record.shape)}"
        return GRAPH_HOLDS[HOST_BRANCH].replace("emptied shape", seen)
    if kind is View:
        return (f"nothing yet: the view carries {hex(record.ptr)} ({record.numel} elements) to "
                f"whatever uses it next")
    assert arg is not None
    if arg.ptr == 0 and arg.nbytes:
        return f"{GRAPH_HOLDS[NULL_POINTER_NODE]} (cudaErrorIllegalAddress)"
    if not arg.nbytes:
        return (f"a node that got 0 bytes of it at {hex(arg.ptr)}: it reads none of the data, so its "
                f"output is wrong")
    return (f"a node frozen with {hex(arg.ptr)} ({arg.numel} elements): it uses whatever is "
            f"there, not the data it was meant to")


def consumer_name(record: Record) -> str:
    if type(record) is HostRead:
        return f"the host's read of {record.label!r}.{record.op} at step {record.step}"
    if type(record) is View:
        return f"the view {record.label!r} taken at step {record.step}"
    return f"{record.label!r} on {record.stream} at step {record.step}"


def _listed(names: list[str], limit: int = 3) -> str:
    shown = names[:limit] + ([f"{len(names) - limit} more"] if len(names) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def distinct(consumers: Iterable[Consumer]) -> list[Consumer]:
    """Distinct records in step order (a launch may use a tensor twice)."""
    seen: dict[int, Consumer] = {}
    for consumer in consumers:
        seen.setdefault(id(consumer[0]), consumer)
    return sorted(seen.values(), key=lambda c: c[0].step)


def more_of_site(n: int) -> str:
    """`` The same holds for 2 more launches of that call site.`` ("" for none): a finding made for the
    first launch of a call site that several captured launches share (a loop over layers)."""
    return f" The same holds for {n} more launch{'es' if n > 1 else ''} of that call site." if n else ""


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def verb(arg: Arg) -> str:
    return {"r": "reads", "w": "writes", "rw": "reads and writes"}.get(arg.access, "uses")


def byte_range(arg: Arg) -> str:
    return f"[{hex(arg.ptr)}, +{arg.nbytes} bytes)"
