"""The host cost of an eager forward per op kind: profiler events in, costs out (no GPU)."""

from __future__ import annotations

import pytest

from gpu_demo.lab.measure.host_costs import FORWARD, MODULE, OpSample, ProfiledForward, forwards, kind_of, summarize
from gpu_demo.lab.measure.profiling import read_chrome_trace


def op(name, ts, dur):
    return {"cat": "cpu_op", "name": name, "ts": ts, "dur": dur}


def annotation(name, ts, dur):
    return {"cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def launch(correlation, ts, dur, name="cudaLaunchKernel"):
    return {"cat": "cuda_runtime", "name": name, "ts": ts, "dur": dur, "args": {"correlation": correlation}}


def kernel(correlation, dur):
    return {"cat": "kernel", "name": f"k{correlation}", "ts": 1000 + correlation, "dur": dur,
            "args": {"stream": 7, "correlation": correlation}}


def one_forward(t0, first_correlation):
    """A forward: two module calls, a norm (one launch, inside a nested op), a view,
    a linear with two launches and a runtime call that launches nothing."""
    c = first_correlation
    return [
        annotation(FORWARD, t0, 100),
        annotation(MODULE + "MoEStack", t0 + 1, 98), annotation(MODULE + "RMSNorm", t0 + 2, 18),
        annotation("norm", t0 + 3, 17),
        op("aten::rms_norm", t0 + 5, 10), op("aten::_fused_rms_norm", t0 + 6, 8), launch(c, t0 + 8, 3),
        op("aten::view", t0 + 30, 2),
        launch(c + 9, t0 + 35, 1, name="cudaStreamIsCapturing"),
        op("aten::linear", t0 + 40, 20), op("aten::mm", t0 + 42, 15),
        launch(c + 1, t0 + 45, 4), launch(c + 2, t0 + 50, 4, name="cuLaunchKernel"),
        kernel(c, 2), kernel(c + 1, 5), kernel(c + 2, 6),
    ]


def test_a_forward_is_its_top_level_ops_with_their_launches_gaps_roles_and_module_calls():
    events = one_forward(0, 1) + one_forward(200, 11) + [op("aten::copy_", 150, 5)]
    first, second = forwards(read_chrome_trace({"traceEvents": events}))
    assert first.names == second.names == ("aten::rms_norm", "aten::view", "aten::linear")
    norm, view, linear = first.ops
    assert (norm.launch_us, norm.kernel_us, norm.dispatch_us, norm.kind) == ((3.0,), (2.0,), 7.0, "reduction")
    assert (norm.gap_before_us, norm.module_calls, norm.role) == (5.0, 2, "norm")
    assert (view.gap_before_us, view.module_calls, view.role, view.kind) == (15.0, 0, "", "view")
    assert linear.kernel_us == (5.0, 6.0) and linear.dispatch_us == 12.0 and linear.kind == "matmul"
    assert first.span_us == 100 and first.module_calls == 2
    assert first.outside_ops_us == 100 - 10 - 2 - 20


@pytest.mark.parametrize("name, launches, kind", [
    ("aten::bmm", 1, "matmul"), ("aten::index_copy_", 1, "indexing"), ("aten::topk", 2, "reduction"),
    ("aten::reshape", 0, "view"), ("aten::mul", 1, "elementwise"), ("aten::to", 1, "elementwise"),
    ("aten::to", 0, "host_only"), ("aten::set_", 0, "host_only"),
])
def test_op_kinds(name, launches, kind):
    assert kind_of(name, launches) == kind


def sample(name, dur, gap, *, launches=(), kernels=(), modules=0, role=""):
    return OpSample(name, role, dur, gap, modules, tuple(launches), tuple(kernels))


def forward(span, *ops, modules=0):
    return ProfiledForward(tuple(ops), span, modules)


def test_costs_are_medians_per_kind_scaled_to_the_unprofiled_forward():
    profiled = [
        forward(200, sample("aten::add", 20, 10, launches=[4], kernels=[1]),
                sample("aten::mul", 30, 20, launches=[6], kernels=[1]), sample("aten::view", 4, 10)),
        forward(200, sample("aten::add", 40, 10, launches=[8], kernels=[1]),
                sample("aten::mul", 10, 30, launches=[4], kernels=[1]), sample("aten::view", 8, 10)),
        forward(300, sample("aten::bmm", 50, 10)),               # another sequence: left out
    ]
    annotated = [forward(0, sample("aten::add", 0, 0, modules=3, role="merge"), sample("aten::mul", 0, 0),
                         sample("aten::view", 0, 0, modules=1), modules=4)]
    costs = summarize(profiled, annotated, unprofiled_host_us=100.0)
    assert costs["forwards_used"] == 2 and costs["profiled_forward_us"] == 200 and costs["profiler_scale"] == 0.5
    assert costs["ops_per_forward"] == 3 and costs["launches_per_forward"] == 2
    elementwise = costs["kinds"]["elementwise"]
    # dispatch = op minus its launch calls; median per op over the forwards (add: 16, 32 -> 24;
    # mul: 24, 6 -> 15), mean over the kind's ops (19.5), scaled by 0.5
    assert elementwise == {"ops": 2, "launches": 2, "dispatch_us": 9.75, "aten_ops": ["aten::add", "aten::mul"]}
    assert costs["kinds"]["view"]["dispatch_us"] == 3.0
    assert costs["launch_us"] == 0.5 * (6 + 5) / 2       # launch calls per op: add 4, 8 -> 6; mul 6, 4 -> 5
    python = costs["python"]
    assert python["per_op_us"] == 0.5 * 10
    assert python["outside_ops_us"] == 0.5 * (200 - 56)
    assert costs["module_calls_per_forward"] == 4
    assert python["per_module_call_us"] == pytest.approx((python["outside_ops_us"] - 3 * 5.0) / 4)
    first = costs["ops"][0]
    assert (first["name"], first["kind"], first["role"], first["module_calls"]) == ("aten::add", "elementwise",
                                                                                    "merge", 3)
    assert first["kernel_us"] == [1.0] and first["profiled_dispatch_us"] == 24.0


def test_annotated_forwards_that_issue_other_ops_are_refused():
    profiled = [forward(10, sample("aten::add", 5, 1))]
    with pytest.raises(ValueError, match="other aten ops"):
        summarize(profiled, [forward(10, sample("aten::mul", 5, 1))], 5.0)


def test_a_profile_without_forwards_says_how_to_mark_them():
    with pytest.raises(ValueError, match=FORWARD):
        summarize([], [], 5.0)


def test_the_real_module_profiled_on_the_cpu():
    from gpu_demo.lab.measure.host_costs import run_host_costs
    from gpu_demo.lab.moe.settings import RunSettings
    from simlib.programs.spec import MoEConfig

    config = MoEConfig(tokens=4, hidden=64, intermediate=128, experts=4, top_k=2)
    costs = run_host_costs(config, RunSettings(device="cpu", dtype="float32"), profiled=3, timed=5)
    names = [o["name"] for o in costs["ops"]]
    assert names.count("aten::linear") == 3 and names.count("aten::bmm") == 2   # shared x2, gate; experts x2
    assert names[0] == "aten::rms_norm" and "aten::set_" in names                  # the norm; dispose_tensor
    # MoEStack, DualStreamMoELayer, RMSNorm, SharedExpert, Router, RoutedExperts
    assert costs["module_calls_per_forward"] == sum(o["module_calls"] for o in costs["ops"]) == 6
    assert {o["role"] for o in costs["ops"]} == {"norm", "shared_expert", "gate", "topk", "permute",
                                                 "routed_experts", "combine", "merge"}
    assert costs["launches_per_forward"] == 0 and costs["eager_latency"] is None   # a CPU launches no kernels
    assert costs["eager_host_us"]["samples"] == costs["eager_host_synced_us"]["samples"] == 5
    # Each kind's costs add up to its ops' profiled times, scaled by the one factor.
    for kind, k in costs["kinds"].items():
        profiled = sum(o["profiled_dispatch_us"] for o in costs["ops"] if o["kind"] == kind)
        assert k["ops"] * k["dispatch_us"] == pytest.approx(costs["profiler_scale"] * profiled, rel=1e-3, abs=0.01)
    assert sum(k["ops"] for k in costs["kinds"].values()) == costs["ops_per_forward"] == len(names)
    python = costs["python"]
    assert python["outside_ops_us"] == pytest.approx(
        costs["ops_per_forward"] * python["per_op_us"] + 6 * python["per_module_call_us"], abs=0.03)
