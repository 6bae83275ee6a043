"""The recorder-overhead comparison: how the ratio is made of paired, settled passes, and the
untraced process that times the plain ones."""

from __future__ import annotations

import os

import pytest

from gpu_demo.lab.cli import check as check_commands
from gpu_demo.lab.cli.main import main
from gpu_demo.lab.measure.overhead import compare

# -- the recorder-overhead comparison ------------------------------------------------------------

def test_the_overhead_ratio_is_record_plus_check_over_plain_by_medians():
    plain_times = iter([9.0, 1.0, 1.2, 0.8])            # the first, untimed pass is dropped
    recorded_times = iter([(9.0, 9.0), (2.0, 0.5), (1.5, 0.5), (2.5, 0.5)])

    def recorded():
        record, check = next(recorded_times)
        return record, check, {"records": 10, "findings": 1}

    result = compare(lambda: next(plain_times), recorded, repeats=3, settle=lambda: None)
    assert result["plain_s"]["median"] == 1.0 and result["record_and_check_s"]["median"] == 2.5
    assert result["ratio"] == 2.5 and result["within_target"] and result["records"] == 10


def _recorded_at(record: float, check: float):
    def recorded():
        return record, check, {"records": 10, "findings": 0}
    return recorded


def test_the_ratio_pairs_each_recorded_pass_with_the_untraced_plain_pass_beside_it():
    untraced = iter([1.0, 0.8, 0.8, 1.28])              # a slow spell in the last repeat hits all
    plain = iter([1.0, 1.0, 1.0, 1.6])
    recorded = iter([(2.0, 0.5), (1.5, 0.5), (1.5, 0.5), (2.4, 0.8)])

    def record():
        r, c = next(recorded)
        return r, c, {"records": 10, "findings": 0}

    result = compare(lambda: next(plain), record, repeats=3, untraced=lambda: next(untraced),
                     settle=lambda: None)
    assert result["ratio"] == 2.5 and result["within_target"]      # 2.5, 2.5, 2.5 paired
    assert result["ratio_same_process"] == 2.0                     # 2.0, 2.0, 2.0 paired
    assert result["plain_untraced_s"]["median"] == 0.8 and result["plain_s"]["median"] == 1.0
    assert result["record_and_check_s"]["median"] == 2.0


def test_without_an_untraced_baseline_the_ratio_is_against_the_plain_passes():
    result = compare(lambda: 1.0, _recorded_at(3.0, 0.5), repeats=3, settle=lambda: None)
    assert result["ratio"] == 3.5 and not result["within_target"]
    assert "ratio_same_process" not in result and "plain_untraced_s" not in result


def test_every_timed_pass_starts_from_a_settled_heap():
    events = []

    def timed(name, seconds):
        def run():
            events.append(name)
            return seconds
        return run

    def recorded():
        events.append("recorded")
        return 2.0, 0.5, {"records": 10, "findings": 0}

    compare(timed("plain", 1.0), recorded, repeats=2, floor=timed("floor", 1.1),
            untraced=timed("untraced", 0.9), settle=lambda: events.append("settle"))
    timed_passes = events[4:]                  # after the untimed first pass of each
    # the untraced pass (settled in its own process) right before the recorded pass it pairs with
    assert timed_passes == ["settle", "plain", "settle", "floor", "settle", "untraced", "recorded"] * 2


def test_the_overhead_table_shows_the_plain_passes_its_ratio_pairs_with(monkeypatch, tmp_path, capsys):
    from gpu_demo.lab.measure import overhead

    stack = {"ops": 10, "records": 20, "plain_s": {"median": 0.7}, "plain_untraced_s": {"median": 0.5},
             "record_s": {"median": 1.4}, "check_s": {"median": 0.1}, "ratio": 3.0, "within_target": False,
             "floor_us_per_op": 1.0, "record_us_per_op": 2.0}
    monkeypatch.setattr(check_commands, "no_cuda", lambda command, hint="": False)
    monkeypatch.setattr(overhead, "run_overhead", lambda layers, repeats: {"layers": layers, "moe_stack": stack})
    assert main(["recorder-overhead", "--out", str(tmp_path / "o.json")]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("moe_stack")]
    assert "0.500" in row and "0.700" not in row and "3.00" in row   # the untraced plain passes


def test_an_untraced_process_that_cannot_build_its_stack_says_why():
    from gpu_demo.lab.measure.untraced_passes import UntracedPasses
    from gpu_demo.lab.moe.settings import RunSettings

    with pytest.raises(RuntimeError, match="untraced plain passes' process ended") as caught:
        UntracedPasses("no_such_stack", 1, RunSettings(dtype="float32", device="cpu"))
    assert "KeyError: 'no_such_stack'" in str(caught.value)


@pytest.mark.gpu
def test_untraced_plain_passes_are_timed_in_a_process_that_never_records():
    from gpu_demo.lab.measure.untraced_passes import UntracedPasses
    from gpu_demo.lab.moe.settings import RunSettings

    with UntracedPasses("plain_pytorch_stack", 2, RunSettings()) as untraced:
        times = [untraced() for _ in range(3)]
        child = untraced._child
    assert all(0 < t < 10 for t in times) and child.poll() == 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_overhead_runs_on_one_core_and_gives_the_others_back():
    from gpu_demo.lab.measure.overhead import _on_core

    allowed = os.sched_getaffinity(0)
    core = min(allowed)
    with _on_core(core):
        inside = os.sched_getaffinity(0)
    assert inside == {core} and os.sched_getaffinity(0) == allowed
