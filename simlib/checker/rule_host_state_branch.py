"""Rule 16, ``host_state_branch``: a host int or flag the captured code changed, which replays never change again."""

from __future__ import annotations

from typing import Iterator

from .findings import Finding
from .index import Graph
from .rules import HOST_STATE_BRANCH


def host_state_branches(g: Graph) -> Iterator[Finding]:
    """One warning per host value (``HostState``) that ``g``'s capture changed."""
    for h in g.host_states:
        where = f" at {h.site}" if h.site else ""
        yield HOST_STATE_BRANCH.finding(
            h.step, f"{h.owner}.{h.attr}", (),
            f"{h.owner}.{h.attr} was {h.before} when graph {g.id}'s capture began and {h.after} when it "
            f"ended: host code the captured call ran changed it{where}. Eager calls change it on every call; "
            f"a replay runs no host code, so it stays {h.after}, and every replay keeps what the capture "
            f"computed from it: the branch host code took on it, the index or size it gave a kernel. Wrong "
            f"wherever a later call would have gone another way (a counter past a window, a shortcut taken "
            f"only at capture).",
            f"Keep {h.attr} on the device (a tensor the captured code updates in place, such as a "
            f"cache_position or a device step counter), so that every replay advances it and reads it; or "
            f"compute it outside the graph and pass it in a static buffer; or capture one graph per value and "
            f"replay the one that matches.")
