"""Rule 8, ``frozen_host_value``: the graph froze one value of a host scalar that changes per call."""

from __future__ import annotations

from typing import Iterator

from ..trace import Launch
from .calls import CAPTURE, CallRecord, LaunchKey, earlier_eager_calls, same_shapes
from .findings import Finding, plural
from .index import Index
from .rules import FROZEN_HOST_VALUE
from .wording import more_of_site


def frozen_host_values(calls: list[CallRecord], index: Index) -> Iterator[Finding]:
    """Captured launches whose scalar took two or more values over the calls before (and of) the capture.

    Only calls in which every launch the captured call also made read tensors of the
    same shapes are compared: a call of other shapes belongs to another graph (one per
    batch size; the prefill before a decode graph), whose scalars may differ by design.
    The whole call is compared, not the one launch: a launch that reads nothing
    (``arange(n)``) or a counter of fixed shape (``length.add_(n)``) reads the same
    shapes in the prefill as in a decode step, and its scalar follows the call's shapes.
    """
    for capture in (c for c in calls if c.phase == CAPTURE):
        captured = capture.keyed()
        earlier = [keyed for c in earlier_eager_calls(calls, capture)
                   if same_shapes(keyed := c.keyed(), captured)]
        if not earlier:
            continue
        found: dict[tuple[int, str, str, str], list[tuple[Launch, list[str]]]] = {}
        for key, node in captured.items():
            if node.graph is None or not node.scalars or index.graph(node.graph).failed:
                continue
            for name, value in node.scalars:
                seen = _values_seen(key, name, earlier)
                if seen and len(set(seen + [value])) >= 2:
                    found.setdefault((node.graph, node.site, node.kernel, name), []).append((node, seen))
        for (gid, site, _, name), hits in found.items():
            yield _finding(gid, site, name, hits, capture)


def _values_seen(key: LaunchKey, name: str, earlier: list[dict[LaunchKey, Launch]]) -> list[str]:
    """The values ``name`` had at this launch in the earlier calls (of the same shapes)."""
    seen = []
    for keyed in earlier:
        launch = keyed.get(key)
        if launch is not None:
            value = dict(launch.scalars).get(name)
            if value is not None:
                seen.append(value)
    return seen


def _finding(gid: int, site: str, name: str, hits: list[tuple[Launch, list[str]]], capture: CallRecord) -> Finding:
    node, seen = hits[0]
    frozen = dict(node.scalars)[name]
    where = f" (issued at {site})" if site else ""
    more = more_of_site(len(hits) - 1)
    earlier = ", ".join(dict.fromkeys(seen))
    return FROZEN_HOST_VALUE.finding(
        node.step, f"{node.label}: {name}", (),
        f"{node.label!r} on {node.stream} at step {node.step}{where} was captured into graph {gid} "
        f"with the host value {name}={frozen}, but the same launch got {name}={earlier} in the "
        f"{plural(len(seen), 'earlier call')} before the capture's call (call {capture.index}): "
        f"the value changes from call to call, and the graph froze the one it had at capture. "
        f"Every replay uses {name}={frozen}, whatever the host holds now.{more}",
        f"Pass {name} to the kernel as a device tensor the graph reads (a static buffer you "
        f"fill_ or copy_ before each replay, like an input), or capture one graph per value of "
        f"{name} and replay the one that matches.")
