"""The one verdict: replays beside findings, for simulated replays and for replays on a GPU."""

from __future__ import annotations

import pytest

from simlib.checker.rules import CROSS_STREAM_RACE, HOST_MUTATION
from simlib.checker.verdict import races, verdict
from simlib.glossary import CORRECT, GRAPH_EAGER_DIFFER, ILLEGAL_ADDRESS, SILENT_WRONG, UNORDERED

RACE = CROSS_STREAM_RACE.finding(3, "buf", (), "why", "fix")
ERROR = HOST_MUTATION.finding(1, "x", (), "why", "fix")


@pytest.mark.parametrize("outcome, findings, simulated, on_gpu", [
    (CORRECT, [], CORRECT, CORRECT),
    (CORRECT, [RACE], UNORDERED, UNORDERED),
    (SILENT_WRONG, [RACE], UNORDERED, SILENT_WRONG),          # simulated: one schedule of the race; a GPU's: it bit
    (CORRECT, [RACE, ERROR], CORRECT, UNORDERED),             # an error decides the simulation; a race marks a pass
    (SILENT_WRONG, [], SILENT_WRONG, GRAPH_EAGER_DIFFER),     # eager is the oracle here; the user's reference there
    (SILENT_WRONG, [ERROR], SILENT_WRONG, SILENT_WRONG),
    (ILLEGAL_ADDRESS, [RACE], ILLEGAL_ADDRESS, ILLEGAL_ADDRESS),
])
def test_the_verdict_of_simulated_replays_and_of_replays_on_a_gpu(outcome, findings, simulated, on_gpu):
    assert verdict(outcome, findings) == simulated
    assert verdict(outcome, findings, on_gpu=True) == on_gpu


def test_races_are_the_warnings():
    assert races([ERROR, RACE]) == [RACE]
