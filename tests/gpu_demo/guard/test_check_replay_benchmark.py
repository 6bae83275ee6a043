"""``benchmarks/check_replay.py``: a start-up's calls on its checker taped (here from the CPU dry run), then
made again on a fresh checker, timed, with the tape's findings."""

from __future__ import annotations

import pickle

import pytest
from benchmark_run import run_benchmark

pytest.importorskip("torch")


def test_a_taped_startup_replays_every_call_with_the_findings_it_had(tmp_path):
    tape = tmp_path / "startup.tape"
    taped = run_benchmark("check_replay.py", "tape", "--cpu", "--layers", "2", "--out", str(tape))
    calls = pickle.loads(tape.read_bytes())["calls"]
    assert taped["calls"] == len(calls)
    feeds = [args[0] for name, args, _ in calls if name == "feed"]
    assert len(feeds) == 9   # each of the 8 capture ends, and the end
    assert sum(len(batch) for batch in feeds) > 0 and any(name == "watched_frees" for name, _, _ in calls)
    result = run_benchmark("check_replay.py", "replay", str(tape), "--repeats", "2", out=tmp_path / "replay.json")
    assert result["calls"] == len(calls) and result["mismatched_calls"] == 0
    assert result["findings"] == result["tape_findings"] == 0   # the safe stack: a finding is a false alarm
    assert len(result["feeds_ms"]) == 9 and result["median_total_s"] > 0
    assert result["tape"]["cpu"] is True and result["tape"]["command"].startswith("python benchmarks/check_replay.py tape")


def test_a_replay_that_finds_otherwise_than_its_tape_fails(tmp_path):
    tape = tmp_path / "startup.tape"
    run_benchmark("check_replay.py", "tape", "--cpu", "--layers", "1", "--out", str(tape))
    taped = pickle.loads(tape.read_bytes())
    name, args, found = next(call for call in taped["calls"] if call[0] == "feed")
    taped["calls"][taped["calls"].index((name, args, found))] = (name, args, found + 1)   # a finding the replay lacks
    tape.write_bytes(pickle.dumps(taped))
    with pytest.raises(AssertionError, match="other findings than on the tape"):
        run_benchmark("check_replay.py", "replay", str(tape), "--repeats", "1")
