"""The checker's one table of rules: numbers, codes and severities as the findings carry them,
and the modes that can fire each, as the guard's manual (docs/guard.md) says."""

from __future__ import annotations

import re
from pathlib import Path

from simlib.checker import ERROR, WARNING
from simlib.checker.rules import DRY_RUN, GPU, PROCESS, RANKS, RULES

GUARD_MANUAL = (Path(__file__).resolve().parents[3] / "docs" / "guard.md").read_text()


def test_rules_are_numbered_0_to_18_and_only_the_races_and_a_changed_host_state_are_warnings():
    assert sorted(r.number for r in RULES.values()) == list(range(19))
    assert {r.code for r in RULES.values() if r.severity == WARNING} == {
        "cross_stream_race", "reuse_after_free", "host_state_branch"}
    assert all(r.severity in (ERROR, WARNING) for r in RULES.values())
    assert str(RULES["frozen_state"]) == "rule 7 (frozen_state)"


def test_a_rule_makes_its_findings():
    f = RULES["stale_input"].finding(3, "x", (0x10,), "why", "fix")
    assert (f.rule, f.code, f.severity, f.step, f.label, f.pointers) == (5, "stale_input", ERROR, 3, "x", (0x10,))


def test_the_modes_are_the_manuals_table():
    table = GUARD_MANUAL.split("Which rules each mode can fire", 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    seen = set()
    for first, *cells in rows:
        fires = {mode for mode, cell in zip((GPU, DRY_RUN, PROCESS), cells) if not cell.strip().startswith("no")}
        for number, code in re.findall(r"(\d+) `(\w+)`", first):
            assert RULES[code].number == int(number) and RULES[code].modes == fires, code
            seen.add(code)
    assert seen == set(RULES) - {"collective_mismatch"}            # rule 12 compares ranks
    assert RULES["collective_mismatch"].modes == {RANKS}
