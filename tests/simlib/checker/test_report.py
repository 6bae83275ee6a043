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
