"""The checker on the simulated MoE step: every fix is clean, and what the replays hide it still sees."""

from __future__ import annotations

import pytest
from checker_stories import scenario_findings, severities

from simlib.checker import ERROR, check
from simlib.programs import scenarios
from simlib.programs.spec import MATRIX, MoEConfig
from simlib.trace import Trace


def _name(config: MoEConfig) -> str:
    return config.name


FIXES = [c for c in MATRIX if c.dispose != "always" or c.clone]


assert len(FIXES) == 8


@pytest.mark.parametrize("config", FIXES, ids=_name)
def test_every_fix_is_clean(config):
    assert scenario_findings(config) == []


def test_shared_first_static_buffer_has_no_errors():
    assert [f for f in scenario_findings(MoEConfig(order="shared_first")) if f.severity == ERROR] == []


def test_the_checker_sees_the_bug_that_replaying_the_eager_input_hides():
    config = MoEConfig(order="routed_first", inputs="same_as_eager")
    assert scenarios.run(config).outcome == "correct"
    assert severities(scenario_findings(config)) == [(1, ERROR), (2, ERROR), (7, ERROR)]


def test_every_layer_is_checked():
    findings = scenario_findings(MoEConfig(layers=3))
    assert sorted(f.label for f in findings) == sorted(
        [f"L{i}.x" for i in range(3) for _ in (1, 2)] + [f"L{i}.shared_out" for i in range(3)])


@pytest.mark.parametrize("config", [MoEConfig(), MoEConfig(order="shared_first", shared_mode="plain",
                                                           inputs="stale")], ids=_name)
def test_a_trace_round_tripped_through_json_gives_identical_findings(config):
    trace = scenarios.run(config).trace
    findings = check(trace)
    assert findings and check(Trace.from_json(trace.to_json())) == findings
