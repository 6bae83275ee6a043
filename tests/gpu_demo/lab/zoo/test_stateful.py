"""Steps that advance their own state: a verdict from check_capture, passed when right, caught when wrong.

On the CPU the recordings: the unpinned decode steps are clean and the planted host
counter is reported at its own line. On a GPU (``-m gpu``) the whole check: the
reference lives the captured build's history, so the right steps pass and the
planted one is caught by its replays as well as by the checker.
"""

from __future__ import annotations

import runpy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpu_demo.guard.check import check_capture  # noqa: E402
from gpu_demo.guard.differential import live_warm_up  # noqa: E402
from gpu_demo.guard.protocol.capture_replay import WARM_UP_CALLS  # noqa: E402
from gpu_demo.guard.protocol.worker import warm_checks  # noqa: E402
from gpu_demo.guard.target import load  # noqa: E402
from gpu_demo.lab.zoo import stateful  # noqa: E402
from simlib.checker.rules import FROZEN_HOST_VALUE, HOST_STATE_BRANCH  # noqa: E402
from simlib.glossary import NOT_ON_GPU, NOT_SAFE  # noqa: E402

RIGHT = [t for t in stateful.TARGETS if not t.endswith(stateful.PLANTED)]
PLANTED = f"{stateful.__name__}:{stateful.PLANTED}"


@pytest.mark.parametrize("target", RIGHT)
def test_a_step_with_state_records_clean_on_the_cpu(target):
    if torch.cuda.is_available():
        pytest.skip("the GPU test below checks it whole")
    report = check_capture(target, isolate=False, dtype="float32")
    assert (report.answer, report.findings, report.problem) == (NOT_ON_GPU, [], None), report.format()


def test_the_planted_host_counter_is_reported_at_its_line_on_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("the GPU test below checks it whole")
    report = check_capture(PLANTED, isolate=False, dtype="float32")
    # the counter is frozen into the launch (rule 8) and is a host int that changes every call (rule 16)
    assert report.answer == NOT_SAFE, report.format()
    assert report.codes == [FROZEN_HOST_VALUE.code, HOST_STATE_BRANCH.code], report.format()
    assert "gpu_demo/lab/zoo/stateful.py:" in report.findings[0].why


def test_a_reference_lives_the_warm_up_the_graph_lived():
    step, (token,) = stateful.llama_stateful_decode(torch.device("cpu"), torch.float32)
    with torch.no_grad():
        live_warm_up(step, [token])
    assert int(step.position) == stateful.PROMPT + WARM_UP_CALLS
    assert all(int(layer.cumulative_length) == stateful.PROMPT + WARM_UP_CALLS for layer in step.cache.layers)


@pytest.mark.gpu
def test_steps_with_state_pass_and_the_planted_counter_is_caught_on_a_gpu():
    with warm_checks():
        reports = {target: check_capture(target) for target in stateful.TARGETS}
    for target in RIGHT:
        assert reports[target].passed, reports[target].format()
    planted = reports[PLANTED]
    assert planted.answer == NOT_SAFE and FROZEN_HOST_VALUE.code in planted.codes, planted.format()
    # The frozen rotary position matters: the first replay (the capture's own position) is exact, the
    # later ones drift from the reference. On this tiny random model the drift stays under bf16's
    # tolerance (0.0055 and 0.0081 on the H200, 2026-12-03): the rules say what the replay cannot.
    errors = planted.replay.errors
    assert errors[0] == 0 and max(errors[1:]) > 0, planted.format()


# this file imported the module first, which `python -m` does not: runpy says so
@pytest.mark.filterwarnings("ignore:'gpu_demo.lab.zoo.stateful' found in sys.modules:RuntimeWarning")
def test_the_targets_resolve_when_the_module_runs_as_a_script():
    # `python -m gpu_demo.lab.zoo.stateful` runs it as __main__, which the check's worker cannot import
    scripted = runpy.run_module(stateful.PROGRAM, run_name="__main__.notrun")
    assert all(target.split(":")[0] == stateful.PROGRAM for target in scripted["TARGETS"])
    assert [load(target).__name__ for target in scripted["TARGETS"]] == [
        target.split(":")[1] for target in scripted["TARGETS"]]
