"""The simulator against the real H200: outcomes agree, timing is calibrated and predicts."""

import json
from pathlib import Path

import pytest
from open_on_h200 import OPEN, WRONG_TRUTH

from gpu_demo.lab.measure import conformance, prediction
from simlib.engine.profiles import H200
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, UNORDERED
from simlib.programs.spec import MATRIX, MoEConfig

RESULTS = Path(__file__).resolve().parents[4] / "gpu_demo" / "lab" / "results"


@pytest.fixture(scope="module")
def rows():
    return conformance.rows()


def test_every_scenario_the_gpu_ran_is_a_matrix_row(rows):
    names = [c.name for c in MATRIX]
    assert [r.name for r in rows] == [n for n in names if n in {r.name for r in rows}]
    assert len(rows) >= 16


def test_every_simulator_prediction_agrees_with_the_h200(rows):
    disagreements = [r for r in rows if not r.agree]
    assert not disagreements, conformance.format_table(disagreements)


def test_the_measured_table_of_the_design_is_predicted_exactly(rows):
    by_name = {r.name: r for r in rows}
    assert by_name["routed_first/plain/always"].predicted.outcome == "capture_error:shape_mismatch"
    assert by_name["routed_first/static_buffer/always"].predicted.outcome == "silent_wrong"
    assert by_name["routed_first/raw_kernel/always"].predicted.outcome == "illegal_address"


def test_a_race_predicts_the_outcomes_of_its_schedules_each_with_a_witness(rows):
    racy = [r for r in rows if r.predicted.outcome == UNORDERED]
    assert racy and all(any("rule 4" in x or "rule 3" in x for x in r.predicted.rules) for r in racy)
    for r in racy:
        assert r.predicted.outcomes == {CORRECT, SILENT_WRONG}
        timed = r.predicted.simulated
        other = ({CORRECT, SILENT_WRONG} - {timed}).pop()
        assert r.predicted.schedules.startswith(f"{timed} as timed; {other} if ")
        assert r.gpu == timed   # the H200 ran each race the way the calibrated profile times it
    delays = {r.name: r.predicted.simulated for r in racy if "alt_delay" in r.name}
    assert delays["shared_first/static_buffer/always/alt_delay=100us/replays=200"] == SILENT_WRONG


@pytest.mark.parametrize("predicted, observed, agree", [
    ({CORRECT}, CORRECT, True), ({CORRECT}, SILENT_WRONG, False),
    ({CORRECT, SILENT_WRONG}, SILENT_WRONG, True), ({CORRECT, SILENT_WRONG}, ILLEGAL_ADDRESS, False),
    ({UNORDERED}, CORRECT, False), ({UNORDERED}, SILENT_WRONG, False),   # a word agrees with nothing
])
def test_agreement_is_membership_in_the_predicted_set(predicted, observed, agree):
    assert conformance.agrees(frozenset(predicted), observed) is agree


def write_results(path: Path, cases: list[tuple[MoEConfig, str, list]]) -> Path:
    path.write_text(json.dumps({"cases": [
        {"name": c.name, "config": c.to_dict(), "outcome": o, "errors": e, "tolerance": 1e-2}
        for c, o, e in cases]}))
    return path


NEW_ROWS = {  # what the simulator says the H200 will show for the rows issue 12 added
    "shared_first/static_buffer/always/fault=missing_fork": "capture_error:cudaErrorStreamCaptureUnsupported",
    "shared_first/static_buffer/always/fault=missing_fork/mode=thread_local":
        "capture_error:cudaErrorStreamCaptureUnsupported",
    "shared_first/static_buffer/always/fault=missing_fork/mode=relaxed":
        "capture_error:cudaErrorStreamCaptureIsolation",
    "routed_first/plain/always/resize_storage": "capture_error:storage_not_allocated",
    "routed_first/static_buffer/always/resize_storage": "capture_error:storage_not_allocated",
    "routed_first/raw_kernel/always/resize_storage": ILLEGAL_ADDRESS,
    "routed_first/plain/always/set_scalar": "capture_error:shape_mismatch",
    "routed_first/raw_kernel/always/set_scalar": SILENT_WRONG,
    "shared_first/static_buffer/always/record_stream/alt_delay=100us/replays=200": CORRECT,
}


@pytest.mark.parametrize("name", NEW_ROWS)
def test_the_new_rows_predict_one_outcome(name):
    config = next(c for c in MATRIX if c.name == name)
    assert conformance.predict(config).outcomes == {NEW_ROWS[name]}


def test_the_delay_rows_are_races_whose_timed_schedule_moves(tmp_path):
    delays = [c for c in MATRIX if c.replays == 200 and not c.record_stream]
    timed = {c.alt_delay_us: conformance.predict(c) for c in delays}
    assert sorted(timed) == [0.0, 20.0, 100.0]
    assert all(p.outcomes == {CORRECT, SILENT_WRONG} for p in timed.values())
    assert [timed[d].simulated for d in (0.0, 20.0, 100.0)] == [CORRECT, CORRECT, SILENT_WRONG]


def test_a_race_row_shows_how_many_gpu_replays_were_wrong(tmp_path):
    race = next(c for c in MATRIX if c.alt_delay_us == 100.0 and not c.record_stream)
    fixed = next(c for c in MATRIX if c.record_stream)
    path = write_results(tmp_path / "m.json", [(race, SILENT_WRONG, [0.9] * 150 + [0.0] * 50),
                                               (fixed, SILENT_WRONG, [0.9] * 200)])
    table = conformance.rows(path)
    assert [r.agree for r in table] == [True, False]        # the fix must be right on the GPU too
    assert table[0].gpu_wrong == (150, 200)
    text = conformance.format_table(table)
    assert "silent_wrong (150 of 200 replays wrong)" in text and "1 of 2 scenarios agree" in text
    assert "agrees when the GPU's outcome is one of them" in text


def test_matrix_rows_the_gpu_has_not_run_are_left_out(tmp_path):
    path = write_results(tmp_path / "m.json", [(MATRIX[0], CORRECT, [0.0] * 3)])
    assert [r.name for r in conformance.rows(path)] == [MATRIX[0].name]


def test_a_missing_results_file_says_how_to_make_one(tmp_path):
    with pytest.raises(ValueError, match="gpu_demo run --matrix"):
        conformance.rows(tmp_path / "none.json")


def test_every_graph_configuration_is_predicted_within_15_percent():
    rows = prediction.predictions()
    graphs = [r for r in rows if r.variant != "eager"]
    assert len(graphs) >= 7
    misses = [r for r in graphs if not r.within_target]
    assert not misses, prediction.format_table(misses)


def test_each_miss_is_explained():
    rows = prediction.predictions()
    for r in rows:
        if not r.within_target:
            assert r.variant in prediction.MISSES
    assert "explained" not in prediction.format_table(rows)


def test_the_h200_profile_is_the_committed_calibration():
    cal = json.loads((RESULTS / "calibration-h200.json").read_text())
    bench = json.loads((RESULTS / "bench-h200.json").read_text())
    roles = {r: v["total_median_us"] for r, v in cal["kernel_roles"].items()}
    k = H200.kernel_us
    assert (k["norm"], k["gate"], k["topk"], k["permute"], k["combine"], k["merge"]) == (
        roles["norm"], roles["gate"], roles["topk"], roles["permute"], roles["combine"], roles["merge"])
    assert 3 * k["experts.gate_up"] == pytest.approx(roles["routed_experts"])
    assert 3 * k["shared"] == pytest.approx(roles["shared_expert"])
    assert H200.graph_node_gap_us == cal["same_stream_gap_us"]["median"]
    assert H200.graph_launch_us == cal["graph_launch_host_us"]
    assert H200.launch_host_us == cal["eager_op_launch_host_us"]
    assert cal["cross_stream_join_gap_us"]["median"] <= H200.graph_node_gap_us   # why the join costs 0 extra
    floor = bench["diagnostics"]["floor_one_kernel"]
    assert H200.launch_latency_us == pytest.approx(bench["latency"]["floor_one_kernel"]["median_us"]
                                                    - floor["kernel_time_us"])
    second = [max(d["first_kernel_start_by_stream_us"].values()) for name, d in
              bench["diagnostics"].items() if name.startswith("graph_dual")]
    assert H200.graph_branch_launch_us == pytest.approx(sum(second) / len(second), abs=0.01)


# ----------------------------------------------------------------- the incident gallery
def corpus_results(path: Path, truths: dict[str, str | None]) -> Path:
    path.write_text(json.dumps({"provenance": {"gpu": "NVIDIA H200"}, "programs": [
        {"name": name, "truth": {"outcome": outcome}, "guard": None} for name, outcome in truths.items()]}))
    return path


def test_every_gallery_program_has_a_row_hazard_then_fix():
    from simlib.programs.gallery import CASES

    names = [r.name for r in conformance.gallery_rows()]
    assert names == [n for c in CASES.values() for n in (c.name, c.fix)]
    assert len(CASES) >= 6


def test_a_gallery_row_agrees_only_when_the_h200_truth_is_in_the_simulated_set(tmp_path):
    path = corpus_results(tmp_path / "corpus.json", {"host_scalar_frozen": SILENT_WRONG,
                                                     "fix_host_scalar_in_tensor": SILENT_WRONG,
                                                     "buffer_rebound": None})
    by_name = {r.name: r for r in conformance.gallery_rows(path)}
    assert by_name["host_scalar_frozen"].agree is True
    assert by_name["fix_host_scalar_in_tensor"].agree is False          # the fix is predicted correct
    assert by_name["buffer_rebound"].agree is None and by_name["buffer_rebound"].shown.startswith("no result")
    missing = by_name["lazy_cache_in_capture"]
    assert missing.agree is None and missing.shown == "not yet run on the H200"
    table = conformance.format_gallery_table(list(by_name.values()))
    assert "| fix_host_scalar_in_tensor | correct | silent_wrong | NO |" in table
    programs = len(by_name)
    assert f"\n1 of {programs} gallery programs agree" in table and f"{programs - 2} with no H200 result yet" in table


def test_without_corpus_results_no_gallery_program_counts_as_agreeing(tmp_path):
    table = conformance.format_gallery_table(conformance.gallery_rows(tmp_path / "absent.json"))
    from simlib.programs.gallery import CASES

    programs = 2 * len(CASES)
    assert f"\n0 of {programs} gallery programs agree" in table and table.count("| not run |") == programs


def test_every_gallery_twin_the_h200_ran_agrees_with_the_simulator():
    ran = [r for r in conformance.gallery_rows() if r.gpu is not None]
    disagreements = [r for r in ran if not r.agree and r.name not in WRONG_TRUTH]
    assert not disagreements, conformance.format_gallery_table(disagreements)


@pytest.mark.parametrize("row", [r for r in conformance.gallery_rows() if r.name in WRONG_TRUTH], ids=lambda r: r.name)
def test_a_gallery_twin_still_open_on_the_h200_disagrees_until_a_rerun_fixes_it(row):
    # the committed run contradicts the simulator for these (tests/support/open_on_h200.py); once a
    # rerun agrees, this fails until the entry is removed there
    assert row.gpu is not None and not row.agree, f"{row.name} agrees now: remove it from OPEN ({OPEN[row.name]})"


def test_every_gallery_program_has_its_pytorch_twin_in_the_corpus():
    from gpu_demo.lab import corpus
    from simlib.programs.gallery import CASES

    names = [n for c in CASES.values() for n in (c.name, c.fix)]
    assert [n for n in names if n not in corpus.PROGRAMS] == []
    assert all(corpus.load(n).EXPECTED == ("hazardous" if i % 2 == 0 else "safe") for i, n in enumerate(names))


# ----------------------------------------------------------------- a GPU seat's own runs
def test_a_seats_matrix_whose_outcome_no_schedule_gives_disagrees(tmp_path, capsys):
    pytest.importorskip("torch")   # the lab's command line imports it
    from gpu_demo.lab.cli.main import fidelity, main

    seat = json.loads((RESULTS / "matrix-h200.json").read_text())
    seat["provenance"]["gpu"] = "NVIDIA A100-SXM4-80GB"
    case = next(c for c in seat["cases"] if c["name"] == "routed_first/raw_kernel/always")
    case["outcome"] = CORRECT   # the simulator says every replay faults: no schedule is correct
    file = tmp_path / "matrix-seat.json"
    file.write_text(json.dumps(seat))
    text, agree = fidelity(matrix=file)
    assert not agree
    assert "| scenario | simulator predicts | A100-SXM4-80GB showed | agree | checker |" in text
    assert "| routed_first/raw_kernel/always | illegal_address | correct | NO |" in text
    assert "| configuration | simulated (H200 profile)" not in text   # that latency is the committed H200 bench's
    assert main(["fidelity", "--matrix", str(file)]) == 1
    assert "34 of 35 scenarios agree" in capsys.readouterr().out


def test_a_seats_corpus_names_its_card_and_agrees(capsys):
    pytest.importorskip("torch")
    from gpu_demo.lab.cli.main import main

    rerun = RESULTS / "reruns" / "2026-12-07-e9d6563-h100" / "corpus-e9d6563.json"
    assert main(["fidelity", "--corpus", str(rerun)]) == 0
    out = capsys.readouterr().out
    assert "| gallery program | simulator predicts | H100 80GB HBM3 showed | agree | checker |" in out
    assert "agree with their PyTorch twin's H100 80GB HBM3 run; 0 with no H100 80GB HBM3 result yet" in out


@pytest.mark.parametrize("flag, content, said", [
    ("--matrix", None, "no such file"),
    ("--matrix", "[1, 2]", "cannot read GPU outcomes from"),
    ("--matrix", '{"cases": [{"config": {"nope": 1}, "outcome": "correct"}]}', "unknown option"),
    ("--corpus", '{"cases": []}', "cannot read corpus results from"),
])
def test_a_file_that_is_not_such_results_is_refused_in_one_line(tmp_path, capsys, flag, content, said):
    pytest.importorskip("torch")
    from gpu_demo.lab.cli.main import main

    file = tmp_path / "x.json"
    if content is not None:
        file.write_text(content)
    assert main(["fidelity", flag, str(file)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("fidelity: ") and said in line


def test_the_committed_results_alone_compare_the_replay_latency_too():
    pytest.importorskip("torch")
    from gpu_demo.lab.cli.main import fidelity

    text, agree = fidelity()
    assert agree and "| configuration | simulated (H200 profile) µs | measured on H200 µs | error |" in text
