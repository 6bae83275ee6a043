"""gpu_demo on a real GPU: docs/results.md's measured table, the trap, PDL, the recorder.

Skipped without CUDA. Each harness case runs in its own process, so the
illegal-address row cannot take the test process down.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_demo.guard.protocol import capture_replay  # noqa: E402
from gpu_demo.guard.protocol.metric import relative_error  # noqa: E402
from gpu_demo.lab.moe.harness import run_isolated  # noqa: E402
from gpu_demo.lab.moe.model import MoEStack  # noqa: E402
from gpu_demo.lab.moe.recording import record_moe  # noqa: E402
from gpu_demo.lab.moe.settings import RunSettings  # noqa: E402
from simlib.programs.spec import MoEConfig  # noqa: E402
from simlib.trace import Mutation  # noqa: E402

pytestmark = pytest.mark.gpu

SETTINGS = RunSettings()
DESIGN_TABLE = [
    ("shared_first", "plain", "correct"),
    ("shared_first", "static_buffer", "correct"),
    ("shared_first", "raw_kernel", "correct"),
    ("routed_first", "plain", "capture_error:shape_mismatch"),
    ("routed_first", "static_buffer", "silent_wrong"),
    ("routed_first", "raw_kernel", "illegal_address"),
]


@pytest.mark.parametrize("order, mode, outcome", DESIGN_TABLE)
def test_the_measured_table_of_the_design_notes(order, mode, outcome):
    result = run_isolated(MoEConfig(order=order, shared_mode=mode), SETTINGS)
    assert result.outcome == outcome, result.message
    if outcome == "correct":
        assert all(e is not None and e <= SETTINGS.tolerance for e in result.errors)


def test_replaying_on_the_warm_up_input_hides_the_silent_bug():
    trapped = run_isolated(MoEConfig(order="routed_first", inputs="same_as_eager"), SETTINGS)
    honest = run_isolated(MoEConfig(order="routed_first", inputs="fresh"), SETTINGS)
    assert trapped.outcome == "correct" and trapped.errors == [0.0] * 3
    assert honest.outcome == "silent_wrong" and min(honest.errors) > 0.1


def test_the_pdl_residual_add_is_captured_and_correct():
    config = MoEConfig(order="shared_first", shared_mode="plain", pdl=True)
    model, reference = MoEStack(config, SETTINGS), MoEStack(config.with_(pdl=False), SETTINGS)
    static_in = torch.randn(16, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        capture_replay.warm_up(lambda: model(static_in))
        graph, out = capture_replay.capture(lambda: model(static_in))
        fresh = torch.randn_like(static_in)
        static_in.copy_(fresh)
        graph.replay()
        assert relative_error(out, reference(fresh.clone())) < SETTINGS.tolerance


def test_a_real_routed_first_capture_freezes_a_null_x_in_the_shared_branch():
    trace = record_moe(MoEConfig(order="routed_first"), SETTINGS)
    assert trace.meta["mode"] == "cuda"
    (dispose,) = [m for m in trace.of(Mutation) if m.graph == 0]
    shared = [launch for launch in trace.launches(graph=0) if launch.role == "shared_expert"]
    x_args = [a for launch in shared for a in launch.args if a.tensor == dispose.tensor]
    assert x_args and all(a.ptr == 0 and a.numel == 0 for a in x_args)
