"""A gallery case against its H200 twin: agree, inside the predicted set (and why), differ, or not run yet."""

from __future__ import annotations

import json

import pytest

from simlib.programs.gallery import CASES
from simlib.tutorial.twins import LUCK, twin_against_prediction


def corpus(tmp_path, **truths):
    path = tmp_path / "corpus-h200.json"
    programs = [{"name": name, "truth": {"outcome": outcome, "errors": [0.0]}} for name, outcome in truths.items()]
    path.write_text(json.dumps({"provenance": {"gpu": "NVIDIA H200"}, "programs": programs}))
    return path


def test_a_freed_block_the_h200_did_not_hand_out_is_inside_the_predicted_set_and_says_why(tmp_path):
    path = corpus(tmp_path, buffer_rebound="correct", fix_buffer_copied_in_place="correct")
    hazard, fix = twin_against_prediction(CASES["buffer_rebound"], path).splitlines()
    assert hazard == ("buffer_rebound: the simulator predicts silently wrong or correct; the H200 showed correct, "
                      f"inside the predicted set: {LUCK}")
    assert fix == "fix_buffer_copied_in_place: the simulator predicts correct; the H200 showed correct: they agree."


def test_an_outcome_outside_the_set_is_a_difference(tmp_path):
    path = corpus(tmp_path, host_scalar_frozen="correct")
    hazard, fix = twin_against_prediction(CASES["host_scalar_frozen"], path).splitlines()
    assert hazard.endswith("the H200 showed correct: they differ, and the simulator is wrong about this case.")
    assert fix.endswith("not yet run on the H200: nothing to compare yet.")


@pytest.mark.parametrize("exists", [True, False])
def test_a_twin_not_run_yet_says_so(tmp_path, exists):
    path = corpus(tmp_path) if exists else tmp_path / "corpus-h200.json"
    text = twin_against_prediction(CASES["drafter_shared_pool"], path)
    assert text.count("not yet run on the H200: nothing to compare yet.") == 2


def test_only_a_freed_block_s_hazard_predicts_a_set():
    # The allocator's other choice (no freed block handed out again) changes the outcome only where the
    # hazard is a freed default-pool block that something takes before the replays: the twins the H200
    # ran correct, by luck. A graph pool's blocks are reused either way.
    sets = {name: {fixed: case.outcomes(case.run(fixed=fixed)) for fixed in (False, True)}
            for name, case in CASES.items()}
    assert all(s[True] == {"correct"} for s in sets.values())
    assert {name for name, s in sets.items() if len(s[False]) == 2} == {"workspace_freed_in_capture", "buffer_rebound"}
    assert all(s[False] == {"correct", "silent_wrong"} for s in sets.values() if len(s[False]) == 2)
