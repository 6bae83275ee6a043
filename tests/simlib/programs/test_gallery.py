"""The incident gallery: every case simulates its expected outcome, the checker fires its rules on the
hazard and nothing on the fix, and the what-if answers by replay order."""

from __future__ import annotations

import pytest

from simlib.glossary import CORRECT, SILENT_WRONG, term
from simlib.programs.gallery import CASES, READ_AT_ONCE, READ_LATER, case, shared_pool_what_if

CORPUS_NAMES = {  # the names of the PyTorch twins in gpu_demo/lab/corpus, as the brief lists them
    "host_scalar_frozen", "fix_host_scalar_in_tensor", "input_rebuilt_each_call", "fix_input_copied_to_static",
    "workspace_resized_under_graph", "fix_workspace_sized_once", "workspace_freed_in_capture",
    "fix_workspace_kept_alive", "shared_pool_clobber", "fix_shared_pool_output_copied", "lazy_cache_in_capture",
    "fix_cache_created_before_capture", "buffer_rebound", "fix_buffer_copied_in_place"}
FAMILY_2026 = {  # issue 36's cases, with no PyTorch twin in gpu_demo/corpus yet: the rule each one is about
    "weights_rebound_after_sync": "weights_rebound", "logits_kept_without_clone": "output_overwritten",
    "view_sliced_by_host_length": "view_frozen", "host_counter_in_capture": "host_state_branch",
    "generator_not_registered": "unregistered_generator", "drafter_shared_pool": "graphs_clobber",
    "op_between_pieces_fresh": "input_fresh_between_graphs"}


def test_the_gallery_has_its_cases_named_like_their_corpus_twins_and_the_2026_family():
    assert len(CASES) == 14
    twinned = {n for c in CASES.values() if c.name not in FAMILY_2026 for n in (c.name, c.fix)}
    assert twinned == CORPUS_NAMES
    assert {name: CASES[name].rules[0] for name in FAMILY_2026} == FAMILY_2026
    for c in CASES.values():
        assert c.threads and len(c.story) > 200 and c.pytorch.strip() and c.pytorch_fix.strip()
        assert all(term(outcome) for outcome in c.expected.values())
    assert case("fix_buffer_copied_in_place") is CASES["buffer_rebound"]
    with pytest.raises(KeyError, match="no gallery case"):
        case("nope")


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_hazard_simulates_its_outcome_and_fires_its_rules_and_its_fix_is_clean(name):
    c = CASES[name]
    for order, expected in c.expected.items():
        run = c.run(order=order)
        assert run.outcome == expected, (order, run.computed())
        assert set(run.rules) == (set(c.rules) if expected != CORRECT else set()), (order, run.rules)
        fixed = c.run(fixed=True, order=order)
        assert fixed.outcome == c.fixed_expected == CORRECT, (order, fixed.computed())
        assert fixed.rules == [] and fixed.replays and all(r.ok for r in fixed.replays)


def test_what_a_replay_computes_is_readable():
    host = CASES["host_scalar_frozen"].run()
    assert host.computed()[0] == "graph replay for call 4: all_reduce(x4, scale@3) != eager all_reduce(x4, scale@4)"
    rebuilt = CASES["input_rebuilt_each_call"].run()
    assert all("pos@3" in str(r.got) and f"pos@{r.call}" in str(r.want) for r in rebuilt.replays)
    freed = CASES["workspace_freed_in_capture"].run()
    assert "build_table()" not in str(freed.replays[0].got)          # the table's block holds another tensor


def test_the_freed_workspace_is_reported_at_its_free_and_handed_out_again():
    run = CASES["workspace_freed_in_capture"].run()
    (finding,) = run.findings
    assert finding.rule == 10 and "while graph 0 was being captured" in finding.why
    assert "handed it out again" in finding.why and "graph 0 replayed after it (replay #0" in finding.why


def test_two_graphs_in_one_pool_what_if():
    later, at_once = shared_pool_what_if(READ_LATER), shared_pool_what_if(READ_AT_ONCE)
    assert (later.outcome, later.rules) == (SILENT_WRONG, ("graphs_clobber",))
    assert (at_once.outcome, at_once.rules) == (CORRECT, ())
    fixed = shared_pool_what_if(READ_LATER, copied_out=True)
    assert (fixed.outcome, fixed.rules) == (CORRECT, ())
    assert "silently wrong" in later.summary() and "graphs_clobber" in later.summary()
    assert "!=" in later.reads[0] and all("==" in r for r in fixed.reads)
    with pytest.raises(ValueError, match="choose"):
        shared_pool_what_if("sideways")


def test_a_case_refuses_an_order_it_does_not_have():
    with pytest.raises(ValueError, match="no order"):
        CASES["shared_pool_clobber"].run(order="bs3 first")


def test_each_case_draws_its_graph_and_pointer_table():
    pytest.importorskip("matplotlib")
    from simlib.tutorial.plots.gallery import case_pictures

    for c in CASES.values():
        run = c.run()
        figures = case_pictures(run)
        assert {"graph", "pointers"} <= set(figures)
        for kind, fig in figures.items():
            title = " ".join(s for a in fig.artists if a.get_gid() == "title" for s in a.strings)
            title = " ".join(title.split())
            start = f"{c.name}, {run.order}: " if kind == "pool" else f"{c.name}, graph "
            assert title.startswith(start) and "silently wrong" in title, title
    with pytest.raises(ValueError, match="has no graph"):
        case_pictures(CASES["shared_pool_clobber"].run(), graph="bs9")
