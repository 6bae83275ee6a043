"""The checker's and the guard's verdicts on the MoE's dry-run recordings."""

from __future__ import annotations

import pytest
import torch
from small_moe import SMALL, SMALL_FLAGS, no_cuda, record, rules

from gpu_demo import assert_capture_safe
from gpu_demo.lab.cli.main import main
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import check
from simlib.trace import Trace


@pytest.mark.parametrize("mode", ["static_buffer", "raw_kernel"])
def test_the_checker_flags_the_incident_order(mode):
    assert rules(record(order="routed_first", shared_mode=mode)) == {(1, "x"), (2, "x")}


@pytest.mark.parametrize("changes", [
    {"order": "shared_first"},
    {"order": "routed_first", "dispose": "skip_in_capture"},
    {"order": "routed_first", "dispose": "own_buffer"},
    {"order": "routed_first", "dispose": "never"},
    {"order": "routed_first", "clone": True},
    {"order": "routed_first", "shared_mode": "raw_kernel", "clone": True},
])
def test_the_checker_passes_the_fixed_programs(changes):
    assert check(record(**changes)) == []


def test_the_checker_flags_a_forgotten_input_refresh_but_not_the_trap():
    assert rules(record(order="shared_first", inputs="stale")) == {(5, "residual")}
    # Replaying on the warm-up's input refreshes the buffer: no hazard in the
    # trace, only a test that proves nothing (see the GPU results).
    assert check(record(order="shared_first", inputs="same_as_eager")) == []


def test_record_dry_run_of_the_incident_prints_the_report_and_exits_1(capsys):
    assert main(["record", "--dry-run", "--order", "routed_first"]) == 1
    out = capsys.readouterr().out
    assert "rule 1 (host_mutation)" in out and "rule 2 (empty_argument)" in out and "'x'" in out


@pytest.mark.parametrize("flags", [
    ["--order", "shared_first"],
    ["--order", "routed_first", "--dispose", "skip_in_capture"],
    ["--order", "routed_first", "--dispose", "own_buffer"],
    ["--order", "routed_first", "--dispose", "never"],
    ["--order", "routed_first", "--clone"],
])
def test_record_dry_run_of_the_fixes_exits_0(flags, capsys):
    assert main(["record", "--dry-run", *flags, *SMALL_FLAGS]) == 0
    assert "No capture hazards found." in capsys.readouterr().out


def test_record_dry_run_reports_a_failed_capture(capsys, tmp_path):
    trace_file = tmp_path / "trace.json"
    code = main(["record", "--dry-run", "--order", "routed_first", "--shared-mode", "plain",
                 "--trace-out", str(trace_file), *SMALL_FLAGS])
    assert code == 1
    assert "capture failed: capture_error:shape_mismatch" in capsys.readouterr().out
    assert Trace.from_json(trace_file.read_text()).meta["capture_error"] == "capture_error:shape_mismatch"


# An nn.Module instance given to the guard must live where the guard runs it: on the GPU of a
# classroom seat (a real capture and replays, in this process: a CUDA module does not pickle),
# on the CPU elsewhere (the dry run).
WHERE_THE_GUARD_RUNS = RunSettings(device="auto", dtype="float32")


def test_assert_capture_safe_raises_with_the_report_for_the_incident():
    model = MoEStack(SMALL.with_(order="routed_first"), WHERE_THE_GUARD_RUNS)
    with pytest.raises(AssertionError) as err:
        assert_capture_safe(model, torch.randn(4, 32), isolate=False)
    assert "host_mutation" in str(err.value) and "dispose_tensor" in str(err.value)


def test_assert_capture_safe_accepts_the_fixed_program():
    assert_capture_safe(MoEStack(SMALL.with_(order="routed_first", dispose="skip_in_capture"),
                                 WHERE_THE_GUARD_RUNS), torch.randn(4, 32), isolate=False, dry_run_ok=True)


@no_cuda
def test_a_case_whose_process_dies_without_a_result_is_reported_not_raised():
    from gpu_demo.lab.moe.harness import HARNESS_ERROR, run_isolated

    result = run_isolated(SMALL, RunSettings(device="cpu"), timeout=120)
    assert result.outcome == HARNESS_ERROR
    assert "Traceback" in result.raw_error and result.message
