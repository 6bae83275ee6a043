"""The incremental checker: fed a program's records in any slices, it finds what one pass over them finds.

``IncrementalChecker`` is what the whole-process check feeds as a program runs;
``check`` feeds it a whole trace at once. The simulator's programs are the
oracle here: the gallery's cases (every rule of the incident family, hazardous
and fixed) and the MoE scenarios.
"""

from __future__ import annotations

import pytest

from simlib.checker import IncrementalChecker
from simlib.programs.gallery import CASES
from simlib.programs.scenarios import run as run_scenario
from simlib.programs.spec import MATRIX
from simlib.trace import Arg, Call, Capture, Launch, Replay, Trace


def _traces() -> list[tuple[str, Trace]]:
    found = [(f"{name}/{'fixed' if fixed else 'hazard'}", case.run(fixed=fixed).result.trace)
             for name, case in CASES.items() for fixed in (False, True)]
    return found + [(f"moe/{cfg.order}/{cfg.shared_mode}", run_scenario(cfg).trace) for cfg in MATRIX[:6]]


TRACES = _traces()


def _fed(trace: Trace, size: int, *, whole_program: bool = False) -> list[tuple]:
    checker = IncrementalChecker(whole_program=whole_program)
    records = trace.records
    found = []
    for start in range(0, len(records), size):
        found += checker.feed(records[start:start + size])
    found += checker.finish()
    return sorted((f.rule, f.step, f.label, f.pointers, f.why) for f in found)


@pytest.mark.parametrize("name, trace", TRACES, ids=[name for name, _ in TRACES])
@pytest.mark.parametrize("whole_program", [False, True], ids=["protocol", "whole_program"])
def test_fed_in_any_slices_it_finds_what_one_pass_finds(name, trace, whole_program):
    at_once = _fed(trace, len(trace.records) or 1, whole_program=whole_program)
    assert _fed(trace, 1, whole_program=whole_program) == at_once
    assert _fed(trace, 7, whole_program=whole_program) == at_once


def test_the_hazards_are_found_by_the_whole_program_checker_too():
    # Nobody brackets the calls or names the inputs in a whole program, yet every gallery hazard that a
    # single pass finds by a rule is found: the calls and inputs are inferred.
    missed = []
    for name, case in CASES.items():
        trace = case.run().result.trace
        rules = {f.code for f in IncrementalChecker(whole_program=True).feed(trace.records)}
        if not set(case.rules) & rules:
            missed.append(name)
    assert missed == []


def test_a_whole_program_keeps_no_more_eager_records_than_its_window():
    trace = CASES["host_scalar_frozen"].run().result.trace
    checker = IncrementalChecker(whole_program=True, window=10)
    checker.feed(trace.records)
    assert len(checker._since_capture) <= 10 and not checker.index.eager


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_whole_program_with_no_call_records_finds_each_cases_rules_and_nothing_on_its_fix(name):
    # As the whole-process check records a program: nobody brackets its calls (rules 8, 9 and 15 infer them).
    case = CASES[name]
    for fixed in (False, True):
        records = [r for r in case.run(fixed=fixed).result.trace.records if type(r) is not Call]
        checker = IncrementalChecker(whole_program=True)
        found = {f.code for f in checker.feed(records) + checker.finish()}
        assert found == (set() if fixed else set(case.rules)), (fixed, found)


def test_what_a_graph_reads_is_watched_until_its_first_replay_even_where_it_reads_it_twice():
    # The static input ``x`` read by two nodes (``h + f(h)``, a residual): once the graph has
    # replayed, a write there can no longer be its warm-up's input, so the checker stops watching it.
    x, y = Arg("x", 1, "x", 4096, 256, (256,), 1024, "r"), Arg("y", 2, "y", 8192, 256, (256,), 1024, "w")
    steps = iter(range(100))

    def launch(i: int, *args: Arg) -> Launch:
        return Launch(next(steps), 0.0, i, f"aten.op{i}", f"op{i}", "", "main", args, 0)

    checker = IncrementalChecker(whole_program=True)
    y_again = Arg("y", 2, "y", 8192, 256, (256,), 1024, "rw")
    checker.feed([Capture(next(steps), 0.0, "begin", 0, "main"), launch(0, x, y), launch(1, x, y_again),
                  Capture(next(steps), 0.0, "end", 0, "main")])
    assert (4096, 5120) in checker.watched_reads()
    checker.feed([Replay(next(steps), 0.0, 0, 0, "main")])
    assert (4096, 5120) not in checker.watched_reads()


@pytest.mark.parametrize("name, trace", TRACES, ids=[name for name, _ in TRACES])
def test_the_frees_watched_are_what_every_range_would_say_when_looked_at_afresh(name, trace):
    # Rule 10 looks again only at the ranges something touched since it was last asked (a capture,
    # a free waiting, a graph-pool block handed out or back): the same answer as every range afresh.
    checker = IncrementalChecker(whole_program=True)
    rule, asked = checker._freed, 0
    for r in trace.records:
        checker.feed([r])
        afresh = {(lo, hi) for (lo, hi), users in rule._users.items()
                  if any(rule._new(lived, user) for lived, user in users)
                  and not any(blo <= lo and hi <= bhi for (blo, bhi), _ in rule._pool_blocks.overlapping(lo, hi))}
        watched = rule.watched()
        assert len(watched) == len(set(watched)) and set(watched) == afresh, (name, r.step)
        asked += bool(afresh)
    assert asked or not rule._users   # where graphs use memory outside their pools, some was watched
