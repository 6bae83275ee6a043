"""``python -m gpu_demo compare``: a corpus or zoo run against the committed H200 results, program by program."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpu_demo.lab import results
from gpu_demo.lab.results import compare

RERUNS = results.RESULTS_DIR / "reruns"   # real H100 runs (the test below names them)


def corpus() -> dict:
    return results.load("corpus-h200")


def program(run: dict, name: str) -> dict:
    return next(p for p in run["programs"] if p["name"] == name)


def written(tmp_path: Path, run: dict, name: str = "mine.json") -> Path:
    file = tmp_path / name
    file.write_text(json.dumps(run))
    return file


def test_a_run_agrees_with_itself():
    text, status = compare.report(compare.default_against("corpus"), compare.default_against("corpus"))
    assert status == 0
    assert f"{len(corpus()['programs'])} programs in both: {len(corpus()['programs'])} the same, 0 changed" in text


def test_a_verdict_that_changed_is_named_and_fails(tmp_path):
    mine = copy.deepcopy(corpus())
    program(mine, "buffer_rebound")["process"]["rules"] = []
    program(mine, "missing_join")["guard"]["codes"] = []
    text, status = compare.report(compare.default_against("corpus"), written(tmp_path, mine))
    assert status == 1
    assert "2 changed" in text
    assert "buffer_rebound: whole-process rules [rule 10 (freed_under_graph)] -> []" in text
    assert "missing_join: check_capture's rules [capture_failed] -> []" in text


def test_a_race_decided_by_timing_is_listed_not_counted(tmp_path):
    mine = copy.deepcopy(corpus())
    race = program(mine, "race_read_before_join")
    race["truth"]["outcome"] = "correct" if race["truth"]["outcome"] != "correct" else "silent_wrong"
    text, status = compare.report(compare.default_against("corpus"), written(tmp_path, mine))
    assert status == 0
    assert "0 changed; 1 difference a race's timing decides" in text
    assert "race_read_before_join: GPU truth" in text and "not counted" in text


def test_a_race_whose_rules_changed_is_counted(tmp_path):
    mine = copy.deepcopy(corpus())
    program(mine, "race_read_before_join")["process"]["rules"] = ["rule 3 (cross_stream_race)", "rule 10 (freed_under_graph)"]
    text, status = compare.report(compare.default_against("corpus"), written(tmp_path, mine))
    assert status == 1
    assert "race_read_before_join: whole-process rules" in text and "not counted" not in text


def test_a_truth_that_changed_outside_a_race_is_counted(tmp_path):
    mine = copy.deepcopy(corpus())
    program(mine, "safe_dual_stream")["truth"]["outcome"] = "silent_wrong"
    text, status = compare.report(compare.default_against("corpus"), written(tmp_path, mine))
    assert status == 1
    assert "safe_dual_stream: GPU truth correct -> silent_wrong" in text


def test_programs_run_in_one_file_only_are_named_not_counted(tmp_path):
    mine = copy.deepcopy(corpus())
    mine["programs"] = [p for p in mine["programs"] if p["name"] in ("serve_vllm_buckets", "missing_fork")]
    mine["programs"].append({**copy.deepcopy(program(mine, "missing_fork")), "name": "a_new_program"})
    text, status = compare.report(compare.default_against("corpus"), written(tmp_path, mine))
    assert status == 0
    assert "2 programs in both: 2 the same, 0 changed" in text
    assert f"{len(corpus()['programs']) - 2} programs: buffer_rebound," in text
    assert "Only in " in text and "1 program: a_new_program" in text


def test_a_zoo_model_no_longer_clean_fails():
    zoo = results.load("zoo-h200")
    mine = copy.deepcopy(zoo)
    mine["entries"][0]["clean"] = False
    found, gone, added, both = compare.changes(zoo, mine, "zoo")
    assert [(c.program, c.fact, c.timed) for c in found] == [(zoo["entries"][0]["name"], "clean", False)]
    assert gone == added == [] and both == len(zoo["entries"])


@pytest.mark.parametrize("day, commit, kinds", [("2026-12-07", "e9d6563", ("corpus", "zoo")),
                                               ("2026-12-07", "ba4ada9", ("corpus", "zoo")),
                                               ("2026-12-08", "c7493be", ("corpus",))])
def test_real_h100_runs_agree_with_the_h200_program_by_program(day, commit, kinds):
    """Committed reruns on H100s: every verdict the H200's; only the race's truth and replay differed."""
    rerun = RERUNS / f"{day}-{commit}-h100"
    for kind in kinds:
        text, status = compare.report(compare.default_against(kind), rerun / f"{kind}-{commit}.json")
        assert status == 0, text
    found, *_ = compare.changes(corpus(), compare.load(rerun / f"corpus-{commit}.json")[1], "corpus")
    assert found and all(c.timed and c.program == "race_read_before_join" for c in found)


@pytest.mark.parametrize("content, said", [
    (None, "no such file"),
    ("not json", "not JSON"),
    ('{"cases": []}', "not a corpus or zoo results file"),
    ("[1, 2]", "not a corpus or zoo results file"),
])
def test_what_is_not_results_is_refused_in_one_line(tmp_path, content, said):
    file = tmp_path / "x.json"
    if content is not None:
        file.write_text(content)
    with pytest.raises(compare.ResultsError, match=said):
        compare.load(file)


def test_runs_of_different_kinds_are_refused():
    with pytest.raises(compare.ResultsError, match="holds zoo results .* compare a run with one of its own kind"):
        compare.report(compare.default_against("corpus"), compare.default_against("zoo"))


def test_the_command_line_exits_by_the_answer(tmp_path, capsys):
    pytest.importorskip("torch")   # the lab's command line imports it
    from gpu_demo.lab.cli.main import main

    assert main(["compare", str(compare.default_against("zoo"))]) == 0
    entries = len(results.load("zoo-h200")["entries"])
    assert f"{entries} programs in both: {entries} the same, 0 changed" in capsys.readouterr().out
    mine = copy.deepcopy(corpus())
    program(mine, "buffer_rebound")["process"]["rules"] = []
    assert main(["compare", str(written(tmp_path, mine))]) == 1
    assert "buffer_rebound: whole-process rules" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare: ") and err.count("\n") == 1 and "Traceback" not in err
    assert main(["compare", str(compare.default_against("zoo")), "--against",
                 str(compare.default_against("corpus"))]) == 2
