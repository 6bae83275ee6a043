"""The gallery's pictures show each hazard: the value a node froze, a weight rebound, two graphs on one block."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from simlib.programs.gallery import CASES, READ_AT_ONCE  # noqa: E402
from simlib.tutorial.plots.gallery import case_pictures  # noqa: E402

SHARING = {"shared_pool_clobber", "lazy_cache_in_capture", "drafter_shared_pool"}


def strings(fig, gid):
    return [" ".join(s.split()) for a in fig.artists if a.get_gid() == gid for s in a.strings]


def graph_of(name, fixed=False):
    return case_pictures(CASES[name].run(fixed=fixed))["graph"]


@pytest.mark.parametrize("name, marked", [
    ("host_scalar_frozen", "= scale = scale@3 FROZEN"),
    ("view_sliced_by_host_length", "r kv_cache[:n] 0x7f…00400 3x64 FROZEN"),
    ("generator_not_registered", "rng sampler-rng: its state at capture FROZEN"),
    ("weights_rebound_after_sync", "r weight 0x7f…02400 REBOUND"),
    ("logits_kept_without_clone", "w logits 0x7e…00000 OVERWRITTEN"),
    ("op_between_pieces_fresh", "r act 0x7f…00a00 STALE"),
    ("input_rebuilt_each_call", "r positions 0x7e…00000 REBUILT"),
    ("workspace_resized_under_graph", "r plan_bs1 0x7f…00000 FREED"),
    ("buffer_rebound", "r buf 0x7f…00800 FREED"),
])
def test_the_graph_draws_what_its_node_froze_in_vermillion_and_the_fix_draws_nothing(name, marked):
    assert marked in strings(graph_of(name), "graph-bad-args")
    fixed = graph_of(name, fixed=True)
    assert strings(fixed, "graph-bad-args") == [] and strings(fixed, "graph-host-notes") == []


def test_only_the_argument_at_the_named_address_is_marked():
    assert strings(graph_of("buffer_rebound"), "graph-bad-args") == ["r buf 0x7f…00800 FREED"]   # not its copy


def test_what_a_box_cannot_show_is_said_under_the_graph():
    (counter,) = strings(graph_of("host_counter_in_capture"), "graph-host-notes")
    assert "layers.0.cumulative_length_int = 2 picked these kernels" in counter
    (weights,) = strings(graph_of("weights_rebound_after_sync"), "graph-host-notes")
    assert "rebound at step 39" in weights and "0x7f0000000200" in weights and "0x7f0000002400" in weights


def test_a_pool_picture_comes_with_the_cases_whose_graphs_share_memory():
    for case in CASES.values():
        assert ("pool" in case_pictures(case.run())) == (case.name in SHARING), case.name


def test_the_pool_picture_puts_both_outputs_on_one_address_and_marks_the_read_that_got_the_other_s_bytes():
    run = CASES["shared_pool_clobber"].run()
    fig = case_pictures(run)["pool"]
    assert "out_bs1 0x7e0000000200 +128" in strings(fig, "pool-labels:bs1")
    assert "out_bs2 0x7e0000000200 +256" in strings(fig, "pool-labels:bs2")
    assert any(a.get_gid() == "pool-clobbered" for a in fig.artists)
    events = strings(fig, "event-text")
    assert events[:2] == ["replay bs1 writes h_bs1, out_bs1", "replay bs2 writes h_bs2, out_bs2"]
    assert events[2] == "clone out_bs1 reads out_bs1: bs2's bytes: WRONG"


@pytest.mark.parametrize("fixed, order", [(False, READ_AT_ONCE), (True, None)])
def test_reading_at_once_or_copying_out_leaves_no_wrong_read_and_nothing_clobbered(fixed, order):
    from simlib.tutorial.plots.gallery import pool_picture

    fig = pool_picture(CASES["shared_pool_clobber"].run(fixed=fixed, order=order))
    events = strings(fig, "event-text")
    assert events and not any("WRONG" in e for e in events)
    assert "clone out_bs1 reads out_bs1: its own bytes" in events
    assert not any(a.get_gid() == "pool-clobbered" for a in fig.artists)


def test_the_drafter_s_verification_reads_the_draft_s_bytes():
    events = strings(case_pictures(CASES["drafter_shared_pool"].run())["pool"], "event-text")
    assert events[-1] == "clone target_logits reads target_logits: draft's bytes: WRONG"
