"""The headline comparison: its files, its table, and the optional GPU column."""

from __future__ import annotations

import json

import matplotlib
import pytest

matplotlib.use("Agg")

from simlib.programs.spec import ORDERS, SHARED_MODES, MoEConfig  # noqa: E402
from simlib.tutorial.headline import write_headline  # noqa: E402

DESIGN_TABLE = {  # docs/results.md's table, as measured on an H200
    ("plain", "shared_first"): "correct",
    ("plain", "routed_first"): "capture_error:shape_mismatch",
    ("static_buffer", "shared_first"): "correct",
    ("static_buffer", "routed_first"): "silent_wrong",
    ("raw_kernel", "shared_first"): "correct",
    ("raw_kernel", "routed_first"): "illegal_address",
}
# The simulator's verdicts: shared first replays correctly, but the checker finds a race.
VERDICTS = {cell: "unordered" if cell[1] == "shared_first" else outcome
            for cell, outcome in DESIGN_TABLE.items()}
RACE = "`unordered` (replays correct; checker: rule 4 (reuse_after_free) on 'x')"
PROVENANCE = {"gpu": "NVIDIA H200", "driver": "580.65", "torch": "2.11.0", "triton": "3.6.0",
              "date_utc": "2026-11-20T10:00:00+00:00", "command": "python -m gpu_demo run --matrix"}


def table_rows(markdown: str, *, raw: bool = False) -> list[list[str]]:
    """The table's cells; each cell's first word unless ``raw`` (the verdict without its note)."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells if raw else [[c if i < 2 or not c.startswith("`") else c.split()[0].strip("`")
                               for i, c in enumerate(row)] for row in cells]


def gpu_cases(outcomes: dict[tuple[str, str], str]) -> list[dict]:
    return [{"name": "x", "config": MoEConfig(shared_mode=m, order=o).to_dict(), "outcome": out}
            for (m, o), out in outcomes.items()]


def test_without_gpu_results_it_saves_the_picture_and_the_simulated_table(tmp_path):
    out = tmp_path / "out"
    text = write_headline(out, gpu_results=tmp_path / "absent.json")
    assert (out / "headline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = table_rows((out / "headline.md").read_text())
    assert rows[0] == ["shared expert consumes x", "issue order", "simulator"]
    assert {(m, o): outcome for m, o, outcome in rows[1:]} == VERDICTS
    raw = table_rows((out / "headline.md").read_text(), raw=True)
    assert [r[2] for r in raw[1:] if r[1] == "shared_first"] == [RACE] * 3
    assert "No GPU results are recorded yet" in text
    assert "routed_first/static_buffer/always: silent_wrong" in text
    assert "shared_first/static_buffer/always: unordered" in text
    assert "got:  x2 + routed(norm(x2)) + shared(norm(x1))" in text
    data = json.loads((out / "headline.json").read_text())
    assert [(h["verdict"], h["replays"]) for h in data["headline"]] == [
        ("unordered", "correct"), ("silent_wrong", "silent_wrong")]
    assert data["headline"][0]["races"] == ["rule 4 (reuse_after_free) on 'x'"]
    assert data["gpu_provenance"] is None and len(data["design_table"]) == 6
    assert {(r["shared_mode"], r["order"]): r["simulator"] for r in data["design_table"]} == VERDICTS


def test_the_printed_text_is_deterministic_and_free_of_addresses(tmp_path):
    first = write_headline(tmp_path, gpu_results=tmp_path / "absent.json")
    assert write_headline(tmp_path, gpu_results=tmp_path / "absent.json") == first
    assert "0x" not in first and "µs" not in first


def test_gpu_results_add_a_column_with_their_provenance(tmp_path):
    seen = dict(DESIGN_TABLE)
    del seen[("raw_kernel", "routed_first")]              # a case the GPU run did not record
    seen[("plain", "shared_first")] = "silent_wrong"      # and one it saw differently
    results = tmp_path / "matrix-h200.json"
    results.write_text(json.dumps({"provenance": PROVENANCE, "cases": gpu_cases(seen)}))
    text = write_headline(tmp_path / "out", gpu_results=results)
    rows = table_rows((tmp_path / "out" / "headline.md").read_text())
    assert rows[0][3] == "GPU (NVIDIA H200, driver 580.65, torch 2.11.0, triton 3.6.0, 2026-11-20)"
    by_cell = {(m, o): gpu for m, o, _, gpu in rows[1:]}
    assert by_cell[("plain", "shared_first")] == "silent_wrong"
    assert by_cell[("raw_kernel", "routed_first")] == "not run"
    assert by_cell[("static_buffer", "routed_first")] == "silent_wrong"
    assert "GPU column: matrix-h200.json (NVIDIA H200" in text
    assert json.loads((tmp_path / "out" / "headline.json").read_text())["gpu_provenance"]


def test_a_bare_list_of_cases_is_read_too(tmp_path):
    results = tmp_path / "matrix-h200.json"
    results.write_text(json.dumps(gpu_cases(DESIGN_TABLE)))
    write_headline(tmp_path / "out", gpu_results=results)
    rows = table_rows((tmp_path / "out" / "headline.md").read_text())
    assert rows[0][3] == "GPU (provenance not recorded)"
    assert [r[3] for r in rows[1:]] == [DESIGN_TABLE[m, o] for m in SHARED_MODES for o in ORDERS]


def test_gpu_cases_of_other_sizes_do_not_count_as_the_same_configuration(tmp_path):
    results = tmp_path / "matrix-h200.json"
    other = [{**c, "config": {**c["config"], "tokens": 64}} for c in gpu_cases(DESIGN_TABLE)]
    results.write_text(json.dumps({"provenance": PROVENANCE, "cases": other}))
    write_headline(tmp_path / "out", gpu_results=results)
    rows = table_rows((tmp_path / "out" / "headline.md").read_text())
    assert all(r[3] == "not run" for r in rows[1:])


@pytest.mark.parametrize("broken", ['{"cases": [{"config": {"order": "sideways"}, "outcome": "x"}]}'])
def test_a_malformed_gpu_file_is_an_error_not_a_silent_gap(tmp_path, broken):
    results = tmp_path / "matrix-h200.json"
    results.write_text(broken)
    with pytest.raises(ValueError, match="sideways"):
        write_headline(tmp_path / "out", gpu_results=results)
