"""Rule 12 as a story over hand-made traces: ranks that captured the same collectives, and ranks that did not."""

from __future__ import annotations

import pytest

from simlib.checker import check_ranks, format_rank_report
from simlib.checker.rule_cross_rank import collective_mismatches
from simlib.trace import Arg, Capture, Launch, SkippedLaunch, Trace


def all_reduce(step: int, shape=(16, 512), *, dtype="bfloat16", op="SUM", group="tp", ranks="0,1",
               role="merge", skipped=False):
    numel = 1
    for n in shape:
        numel *= n
    args = (Arg("tensors[0]", 1, "partial", 0x1000 if numel else 0, numel, shape, 2 * numel, "rw", 2 * numel),)
    if skipped:
        return SkippedLaunch(step, 0.0, "c10d.allreduce_.default", f"{role}/allreduce_", role, "main", 0,
                             "every output has zero elements", args)
    return Launch(step, 0.0, step, "c10d.allreduce_.default", f"{role}/allreduce_", role, "main", args, 0,
                  scalars=(("group", group), ("group_ranks", ranks), ("backend", "nccl"), ("reduce_op", op),
                           ("async_op", "False"), ("dtype", dtype)))


def rank_trace(rank: int, *collectives, captured: bool = True) -> Trace:
    """One capture on one stream: each launch waits for the one before it."""
    launches = [c for c in collectives if type(c) is Launch]
    for before, after in zip(launches, launches[1:]):
        after.deps = (before.id,)
    records = [Capture(0, 0.0, "begin", 0, "main"), *collectives, Capture(99, 0.0, "end", 0, "main")]
    return Trace(records if captured else [], {"rank": rank})


def test_ranks_that_captured_the_same_collectives_agree():
    traces = [rank_trace(r, all_reduce(1), all_reduce(5)) for r in (0, 1)]
    assert collective_mismatches(traces) == []
    assert check_ranks(traces) == []
    assert "collectives match" in format_rank_report([], [0, 1])


def test_a_collective_left_out_on_one_rank_is_a_mismatch_named_by_both_ranks():
    (finding,) = collective_mismatches([rank_trace(0, all_reduce(1), all_reduce(5)), rank_trace(1, all_reduce(1))])
    assert (finding.rule, finding.code, finding.severity, finding.step) == (12, "collective_mismatch", "error", 5)
    assert "Collective #2" in finding.why and "rank 1: nothing" in finding.why
    assert "ranks 0, 1" in finding.label and "'tp'" in finding.label


@pytest.mark.parametrize("changed, words", [
    ({"shape": (16, 256)}, "[16, 256]"),
    ({"dtype": "float32"}, "dtype=float32"),
    ({"op": "MAX"}, "reduce_op=MAX"),
    ({"role": "shared_expert"}, "'shared_expert'"),
])
def test_a_collective_that_differs_in_size_dtype_op_or_place_is_a_mismatch(changed, words):
    (finding,) = collective_mismatches([rank_trace(0, all_reduce(1)), rank_trace(1, all_reduce(1, **changed))])
    assert "Collective #1" in finding.why and words in finding.why


def test_the_host_waiting_differently_is_not_a_mismatch():
    other = all_reduce(1)
    other.scalars = tuple(("async_op", "True") if k == "async_op" else (k, v) for k, v in other.scalars)
    assert collective_mismatches([rank_trace(0, all_reduce(1)), rank_trace(1, other)]) == []


def test_a_rank_that_captured_no_graph_is_a_mismatch():
    (finding,) = collective_mismatches([rank_trace(0, all_reduce(1)), rank_trace(1, captured=False)])
    assert "Rank(s) 1 made no capture #0" in finding.why and finding.step == 99


def test_an_all_reduce_over_an_empty_shard_launches_nothing_and_is_a_mismatch():
    traces = [rank_trace(0, all_reduce(1)), rank_trace(1, all_reduce(1, shape=(0, 512), skipped=True))]
    (finding,) = collective_mismatches(traces)
    assert "rank 1: nothing" in finding.why and "allreduce_([0, 512]" in finding.why and "launches nothing" in finding.why


def test_only_the_members_of_a_group_are_compared():
    pair = dict(group="tp01", ranks="0,1")
    traces = [rank_trace(0, all_reduce(1, **pair)), rank_trace(1, all_reduce(1, **pair)),
              rank_trace(2, all_reduce(1, group="tp23", ranks="2,3")),
              rank_trace(3, all_reduce(1, group="tp23", ranks="2,3", shape=(8, 512)))]
    (finding,) = collective_mismatches(traces)
    assert "'tp23'" in finding.label and "ranks 2, 3" in finding.label


def test_check_ranks_gives_each_rank_its_own_findings_and_the_cross_rank_ones_to_all():
    failed = Trace([Capture(0, 0.0, "begin", 0, "main"), all_reduce(1), Capture(2, 0.0, "end", 0, "main",
                                                                               error="timed out")], {"rank": 0})
    found = check_ranks([rank_trace(1), failed])
    assert [(f.ranks, f.finding.code) for f in found] == [((0,), "capture_failed"), ((0, 1), "collective_mismatch")]
    report = format_rank_report(found, [0, 1])
    assert "[rank 0] ERROR rule 0" in report and "[ranks 0, 1] ERROR rule 12" in report


@pytest.mark.parametrize("meta, words", [({}, "meta 'rank' is None"), ({"rank": -1}, "non-negative int")])
def test_a_trace_without_its_rank_is_refused_with_what_to_record(meta, words):
    with pytest.raises(ValueError, match=words):
        collective_mismatches([Trace([], meta)])


def test_two_traces_of_one_rank_are_refused():
    with pytest.raises(ValueError, match="two traces say they are rank 0"):
        collective_mismatches([rank_trace(0), rank_trace(0)])
