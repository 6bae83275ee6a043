"""The checker's rules, one table: each rule's number, code, severity and the modes that can fire it.

Every other module, the checker's own rules included, takes a rule's code and
number from here (``HOST_MUTATION.code``, ``RULES``) and never spells them, so a
report, the lab, the gallery and the guard cannot name a rule two ways. What each
rule means is in the package's docstring (``simlib.checker``).

The modes are the guard's (docs/guard.md, "Which rules each mode can fire"): ``check_capture``
on a GPU, its dry run on a CPU, and the whole-process check (``capture_checked()``,
``CAPTURE_ORDER_CHECK=1``); rule 12 compares the traces of a job's ranks. A mode that
fires a rule only in part (the dry run sees a race only on streams an ``annotate``
mark names) counts as firing it; the manual says where. A simulated trace can fire
every rule, rule 5 (``stale_input``) included, which none of the guard's modes fires.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..trace import DataPtr
from .findings import ERROR, WARNING, Finding

GPU = "check_capture on a GPU"
DRY_RUN = "check_capture dry run (CPU)"
PROCESS = "whole-process check"
RANKS = "check_ranks over a job's ranks"
MODES = (GPU, DRY_RUN, PROCESS, RANKS)


@dataclass(frozen=True)
class Rule:
    """One rule of the checker: what a ``Finding`` of it says it is, and who can fire it."""

    number: int
    code: str
    severity: str
    modes: frozenset[str]

    def finding(self, step: int, label: str, pointers: tuple[DataPtr, ...], why: str, fix: str) -> Finding:
        """A finding of this rule (``Finding`` says what each field holds)."""
        return Finding(self.number, self.code, self.severity, step, label, pointers, why, fix)

    def __str__(self) -> str:
        return f"rule {self.number} ({self.code})"


_ALL = frozenset({GPU, DRY_RUN, PROCESS})

CAPTURE_FAILED = Rule(0, "capture_failed", ERROR, _ALL)
HOST_MUTATION = Rule(1, "host_mutation", ERROR, _ALL)
EMPTY_ARGUMENT = Rule(2, "empty_argument", ERROR, _ALL)
CROSS_STREAM_RACE = Rule(3, "cross_stream_race", WARNING, _ALL)
REUSE_AFTER_FREE = Rule(4, "reuse_after_free", WARNING, frozenset({GPU, PROCESS}))
STALE_INPUT = Rule(5, "stale_input", ERROR, frozenset())
EXTENT_EXCEEDS_STORAGE = Rule(6, "extent_exceeds_storage", ERROR, _ALL)
FROZEN_STATE = Rule(7, "frozen_state", ERROR, _ALL)
FROZEN_HOST_VALUE = Rule(8, "frozen_host_value", ERROR, _ALL)
INPUT_REBUILT = Rule(9, "input_rebuilt", ERROR, frozenset({GPU, PROCESS}))
FREED_UNDER_GRAPH = Rule(10, "freed_under_graph", ERROR, frozenset({GPU, PROCESS}))
GRAPHS_CLOBBER = Rule(11, "graphs_clobber", ERROR, frozenset({PROCESS}))
COLLECTIVE_MISMATCH = Rule(12, "collective_mismatch", ERROR, frozenset({RANKS}))
OUTPUT_OVERWRITTEN = Rule(13, "output_overwritten", ERROR, frozenset({PROCESS}))
WEIGHTS_REBOUND = Rule(14, "weights_rebound", ERROR, frozenset({PROCESS}))
VIEW_FROZEN = Rule(15, "view_frozen", ERROR, _ALL)
HOST_STATE_BRANCH = Rule(16, "host_state_branch", WARNING, _ALL)
UNREGISTERED_GENERATOR = Rule(17, "unregistered_generator", ERROR, _ALL)
INPUT_FRESH_BETWEEN_GRAPHS = Rule(18, "input_fresh_between_graphs", ERROR, frozenset({PROCESS}))

RULES: dict[str, Rule] = {r.code: r for r in (
    CAPTURE_FAILED, HOST_MUTATION, EMPTY_ARGUMENT, CROSS_STREAM_RACE, REUSE_AFTER_FREE, STALE_INPUT,
    EXTENT_EXCEEDS_STORAGE, FROZEN_STATE, FROZEN_HOST_VALUE, INPUT_REBUILT, FREED_UNDER_GRAPH,
    GRAPHS_CLOBBER, COLLECTIVE_MISMATCH, OUTPUT_OVERWRITTEN, WEIGHTS_REBOUND, VIEW_FROZEN, HOST_STATE_BRANCH,
    UNREGISTERED_GENERATOR, INPUT_FRESH_BETWEEN_GRAPHS)}
