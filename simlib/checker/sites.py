"""Where in the user's code each finding happened: the ``file:line`` its step's record carries.

Launches, mutations, captures, replays and host values carry the user's line that
issued them (``site``); a free or a rebind does not, and happens on the line the
host was running, so such a finding is placed ``near`` the last line the recording
saw before it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..trace import Record
from .findings import Finding

NEAR = "near "


def located(findings: list[Finding], records: Iterable[Record]) -> list[Finding]:
    """``findings``, each with its ``site`` (``Finding``) where ``records`` tell it."""
    wanted = {f.step for f in findings if not f.site}
    if not wanted:
        return findings
    sites: dict[int, str] = {}
    last = ""
    for r in records:
        site = getattr(r, "site", "")
        if r.step in wanted and (site or last):
            sites[r.step] = site or NEAR + last
        if site:
            last = site
    return [replace(f, site=sites[f.step]) if not f.site and f.step in sites else f for f in findings]
