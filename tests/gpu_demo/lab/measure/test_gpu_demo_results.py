"""The committed GPU results (gpu_demo/lab/results/*.json): schema, provenance, and what they show."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from simlib.glossary import CAPTURE_ERROR_PREFIX, CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, UNORDERED
from simlib.programs.spec import MATRIX, MoEConfig

RESULTS = Path(__file__).resolve().parents[4] / "gpu_demo" / "lab" / "results"
PROVENANCE = {"gpu", "driver", "cuda_runtime", "torch", "triton", "python", "date_utc", "command"}
ROLES = {"norm", "gate", "topk", "permute", "routed_experts", "combine", "shared_expert", "merge"}


def load(kind: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{kind}-h200.json").read_text())


def keys(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield k
            yield from keys(v)
    elif isinstance(data, list):
        for v in data:
            yield from keys(v)


def cases_by_name() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in load("matrix")["cases"]}


def in_vocabulary(outcome: str) -> bool:
    if outcome.startswith(CAPTURE_ERROR_PREFIX):
        return len(outcome) > len(CAPTURE_ERROR_PREFIX)
    return outcome in (CORRECT, SILENT_WRONG, ILLEGAL_ADDRESS, UNORDERED)


@pytest.mark.parametrize("kind", ["matrix", "bench", "decode", "calibration"])
def test_every_results_file_says_where_it_came_from(kind):
    data = load(kind)
    provenance = data["provenance"]
    assert set(provenance) == PROVENANCE
    assert "H200" in provenance["gpu"] and provenance["driver"] and provenance["triton"]
    command = {"matrix": "run --matrix", "calibration": "bench"}.get(kind, kind)
    assert provenance["command"].startswith(f"python -m gpu_demo {command}")
    assert datetime.datetime.fromisoformat(provenance["date_utc"]).tzinfo is not None
    assert not {"host", "hostname", "node", "machine"} & set(keys(data))


def test_the_matrix_has_matrix_configs_once_with_an_outcome_of_the_vocabulary():
    # Every recorded case is a MATRIX row (rows added since the run have no case yet).
    cases = load("matrix")["cases"]
    configs = [MoEConfig.from_dict(c["config"]) for c in cases]
    assert len(set(configs)) == len(configs) >= 16 and set(configs) <= set(MATRIX)
    for case, config in zip(cases, configs):
        assert case["name"] == config.name and in_vocabulary(case["outcome"])


def test_each_outcome_agrees_with_its_errors():
    for case in load("matrix")["cases"]:
        outcome, errors, tolerance = case["outcome"], case["errors"], case["tolerance"]
        if outcome == CORRECT:
            assert len(errors) == case["config"]["replays"] and max(errors) <= tolerance
        elif outcome == SILENT_WRONG:
            wrong = [e for e in errors if not e <= tolerance]   # NaN counts as wrong
            assert len(errors) == case["config"]["replays"] and wrong and not case["message"]
        elif outcome == ILLEGAL_ADDRESS:
            assert errors[-1] is None and "illegal memory access" in case["message"]
        else:
            assert errors == [] and case["message"] and case["raw_error"].startswith(case["message"])


@pytest.mark.parametrize("name, outcome", [
    ("shared_first/plain/always", CORRECT),
    ("shared_first/static_buffer/always", CORRECT),
    ("shared_first/raw_kernel/always", CORRECT),
    ("routed_first/plain/always", "capture_error:shape_mismatch"),
    ("routed_first/static_buffer/always", SILENT_WRONG),
    ("routed_first/raw_kernel/always", ILLEGAL_ADDRESS),
])
def test_the_h200_reproduced_the_measured_table(name, outcome):
    assert cases_by_name()[name]["outcome"] == outcome


def test_the_results_show_the_stale_buffer_trap():
    cases = cases_by_name()
    trapped = cases["routed_first/static_buffer/always/inputs=same_as_eager"]
    honest = cases["routed_first/static_buffer/always"]
    assert trapped["outcome"] == CORRECT and trapped["errors"] == [0.0, 0.0, 0.0]
    assert honest["outcome"] == SILENT_WRONG and min(honest["errors"]) > 0.1


def test_every_fix_of_the_incident_order_was_correct_on_the_h200():
    for name, case in cases_by_name().items():
        fixed = case["config"]["dispose"] != "always" or case["config"]["clone"]
        if case["config"]["order"] == "routed_first" and fixed:
            assert case["outcome"] == CORRECT, name


def test_the_benchmark_has_every_variant_with_enough_replays():
    bench = load("bench")
    latency = bench["latency"]
    for variant in ("eager", "graph_single_stream", "graph_dual_shared_first",
                    "graph_dual_routed_first_skip_in_capture", "shared_alone", "routed_alone"):
        assert latency[variant]["samples"] >= 200 and latency[variant]["median_us"] > 0
    assert latency["eager"]["median_us"] > latency["graph_single_stream"]["median_us"]
    overlap = bench["overlap"]
    assert set(overlap["efficiency"]) == {"graph_dual_shared_first", "graph_dual_routed_first_skip_in_capture"}
    assert overlap["ideal_dual_us"] < overlap["single_us"]


def test_the_pdl_residual_add_was_in_the_graph_and_correct():
    pdl, tolerance = load("bench")["pdl"], 1e-2
    for placement in ("main", "alt"):
        on = pdl[f"routed_on_{placement}_pdl_on"]
        assert on["pdl_kernel_in_graph"] and on["relative_error_vs_eager"] <= tolerance
        assert pdl[f"routed_on_{placement}_pdl_off"]["relative_error_vs_eager"] <= tolerance


def test_decoding_through_the_incident_graph_disagrees_with_eager_and_every_fix_agrees():
    cases = {c["name"]: c for c in load("decode")["cases"]}
    assert cases["routed_first/static_buffer/always"]["token_agreement"] < 0.5
    for name, case in cases.items():
        assert case["status"] == "decoded"
        if name != "routed_first/static_buffer/always":
            assert case["token_agreement"] == 1.0 and case["first_divergence_step"] is None, name


def test_the_calibration_has_every_role_and_the_gaps():
    calibration = load("calibration")
    assert set(calibration["kernel_roles"]) == ROLES
    assert all(role["total_median_us"] > 0 for role in calibration["kernel_roles"].values())
    for gap in ("same_stream_gap_us", "cross_stream_join_gap_us"):
        assert calibration[gap]["median"] >= 0
    assert calibration["graph_launch_host_us"] > 0 and calibration["eager_op_launch_host_us"] > 0


def recorded_trace(order):
    from simlib.trace import Trace

    return Trace.from_json((RESULTS / f"trace-{order}-h200.json").read_text())


def test_the_real_h200_captures_check_like_the_simulator_predicts():
    from simlib.checker import check

    routed_first = check(recorded_trace("routed_first"))
    assert {(f.rule, f.severity) for f in routed_first} == {(1, "error"), (2, "error")}
    shared_first = check(recorded_trace("shared_first"))
    assert {(f.rule, f.severity) for f in shared_first} == {(4, "warning")}


def test_the_real_shared_first_capture_reused_the_disposed_block():
    # The caching allocator handed x's block, freed by dispose_tensor during capture, to a
    # later main-stream tensor while the alt stream's shared expert reads x: the rule 4 race.
    from simlib.checker import check
    from simlib.trace import Free, Launch

    trace = recorded_trace("shared_first")
    assert trace.meta["provenance"]["gpu"] == "NVIDIA H200" and trace.meta["mode"] == "cuda"
    (race,) = [f for f in check(trace) if f.rule == 4]
    free = next(r for r in trace.of(Free) if r.step == race.step)
    assert free.graph is not None and free.label == "x"
    later = [(r.stream, a.label) for r in trace.of(Launch) if r.graph is not None and r.step > free.step
             for a in r.args if a.writes and a.ptr <= free.ptr < a.ptr + max(a.nbytes, 1)]
    readers = [r.stream for r in trace.of(Launch) if r.graph is not None and r.step < free.step
               for a in r.args if a.reads and a.ptr == free.ptr]
    assert later and readers
    assert {s for s, _ in later} != set(readers)     # written on one stream, read on another


def test_the_pdl_measurement_separates_pdl_from_fusing_the_adds():
    data = load("pdl")
    assert set(data["provenance"]) == PROVENANCE and "--pdl-only" in data["provenance"]["command"]
    pdl = data["pdl"]
    for placement in ("main", "alt"):
        off, fused, on = (pdl[f"routed_on_{placement}_pdl_{v}"] for v in ("off", "fused", "on"))
        assert max(v["relative_error_vs_eager"] for v in (off, fused, on)) <= 1e-2
        # The fused kernel launched the ordinary way keeps the ~0.26 us gap; PDL removes it.
        assert on["sink_start_minus_predecessor_end_us"] < 0.1 < fused["sink_start_minus_predecessor_end_us"]
        assert pdl[f"routed_on_{placement}_pdl_saves_us"] == pytest.approx(
            pdl[f"routed_on_{placement}_fusion_saves_us"] + pdl[f"routed_on_{placement}_pdl_alone_saves_us"],
            abs=2e-3)


def test_the_benchmarks_page_quotes_the_committed_recorder_overhead():
    """docs/benchmarks.md's overhead paragraph says what the committed run measured, target verdict included."""
    results = load("recorder-overhead")
    moe, plain = results["moe_stack"], results["plain_pytorch_stack"]
    readme = " ".join((RESULTS.parents[2] / "docs" / "benchmarks.md").read_text().split())
    assert f"took {moe['ratio']:.2f} times as long as the same warm-up and capture in a process that never" \
           f" records, and {plain['ratio']:.2f} times for 61 plain-PyTorch" in readme
    assert f"the ratios are {moe['ratio_same_process']:.1f} and {plain['ratio_same_process']:.1f}" in readme
    verdict = {(True, True): "Recording is not free, and it meets the 3x we aimed for.",
               (True, False): "Recording is not free. It meets the 3x we aimed for on the project's MoE stack "
                              "and misses it on plain PyTorch.",
               (False, True): "Recording is not free. It misses the 3x we aimed for on the project's MoE stack "
                              "and meets it on plain PyTorch.",
               (False, False): "Recording is not free, and it misses the 3x we aimed for."}
    assert verdict[moe["within_target"], plain["within_target"]] in readme, "docs/benchmarks.md's verdict on 3x is stale"
    assert moe["ops"] == 7324 and "7,324 ops a plain pass" in readme


def test_the_benchmarks_page_quotes_the_committed_cpp_observer_run():
    """The C++ observer figures docs/benchmarks.md sets beside the dispatch mode's are the committed run's."""
    results = load("cpp-observer")
    provenance = results["provenance"]
    assert set(provenance) == PROVENANCE and "H200" in provenance["gpu"]
    assert provenance["command"].startswith("python benchmarks/cpp_observer/measure.py")
    moe, plain = results["moe_stack"], results["plain_pytorch_stack"]
    for stack in (moe, plain):   # below Python there is room: the observer beats the empty mode
        assert 1 < stack["cpp_observer_ratio"] < stack["floor_ratio"]
        assert stack["observer_ops"] >= stack["observer_outermost_ops"] and stack["tensors_frozen"] > stack["ops"]
    readme = " ".join((RESULTS.parents[2] / "docs" / "benchmarks.md").read_text().split())
    assert (f"took {moe['cpp_observer_ratio']:.2f} times the untraced warm-up and capture of the MoE stack and "
            f"{plain['cpp_observer_ratio']:.2f} times for the plain-PyTorch one, where the empty dispatch mode "
            f"took {moe['floor_ratio']:.2f} and {plain['floor_ratio']:.2f}") in readme


def test_the_benchmarks_page_quotes_the_committed_start_up_overhead_of_the_whole_process_check():
    """The figure and the verdict on 2x docs/benchmarks.md gives the whole-process check's start-up are the
    committed run's: the median of its per-repeat ratios, its medians of each side."""
    import statistics

    results = load("process-startup-overhead")
    provenance = results["provenance"]
    assert set(provenance) - {"source"} == PROVENANCE and "H200" in provenance["gpu"]   # source: the code's digest
    assert provenance["command"].startswith("python benchmarks/process_startup_overhead.py")
    ratios = [c / u for u, c in zip(results["unchecked_s"], results["checked_s"])]
    assert results["ratios"] == pytest.approx(ratios) and results["ratio"] == pytest.approx(statistics.median(ratios))
    assert results["target"] == 2.0 and results["within_target"] == (results["ratio"] < results["target"])
    assert results["findings"] == 0 and results["checks"] == len(results["sizes"]) == 8
    readme = " ".join((RESULTS.parents[2] / "docs" / "benchmarks.md").read_text().split())
    verdict = "**within the target**" if results["within_target"] else "**over the target**"
    assert (f"it took {results['ratio']:.1f} times as long (median of {results['repeats']} repeats, each a fresh "
            f"pair of processes: {statistics.median(results['checked_s']):.2f} s against "
            f"{statistics.median(results['unchecked_s']):.2f} s): {verdict}") in readme
    assert f"checked against unchecked (on the H200: {results['ratio']:.1f}x" in readme


RACES = {"rule 3 (cross_stream_race)", "rule 4 (reuse_after_free)"}


def test_the_reruns_on_the_h200_reproduced_the_matrix_and_the_corpus_only_got_better():
    """The layout rerun (before the family's rules and the strided extents) and the family rerun
    (after) against the committed results: the matrix's 35 outcomes are the same, and every
    program of the earlier corpus kept its truth and lost no rule (a race's replays may go
    either way from run to run: its verdict is then unordered or silent_wrong, flagged by the race)."""
    committed_matrix = {json.dumps(c["config"], sort_keys=True): c["outcome"] for c in load("matrix")["cases"]}
    for rerun in ("2026-12-01-layout", "2026-12-01-family"):
        again = json.loads((RESULTS / "reruns" / rerun / "matrix-h200.json").read_text())
        assert again["provenance"]["gpu"] == "NVIDIA H200"
        assert {json.dumps(c["config"], sort_keys=True): c["outcome"] for c in again["cases"]} == committed_matrix
    earlier = json.loads((RESULTS / "reruns" / "2026-12-01-layout" / "corpus-h200.json").read_text())
    now = {p["name"]: p for p in load("corpus")["programs"]}
    for before in earlier["programs"]:
        after = now[before["name"]]
        rules_before, rules_after = set(before["guard"]["rules"]), set(after["guard"]["rules"])
        assert rules_before <= rules_after, (before["name"], rules_before, rules_after)
        if rules_before & RACES:
            assert after["guard"]["verdict"] in ("unordered", "silent_wrong"), before["name"]
        else:
            assert after["truth"]["outcome"] == before["truth"]["outcome"], before["name"]
            assert after["guard"]["verdict"] == before["guard"]["verdict"], before["name"]
