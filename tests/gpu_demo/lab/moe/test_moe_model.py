"""The MoE layer itself, eagerly on the CPU: routing, capacity, every option's eager output."""

from __future__ import annotations

import pytest
import torch
from small_moe import CPU32, SMALL

from gpu_demo.guard.protocol.metric import relative_error
from gpu_demo.guard.record.dry_run import dry_capture
from gpu_demo.lab.cli.main import _config, build_parser
from gpu_demo.lab.moe.kernels import swiglu
from gpu_demo.lab.moe.model import MoEStack, dispose_tensor
from simlib.programs.spec import MoEConfig


def test_grouped_routed_experts_match_a_per_token_loop():
    model = MoEStack(SMALL.with_(shared_mode="plain", dispose="never"), CPU32)
    layer, residual = model.layers[0], torch.randn(4, 32)
    with torch.no_grad():
        out = model(residual)
        x = layer.norm(residual)
        weights, ids = layer.router(x)
        want = residual + swiglu(x, layer.shared.w_gate_up, layer.shared.w_down)
        for t in range(4):
            for j in range(2):
                e = ids[t, j]
                want[t] += weights[t, j] * swiglu(x[t], layer.routed.w_gate_up[e].T, layer.routed.w_down[e].T)
    assert relative_error(out, want) < 1e-5


def test_capacity_holds_when_every_token_picks_the_same_experts():
    model = MoEStack(SMALL.with_(shared_mode="plain"), CPU32)
    layer = model.layers[0]
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:2] = 1.0  # experts 0 and 1 win for every token with positive features
        residual = torch.rand(4, 32) + 0.1
        out = model(residual)
        x = layer.norm(residual)
        both = sum(0.5 * swiglu(x, layer.routed.w_gate_up[e].T, layer.routed.w_down[e].T) for e in (0, 1))
        want = residual + both + swiglu(x, layer.shared.w_gate_up, layer.shared.w_down)
    assert relative_error(out, want) < 1e-5


def test_eager_output_is_the_same_for_every_shared_mode_order_and_dispose():
    residual = torch.randn(4, 32)
    outs = []
    with torch.no_grad():
        for mode, order, dispose in [("plain", "shared_first", "never"), ("static_buffer", "routed_first", "always"),
                                     ("raw_kernel", "routed_first", "always")]:
            outs.append(MoEStack(SMALL.with_(shared_mode=mode, order=order, dispose=dispose), CPU32)(residual))
    assert all(relative_error(o, outs[0]) < 1e-6 for o in outs[1:])


def test_the_options_that_act_only_under_capture_leave_eager_output_alone():
    residual = torch.randn(4, 32)
    with torch.no_grad():
        base = MoEStack(SMALL, CPU32)(residual)
        for changes in (dict(dispose_kind="set_scalar"), dict(dispose_kind="resize_storage"),
                        dict(alt_delay_us=50.0, record_stream=True), dict(capture_mode="relaxed")):
            assert relative_error(MoEStack(SMALL.with_(**changes), CPU32)(residual), base) < 1e-6


@pytest.mark.parametrize("kind, shape, numel, null", [
    ("set_empty", (0,), 0, True), ("set_scalar", (), 1, False), ("resize_storage", (4, 8), 32, True)])
def test_each_dispose_kind_leaves_what_the_simulator_models(kind, shape, numel, null):
    x = torch.randn(4, 8)
    dispose_tensor(x, kind)
    assert tuple(x.shape) == shape and x.numel() == numel and (x.data_ptr() == 0) is null


def test_the_cli_flags_build_the_new_options():
    args = build_parser().parse_args(["run", "--dispose-kind", "resize_storage", "--capture-mode", "relaxed",
                                      "--alt-delay-us", "20", "--record-stream", "--replays", "200"])
    assert _config(args) == MoEConfig(dispose_kind="resize_storage", capture_mode="relaxed", alt_delay_us=20.0,
                                      record_stream=True, replays=200)


def test_wrong_replays_count_errors_above_tolerance_nan_and_faults():
    from gpu_demo.lab.moe.harness import CaseResult, count_wrong

    assert count_wrong([0.0, 0.5, float("nan"), None], 1e-2) == 3
    assert count_wrong([], 1e-2) is None
    old = {"config": SMALL.to_dict(), "outcome": "correct", "errors": [0.0], "tolerance": 1e-2}
    assert CaseResult(**old).wrong_replays is None       # a case recorded before the field existed


def test_dry_capture_shows_the_stale_shared_buffer_on_the_cpu():
    residual = torch.randn(4, 32)
    errors = {}
    with torch.no_grad():
        for order in ("shared_first", "routed_first"):
            config = SMALL.with_(order=order)
            model, reference = MoEStack(config, CPU32), MoEStack(config, CPU32)
            model(torch.randn(4, 32))  # warm-up on another input fills the static buffer
            with dry_capture():
                errors[order] = relative_error(model(residual), reference(residual.clone()))
    assert errors["shared_first"] == 0.0
    assert errors["routed_first"] > 0.1
