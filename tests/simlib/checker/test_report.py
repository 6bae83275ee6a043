"""What the checker reports: one block per finding, findings as frozen plain data."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError

import pytest
from checker_stories import scenario_findings

from simlib.checker import format_report
from simlib.programs.spec import MoEConfig


def test_report_has_one_block_per_finding_with_hex_pointers():
    findings = scenario_findings(MoEConfig(order="routed_first", shared_mode="raw_kernel"))
    report = format_report(findings)
    blocks = report.split("\n\n")
    assert len(blocks) == len(findings) + 1 and blocks[-1] == "2 errors, 0 warnings."
    assert blocks[0].startswith("ERROR rule 1 (host_mutation) at step")
    assert "0x0" in blocks[0] and "why:" in blocks[0] and "fix:" in blocks[0]
    assert format_report([]) == "No capture hazards found."


def test_findings_are_frozen_plain_data():
    finding = scenario_findings(MoEConfig())[0]
    with pytest.raises(FrozenInstanceError):
        finding.rule = 3
    data = json.loads(json.dumps(finding.to_dict()))
    assert data["rule"] == 1 and data["code"] == "host_mutation" and data["severity"] == "error"
    assert data["pointers"] == [hex(p) for p in finding.pointers]


def test_the_site_book_names_a_captured_line_long_after_eager_lines_were_trimmed():
    from simlib.checker.findings import ERROR, Finding
    from simlib.checker.sites import NEAR, SiteBook
    from simlib.trace import Capture, Launch

    def launch(step, site):
        return Launch(step, 0.0, 1, "aten.mm", "mm", "", "main", (), None, site=site)

    book = SiteBook(window=2)
    book.add([Capture(1, 0.0, "begin", 0, "main"), launch(2, "model.py:10"), Capture(3, 0.0, "end", 0, "main")])
    book.add([launch(step, f"serve.py:{step}") for step in range(4, 20)])
    finding = Finding(11, "graphs_clobber", ERROR, 2, "t", (), "why", "fix")
    free = Finding(10, "freed_under_graph", ERROR, 19, "t", (), "why", "fix")
    # the capture's line stays; the eager window keeps only the newest lines; a step without a line of
    # its own is placed near the last line before it
    assert [f.site for f in book.located([finding, free])] == ["model.py:10", "serve.py:19"]
    assert book.site_at(5) == NEAR + "model.py:10" and book.site_at(0) == ""
    assert book.site_at(25) == NEAR + "serve.py:19"


def test_the_site_book_keeps_a_servers_lines_in_about_16_bytes_a_record():
    # A server's served steps come from a few lines, each line a new string every time (the recorder
    # formats it per record): the book keeps one copy of each, and steps as 8-byte ints.
    import tracemalloc

    from simlib.checker.sites import SiteBook
    from simlib.trace import Replay

    book = SiteBook(window=100_000)
    book.add([Replay(0, 0.0, 0, 0, "main", site="serve.py:1")])
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    book.add([Replay(step, 0.0, 0, step, "main", site=f"serve.py:{step % 3 + 1}") for step in range(1, 50_001)])
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown / 50_000 < 24, grown
