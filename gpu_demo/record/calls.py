"""Where the calls of a program's captured code began and ended, read off a recording.

``record_capture`` knows its calls and brackets them with ``Call`` records. A
whole program (``capture_checked()``, ``CAPTURE_ORDER_CHECK=1``) says nothing
of the kind: a server runs its model eagerly a few times, then captures it.
``with_calls`` infers the brackets from what the capture itself launched:
the graph's first launch, ``(site, kernel)``, occurs ``m`` times in the
captured call, so every ``m``-th eager occurrence of it before the capture
starts an eager call of the same code. A call ends before the next one starts,
or before any capture begins. Counted back from the capture, so a recording
that starts in the middle of a call only loses that call.
"""

from __future__ import annotations

from simlib.trace import Call, Capture, Launch, Record

EAGER, CAPTURE = "eager", "capture"


def with_calls(records: list[Record], graph: int) -> list[Record]:
    """``records`` with ``Call`` records around the eager calls before ``graph``'s capture that
    repeat its captured code, and around the capture's call; as they are when they already
    have ``Call`` records or the capture launched nothing."""
    if any(type(r) is Call for r in records):
        return records
    bracket = {r.op: i for i, r in enumerate(records) if type(r) is Capture and r.graph == graph}
    begin, end = bracket.get("begin"), bracket.get("end")
    if begin is None or end is None:
        return records
    nodes = [r for r in records[begin:end] if type(r) is Launch and r.graph == graph]
    if not nodes:
        return records
    site, kernel = nodes[0].site, nodes[0].kernel
    per_call = sum(n.site == site and n.kernel == kernel for n in nodes)
    occurrences = [i for i, r in enumerate(records[:begin])
                   if type(r) is Launch and r.kernel == kernel and r.site == site and r.graph is None]
    whole = len(occurrences) // per_call
    starts = occurrences[len(occurrences) - whole * per_call::per_call] if whole else []
    captures = [i for i, r in enumerate(records[:begin + 1]) if type(r) is Capture and r.op == "begin"]
    bounds: list[tuple[int, int]] = []   # [first, last] record index of each eager call
    for k, start in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else begin
        stop = min([stop, *(c for c in captures if c > start)])
        bounds.append((start, stop - 1))
    before: dict[int, Call] = {}   # record index -> the bracket just before it, and just after
    after: dict[int, Call] = {}
    for k, (first_i, last_i) in enumerate(bounds):   # eager calls lie before the capture: no index shared
        before[first_i] = Call(records[first_i].step, records[first_i].t_us, "begin", k, EAGER)
        after[last_i] = Call(records[last_i].step, records[last_i].t_us, "end", k, EAGER)
    before[end] = Call(records[end].step, records[end].t_us, "end", len(bounds), CAPTURE)
    after[begin] = Call(records[begin].step, records[begin].t_us, "begin", len(bounds), CAPTURE)
    out: list[Record] = []
    done = 0
    for i in sorted(before.keys() | after.keys()):
        out += records[done:i]
        if i in before:
            out.append(before[i])
        out.append(records[i])
        if i in after:
            out.append(after[i])
        done = i + 1
    return out + records[done:]
