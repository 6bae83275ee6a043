"""The corpus results as simlib reads them: a twin's H200 truth and guard verdict, or plainly "not run"."""

import json

import pytest

from gpu_demo.lab import results as recorded
from simlib.tutorial.gpu_results import NOT_RUN, describe_twin, load_corpus_results


def corpus_file(path, programs, provenance=None):
    path.write_text(json.dumps({"provenance": provenance or {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130",
                                                             "date_utc": "2026-12-01T13:17:21+00:00"},
                                "replays": 3, "programs": programs}))
    return path


FUNCTION = {"name": "host_scalar_frozen", "expected": "hazardous",
            "truth": {"ran": True, "outcome": "silent_wrong", "errors": [0.5, 0.7, None]},
            "guard": {"verdict": "silent_wrong", "rules": ["rule 8 (frozen_host_value)"]},
            "process": {"rules": ["rule 8 (frozen_host_value)", "rule 1 (host_mutation)"]}}
SCRIPT = {"name": "shared_pool_clobber", "kind": "script", "expected": "hazardous",
          "truth": {"ran": True, "outcome": "silent_wrong", "errors": [1.0]}, "guard": None,
          "process": {"rules": ["rule 11 (graphs_clobber)"]}}
DIED = {"name": "buffer_rebound", "truth": {"outcome": None, "message": "child killed by signal 9"},
        "guard": {"verdict": None, "rules": []}}


def test_a_function_twin_has_its_truth_its_check_capture_verdict_and_every_mode_s_rules(tmp_path):
    twin = load_corpus_results(corpus_file(tmp_path / "c.json", [FUNCTION])).twin("host_scalar_frozen")
    assert (twin.truth, twin.guard, twin.errors) == ("silent_wrong", "silent_wrong", (0.5, 0.7, None))
    assert twin.rules == ("rule 8 (frozen_host_value)", "rule 1 (host_mutation)")   # each once
    line = twin.summary()
    assert line.startswith("H200 (NVIDIA H200, torch 2.11.0+cu130, 2026-12-01): replays silent_wrong")
    assert "errors 0.5 0.7 fault" in line and "check_capture says silent_wrong" in line


def test_a_script_twin_is_judged_by_the_whole_process_check(tmp_path):
    twin = load_corpus_results(corpus_file(tmp_path / "c.json", [SCRIPT])).twin("shared_pool_clobber")
    assert twin.guard is None and twin.rules == ("rule 11 (graphs_clobber)",)
    assert "whole-process check" in twin.summary()


def test_a_twin_whose_child_died_says_so_and_has_no_truth(tmp_path):
    twin = load_corpus_results(corpus_file(tmp_path / "c.json", [DIED])).twin("buffer_rebound")
    assert twin.truth is None and "no result (child killed by signal 9)" in twin.summary()


def test_a_program_missing_from_the_file_or_no_file_says_not_run(tmp_path):
    results = load_corpus_results(corpus_file(tmp_path / "c.json", [FUNCTION]))
    assert results.twin("lazy_cache_in_capture") is None
    assert results.describe("lazy_cache_in_capture").startswith(f"lazy_cache_in_capture: {NOT_RUN}")
    assert load_corpus_results(tmp_path / "absent.json") is None
    assert describe_twin("lazy_cache_in_capture", tmp_path / "absent.json") == (
        f"lazy_cache_in_capture: {NOT_RUN} (no absent.json yet)")


@pytest.mark.parametrize("text", ["{not json", json.dumps({"provenance": {}}), json.dumps({"programs": [{}]})])
def test_an_unreadable_results_file_is_one_line_that_says_how_to_remake_it(tmp_path, text):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"^cannot read corpus results from .*python -m gpu_demo corpus") as err:
        load_corpus_results(path)
    assert "\n" not in str(err.value)


def test_the_committed_corpus_results_load():
    results = load_corpus_results(recorded.path("corpus-h200"))
    assert results is not None and results.recorded["gpu"] == "NVIDIA H200"
    assert results.twin("host_sync_item").truth.startswith("capture_error:")
