"""The sentences that sum up a picture: its title when the caller gives no ``takeaway``.

Each says what the picture shows in the glossary's words: what the capture
got wrong, else how the replay's time is spent, else what ran eagerly; for two
configurations, what differs between them. Nothing here draws, so the
sentences can be read and tested without a figure.
"""

from __future__ import annotations

from typing import Sequence

from ...checker import Finding, check
from ...checker.verdict import races, verdict
from ...engine.profiles import PROFILES
from ...glossary import UNORDERED, badge, words
from ...programs.latency import CROSS_STREAM, PDL, replay_timing
from ...programs.scenarios import ScenarioResult
from ...trace import Capture, DeviceSpan, Launch, Mutation, Record, SkippedLaunch, Trace
from .reading import Blocks, arg_problem, late_starts, replay_spans, reused_block


def _and(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _launches(n: int) -> str:
    return f"{n} launch" if n == 1 else f"{n} launches"


def _race_words(found: Sequence[Finding]) -> str:
    rules = "; ".join(dict.fromkeys(f"rule {f.rule}, {f.code}" for f in found))
    return f"{badge(UNORDERED)} the checker finds ({rules})"


def capture_takeaway(records: Sequence[Record], graph: int) -> str | None:
    """One sentence on what the capture got wrong, or ``None`` where it froze only live pointers.

    Did a host ``set_`` during the capture reach a later launch, did the capture
    fail, did a launch freeze a dead pointer, and (once the capture has ended)
    does the checker find a race?
    """
    blocks = Blocks()
    launches: list[tuple[Launch | SkippedLaunch, bool]] = []
    emptied: list[Mutation] = []
    failed: Capture | None = None
    ended = False
    for r in records:
        blocks.apply(r)
        if isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            launches.append((r, any(arg_problem(a, blocks) for a in r.args)))
        elif isinstance(r, Mutation) and r.graph == graph and r.new_numel == 0:
            emptied.append(r)
        elif isinstance(r, Capture) and r.graph == graph:
            failed = r if r.error else failed
            ended = ended or r.op == "end"
    if failed is not None:
        after = "".join(f", after {m.label}.{m.op}(empty) at host step {m.step}" for m in emptied)
        return (f"The capture failed ({failed.error}) at host step {failed.step}{after}: "
                "there is no graph to replay")
    for m in emptied:
        hit = [r for r, bad in launches if bad and r.step > m.step]
        if hit:
            roles = "/".join(dict.fromkeys(r.role for r in hit))
            what = (f"{m.label}.{m.op}(empty) at host step {m.step} came before "
                    f"{_launches(len(hit))} ({roles}) that saw an empty {m.label} (0x0)")
            them = "it" if len(hit) == 1 else "them"
            if all(isinstance(r, SkippedLaunch) for r in hit):
                return what + (f": the host skipped {them}, so the graph has no node for {them} "
                               f"and no replay ever runs {them}")
            return what + f": the graph holds {them} with address 0, and every replay runs {them} there"
    bad = [r for r, problem in launches if problem]
    if bad:
        return f"{len(bad)} captured launch(es) froze a null, empty or freed pointer"
    if emptied and not ended:
        m = emptied[0]
        # Shown up to a host step inside the capture: later launches are still to come.
        return (f"{m.label}.{m.op}(empty) at host step {m.step}: every launch so far froze a "
                f"live {m.label}; any launch issued after it freezes an empty {m.label} (0x0)")
    found = races(check(Trace(list(records)))) if ended else []
    if emptied:
        m = emptied[0]
        said = f"{m.label}.{m.op}(empty) at host step {m.step} came after every launch that reads it"
        if not found:
            return said + ": the capture froze live pointers only"
        reuse = reused_block(records, graph, m.old_ptr)
        to = f", which the graph's pool hands to {reuse.label}" if reuse else ""
        return f"{said}, but it freed {m.label}'s block{to}: {_race_words(found)}"
    if found:
        return f"Every captured launch froze a live pointer, but {_race_words(found)}"
    return None


def capture_title(records: Sequence[Record], graph: int) -> str:
    """The capture's takeaway, or what it froze when nothing went wrong."""
    said = capture_takeaway(records, graph)
    if said:
        return said
    nodes = [r for r in records if isinstance(r, Launch) and r.graph == graph]
    if not nodes:
        return "Nothing captured yet"
    streams = list(dict.fromkeys(r.stream for r in nodes))
    return f"The capture froze {_launches(len(nodes))} on {_and(streams)}, every pointer live"


def timeline_takeaway(trace: Trace, records: Sequence[Record], graph: int,
                       captured: bool) -> str:
    if not captured:
        return _eager_takeaway(records)
    return (capture_takeaway(records, graph) or _replay_takeaway(trace, records, graph)
            or capture_title(records, graph))


def _eager_takeaway(records: Sequence[Record]) -> str:
    """No capture: how many launches, on which streams, until when, and the widest overlap."""
    launches = {r.id: r for r in records if isinstance(r, Launch)}
    spans = [r for r in records if isinstance(r, DeviceSpan) and r.phase == "eager"]
    if not launches:
        return "No capture and nothing launched yet"
    streams = list(dict.fromkeys(s.stream for s in spans))
    said = (f"No capture, eager only: the host issued {_launches(len(launches))} by "
            f"{max(r.t_us for r in launches.values()):.1f} µs")
    if spans:
        said += (f"; the device ran them on {_and(streams)} until "
                 f"{max(s.end_us for s in spans):.1f} µs")
    overlaps = [(min(a.end_us, b.end_us) - max(a.start_us, b.start_us), a, b)
                for i, a in enumerate(spans) for b in spans[i + 1:] if a.stream != b.stream]
    width, a, b = max(overlaps, key=lambda o: o[0], default=(0.0, None, None))
    if a is not None and width > 0:
        said += (f"; {launches[a.launch].kernel} on {a.stream} and {launches[b.launch].kernel} "
                 f"on {b.stream} overlap for {width:.1f} µs")
    return said


def _replay_takeaway(trace: Trace, records: Sequence[Record], graph: int) -> str | None:
    """Replay 0 in one sentence: its time, how its last kernel waited, a late branch."""
    spans = replay_spans(records)
    if not spans:
        return None
    try:
        step_us, _, path = replay_timing(Trace(list(records)), graph)
    except ValueError:   # replay spans of another graph than the one captured first
        return None
    streams = list(dict.fromkeys(s.stream for s in spans))
    said = f"Replay 0 runs {len(spans)} kernels on {_and(streams)} in {step_us:.1f} µs"
    if len(path) > 1:
        last, prev = path[-1], path[-2]
        kernels = {n.label: n.kernel for n in trace.launches(graph)}   # the bars' names
        name, before = (kernels.get(step.label, step.label) for step in (last, prev))
        if last.via == PDL:
            said += (f"; its last, {name}, starts {-last.gap_us:.1f} µs before {before} ends (PDL)"
                     if last.gap_us < 0 else f"; its last, {name}, follows {before} with no gap (PDL)")
        elif last.via == CROSS_STREAM:
            said += (f"; its last, {name} on {last.stream}, waits for {before} on {prev.stream} "
                     "(a cross-stream join)")
        else:
            said += f"; its last, {name}, follows {before} on {last.stream} ({last.gap_us:.1f} µs gap)"
    late = late_starts(trace, spans)
    if late:
        said += f"; the branch captured second starts {late_words(trace)} late"
    return said


def late_words(trace: Trace) -> str:
    return f"~{PROFILES[trace.meta['profile']].graph_branch_launch_us:.0f} µs"


def comparison_takeaway(a: ScenarioResult, b: ScenarioResult) -> str:
    da, db = a.config.to_dict(), b.config.to_dict()
    changed = [k for k in da if da[k] != db[k]]
    what = ", ".join(f"{k} ({da[k]} vs {db[k]})" for k in changed) or "nothing"
    said = [words(verdict(r.outcome, check(r.trace))) for r in (a, b)]
    if said[0] == said[1]:
        return f"Only {what} differs, and both are {said[0]}"
    return f"Same program, same streams; only {what} differs: {said[0]} vs {said[1]}"
