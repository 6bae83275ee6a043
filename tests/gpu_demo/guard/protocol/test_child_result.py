"""The guard's child answer as it crosses the process boundary: JSON, partial, then completed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from gpu_demo.guard.protocol.capture_replay import ReplayEvidence  # noqa: E402
from gpu_demo.guard.protocol.child import ChildError  # noqa: E402
from gpu_demo.guard.protocol.child_result import ChildResult  # noqa: E402


def test_a_result_survives_json_and_leaves_out_what_is_not_known():
    recorded = ChildResult(mode="cuda", trace='{"records": []}')
    assert recorded.to_dict() == {"mode": "cuda", "trace": '{"records": []}'}   # a checkpoint: no replay yet
    whole = ChildResult(mode="cuda", trace="{}", replay=ReplayEvidence(True, "correct", [0.0], 0.01), retire=True,
                        child_error=ChildError("RuntimeError: boom", "Traceback ..."))
    assert ChildResult.from_dict(json.loads(json.dumps(whole.to_dict()))) == whole


def test_the_replay_of_a_second_process_completes_the_recording_of_the_first():
    recorded = ChildResult(mode="cuda", trace="{}", replay_elsewhere=True, retire=True)
    replayed = recorded.then(ChildResult(replay=ReplayEvidence(True, "silent_wrong", [0.9], 0.01)))
    assert (replayed.mode, replayed.trace, replayed.replay.outcome) == ("cuda", "{}", "silent_wrong")


def test_a_child_error_says_the_first_line_of_an_exception_or_the_last_of_a_dead_process():
    assert ChildError.raised(ValueError("bad payload 7\nmore")).message == "ValueError: bad payload 7"
    assert ChildError.died("loading\nSegmentation fault\n", "child").message == "Segmentation fault"
    assert ChildError.died("", "worker").message == "the worker process died without a word"
    assert len(ChildError.died("x" * 5000, "child").detail) == 3000
