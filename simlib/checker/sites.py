"""Where in the user's code each finding happened: the ``file:line`` its step's record carries.

Launches, mutations, captures, replays and host values carry the user's line that
issued them (``site``); a free or a rebind does not, and happens on the line the
host was running, so such a finding is placed ``near`` the last line the recording
saw before it.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import replace
from typing import Iterable

from ..trace import Capture, Record
from .findings import Finding

NEAR = "near "
_SITED: dict[type, bool] = {}   # a record type -> does it have a ``site`` (most records, allocations and frees, have none)


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


class SiteBook:
    """The lines of records fed and then dropped, for findings that point back at them.

    The whole-process check drops records once fed, but a rule may report later what a record
    fed long ago did (rule 7 at the first replay names a read in the capture; rules 10 and 11
    name a free or a write before the replay). The book keeps every line of a capture (captures
    are few and their records are what the graphs froze) and the last ``window`` lines outside
    one, so it stays bounded while a server serves.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self._in_capture = False
        # Steps as 8-byte ints, lines as one string each however often they come (a server's
        # steps come from a few lines): about 16 bytes a record booked.
        self._captured: tuple[array[int], list[str]] = (array("q"), [])
        self._eager: tuple[array[int], list[str]] = (array("q"), [])
        self._lines: dict[str, str] = {}

    def add(self, records: Iterable[Record]) -> None:
        """Book the lines of ``records``, fed in order."""
        lines, sited = self._lines, _SITED
        for r in records:
            kind = type(r)
            if kind is Capture:
                self._in_capture = r.op == "begin"
            has = sited.get(kind)
            if has is None:
                has = sited[kind] = hasattr(kind, "site")
            if has and (site := r.site):
                steps, sites = self._captured if self._in_capture else self._eager
                steps.append(r.step)
                sites.append(lines.setdefault(site, site))
        if len(lines) > self.window:   # a program of very many lines: forget the shared copies
            lines.clear()
        steps, sites = self._eager
        if len(steps) > 2 * self.window:   # trimmed in halves, so adding stays cheap
            del steps[:-self.window], sites[:-self.window]

    def site_at(self, step: int) -> str:
        """The line of ``step``'s record, else ``near`` the last line booked before it, else ``""``."""
        best, where = -1, ""
        for steps, sites in (self._captured, self._eager):
            i = bisect_right(steps, step) - 1
            if i >= 0 and steps[i] > best:
                best, where = steps[i], sites[i]
        if best < 0:
            return ""
        return where if best == step else NEAR + where

    def located(self, findings: list[Finding]) -> list[Finding]:
        """``findings``, each without a ``site`` given the one the book knows for its step."""
        return [replace(f, site=self.site_at(f.step)) if not f.site else f for f in findings]
