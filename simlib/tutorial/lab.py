"""Self-checks for the classroom exercises of ``notebooks/06-lab.ipynb``.

    from gpu_demo import results
    from simlib.tutorial.lab import H200, workbook
    lab = workbook(H200.read(results.path("matrix-h200"), results.path("bench-h200")))
    answer_2 = 0                   # the learner's prediction
    lab.check(2, answer_2)

``lab.check(number, answer)`` coaches as every ``simlib.tutorial.workbook.Workbook``
does: a placeholder prints "not answered yet", a wrong answer raises ``WrongAnswer``
with a hint and the section to read, a right one says why.

The reference answers are not a table: ``expected(number)`` runs the
simulator (or its checker) and reads the answer off the result, so the lab
follows ``simlib``. Only the explanations are text. Where a real H200 measured
the same thing, they quote it (``H200``: the results files the notebook names;
simlib imports neither torch nor gpu_demo).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Mapping

from ..checker import check as check_trace
from ..checker.rules import EMPTY_ARGUMENT, HOST_MUTATION, STALE_INPUT
from ..checker.verdict import races, verdict
from ..engine.timing import Profile
from ..engine.values import Call, Sym, terms
from ..glossary import CORRECT, OUTCOMES, UNORDERED, UNORDERED_MEANS, family
from ..programs.latency import replay_latency
from ..programs.scenarios import run
from ..programs.spec import ORDERS, SHARED_MODES, MoEConfig
from ..trace import Mutation
from .gpu_results import GpuResults, load_gpu_results
from .workbook import Exercise, Workbook, pointer_answer, record_answer, text_answer, whole_number, word_answer

# The glossary's outcome codes; a capture error is answered by its family, "capture_error".
OUTCOME_WORDS = tuple(family(code) for code in OUTCOMES)
FIXES = ("skip_in_capture", "own_buffer", "never", "clone")
SPEEDS = ("faster", "slower", "same")
SHARED_INPUTS = ("x1", "x2", "0")
INCIDENT = MoEConfig()   # routed first, static shared buffer, dispose always, fresh inputs
_NAMES = frozenset((*OUTCOME_WORDS, *FIXES, *SPEEDS, *SHARED_INPUTS, *ORDERS, *SHARED_MODES))

# Where each exercise's idea is explained: notebook and section title.
READ = {
    "order": "notebook 03-the-dispose-bug, sections 'The program' and 'Walk through it', and "
             "04-fixes-and-costs, section 'The checker reads the trace, not the results'",
    "freeze": "notebook 02-graph-capture, section 'A frozen argument is a value, not a reference'",
    "modes": "notebook 03-the-dispose-bug, section 'Three ways to consume the emptied `x`'",
    "silent": "notebook 03-the-dispose-bug, section 'What the replay computes'",
    "trap": "notebook 03-the-dispose-bug, section 'The stale-buffer trap'",
    "fixes": "notebook 04-fixes-and-costs, sections 'Four fixes' and 'What each fix costs'",
    "timing": "notebook 04-fixes-and-costs, section 'What each fix costs' (the reorder fix), and "
              "05-real-gpu, section '5. Where the speed-up came from (recorded)'",
    "report": "notebook 04-fixes-and-costs, section 'The checker reads the trace, not the results', and "
              "02-graph-capture, section 'Static inputs: the way in is `copy_`'",
}


@dataclass(frozen=True)
class H200:
    """What an H200 recorded that the explanations quote beside the simulator's answers:
    the matrix (``python -m gpu_demo run --matrix``) and the bench (``python -m gpu_demo bench``).
    ``None``: not recorded; the explanations then say only what the simulator says."""

    matrix: GpuResults | None = None
    bench: Mapping[str, Any] | None = None

    @classmethod
    def read(cls, matrix: Path, bench: Path) -> "H200":
        """The two results files, where the caller says they are (one that is absent: not recorded)."""
        return cls(load_gpu_results(matrix), json.loads(bench.read_text()) if bench.is_file() else None)

    def case(self, config: MoEConfig) -> dict[str, Any] | None:
        """The matrix's record of ``config``, or ``None``."""
        return self.matrix.cases.get(config) if self.matrix else None


# --------------------------------------------------------------------------- 1 order
@cache
def _order_verdicts() -> dict[str, tuple[str, str, tuple[Any, ...]]]:
    """Per order: its verdict, what its simulated replays did, and the checker's races."""
    out = {}
    for order in ORDERS:
        result = run(INCIDENT.with_(order=order))
        findings = check_trace(result.trace)
        out[order] = (verdict(result.outcome, findings), result.outcome, tuple(races(findings)))
    return out


def _solve_order() -> dict[str, str]:
    return {order: family(said) for order, (said, _, _) in _order_verdicts().items()}


def _right_order(expected: dict[str, str], h200: H200) -> str:
    lines = []
    for order, (said, replays, found) in _order_verdicts().items():
        case = h200.case(INCIDENT.with_(order=order))
        gpu = f" (the H200's replays: {case['outcome']})" if case else ""
        if said == UNORDERED:
            race = found[0]
            lines.append(
                f"  {order}: {said} ({UNORDERED_MEANS}). Its replays are {replays}"
                f"{gpu}, but the checker's rule {race.rule} ({race.code}) finds that dispose_tensor "
                f"freed {race.label}'s block during the capture and the graph's pool handed it to a "
                "routed-expert buffer; nothing orders that write after the shared expert's read on "
                "the other stream.")
        elif said == CORRECT:
            lines.append(f"  {order}: {said}: every replay matched eager and the checker is clean{gpu}.")
        else:
            lines.append(f"  {order}: {said}: the shared expert's launches came after "
                         f"dispose_tensor(x) emptied x on the host, so they saw an empty x and "
                         f"launched nothing: the graph has no node for them{gpu}.")
    return ("Neither order is safe.\n" + "\n".join(lines) + "\nIssuing the shared expert first "
            "fixes what the capture freezes, not the order on the device: the fixes of notebook 04 "
            "that keep x alive (skip the dispose in capture, dispose only the own buffer) are correct.")


def _wrong_order(given: dict[str, str], expected: dict[str, str]) -> str:
    off = [o for o in ORDERS if given[o] != expected[o]]
    hints = {
        "shared_first": "shared_first: its replays come out right, in the simulator and on the H200. "
                        "But dispose_tensor(x) still frees x's block during the capture. Who gets that "
                        "block next, on which stream, and does any edge order it after the shared "
                        "expert's read?",
        "routed_first": "routed_first: find the host statement that changes x (dispose_tensor, a set_) "
                        "and ask which launches the host issues after it, and what they read off the "
                        "tensor object when they are issued.",
    }
    return f"{len(off)} of 2 wrong ({', '.join(off)}).\n" + "\n".join(f"  {hints[o]}" for o in off)


# --------------------------------------------------------------------------- 2 freeze
@cache
def _frozen_x() -> tuple[int, int, int]:
    """(pointer and size the shared expert's first node froze for x, x's address before set_)."""
    result = run(INCIDENT.with_(shared_mode="raw_kernel"))
    node = next(n for n in result.trace.launches(result.graph.id) if n.role == "shared")
    arg = next(a for a in node.args if a.label == "x")
    before = next(m.old_ptr for m in result.trace.of(Mutation) if m.label == "x" and m.graph is not None)
    return arg.ptr, arg.numel, before


def _right_freeze(ptr: int) -> str:
    _, numel, before = _frozen_x()
    return (f"{ptr}. x.set_(torch.empty(0)) repointed the tensor object to an empty storage, whose "
            f"data_ptr is {ptr}; the launch copied that pointer (with the static batch's {numel} "
            f"elements) into the graph node. The data still sits at {hex(before)}, but no replay "
            "ever looks there: every replay reads address 0 and faults (cudaErrorIllegalAddress).")


def _wrong_freeze(given: int, _: int) -> str:
    before = _frozen_x()[2]
    if given == before:
        return (f"{hex(given)} is where x's data was *before* dispose_tensor ran. The shared expert's "
                "launch was issued after it. A launch copies the pointer the tensor object holds at the "
                "moment the host issues it.")
    return ("a captured launch copies the pointer that the tensor object holds at the moment the host "
            "issues it. What does a tensor point to right after x.set_(torch.empty(0))?")


# --------------------------------------------------------------------------- 3 modes
@cache
def _mode_outcomes() -> dict[str, str]:
    return {mode: run(INCIDENT.with_(shared_mode=mode)).outcome for mode in SHARED_MODES}


def _solve_modes() -> dict[str, str]:
    return {mode: family(outcome) for mode, outcome in _mode_outcomes().items()}


_MODE_HINTS = {
    "plain": "plain: the shared expert's first op is a matmul of x with a weight. Where is an op's "
             "shape checked, on the host at launch or on the device at replay, and what shape does x "
             "have by then?",
    "static_buffer": "static_buffer: x.view(-1, H) of an emptied x has 0 rows. What does PyTorch launch "
                     "for an op over zero elements, and what does the pre-zeroed output buffer hold "
                     "after the warm-up?",
    "raw_kernel": "raw_kernel: this kernel is sized by the static batch, not by x's size. What happens "
                  "when it reads that many elements from the pointer x had at launch?",
}


def _right_modes(expected: dict[str, str], h200: H200) -> str:
    lines = []
    for mode, outcome in _mode_outcomes().items():
        line, case = f"  {mode}: {outcome}", h200.case(INCIDENT.with_(shared_mode=mode))
        if case:
            line += f"; the H200 recorded {case['outcome']}"
            line += f" ({case['message']})" if case["message"] else ""
        lines.append(line)
    return ("The same host bug, three symptoms, decided by how the shared branch consumes x:\n"
            + "\n".join(lines) + "\nThe silent one is the incident's failure class.")


def _wrong_modes(given: dict[str, str], expected: dict[str, str]) -> str:
    off = [m for m in SHARED_MODES if given[m] != expected[m]]
    return (f"{len(off)} of 3 wrong ({', '.join(off)}).\n" + "\n".join(f"  {_MODE_HINTS[m]}" for m in off))


# --------------------------------------------------------------------------- 4 silent value
@cache
def _silent_replay() -> tuple[str, str, str]:
    """(input of replay 1, what it got, what eager gives), as text."""
    r = run(INCIDENT).replays[0]
    return r.input, str(r.got), str(r.want)


def _solve_shared_input() -> str:
    """Which input the shared term of replay 1's output was computed from ("0" if none)."""
    got = run(INCIDENT).replays[0].got
    shared = [t for t in terms(got) if isinstance(t, Call) and t.fn == "shared"]
    inner = shared[0].args[0] if shared else None
    while isinstance(inner, Call):
        inner = inner.args[0]
    return inner.name if isinstance(inner, Sym) else "0"


def _right_shared_input(source: str) -> str:
    x, got, want = _silent_replay()
    return (f"{source}. The warm-up ran eagerly on {source} and wrote shared(norm({source})) into the static "
            "buffer. In the capture the shared expert's ops saw a 0-row x and launched nothing, so no "
            f"replay rewrites the buffer. Replay with input {x}:\n  got:  {got}\n  want: {want}\n"
            "Right shape, plausible values, no error: silently wrong.")


def _wrong_shared_input(given: str, _: str) -> str:
    if given == "x2":
        return ("x2 would make the replay correct, but its outcome is silent_wrong: the shared expert's "
                "kernels never run in a replay. What was in their output buffer when the capture began?")
    return ("the buffer held zeros only until its first write. Which run, before the capture, wrote "
            "the shared expert's output into it, and on which input?")


# --------------------------------------------------------------------------- 5 trap
def _solve_trap() -> str:
    return family(run(INCIDENT.with_(inputs="same_as_eager")).outcome)


def _right_trap(outcome: str, h200: H200) -> str:
    case, fresh = h200.case(INCIDENT.with_(inputs="same_as_eager")), h200.case(INCIDENT)
    gpu = (f" The H200 measured the same: errors {case['errors']} with the warm-up's input, "
           f"{[round(e, 2) for e in fresh['errors']]} with fresh inputs.") if case and fresh else ""
    return (f"{outcome}: the trap. The graph is as broken as before, but the stale buffer holds the "
            "shared expert's answer for the warm-up's input, which is exactly the input this check "
            f"replays.{gpu} Every correctness check of a captured graph needs fresh inputs.")


def _wrong_trap(given: str, _: str) -> str:
    return ("the bug is captured exactly as before, but this check compares each replay with eager on "
            "the warm-up's own input. What does the stale shared buffer hold, and is that the right "
            "answer for this particular input?")


# --------------------------------------------------------------------------- 6 fixes
def _fix_config(fix: str) -> MoEConfig:
    return INCIDENT.with_(clone=True) if fix == "clone" else INCIDENT.with_(dispose=fix)


@cache
def _fix_nodes() -> dict[str, tuple[str, list[str]]]:
    """Per fix: its simulated outcome and the labels of its captured nodes."""
    out = {}
    for fix in FIXES:
        result = run(_fix_config(fix))
        out[fix] = (result.outcome, [n.label for n in result.trace.launches(result.graph.id)])
    return out


def _solve_fix() -> str:
    nodes = _fix_nodes()
    base = len(nodes["never"][1])
    (costly,) = [fix for fix, (outcome, labels) in nodes.items() if outcome == CORRECT and len(labels) > base]
    return costly


def _right_fix(fix: str) -> str:
    nodes = _fix_nodes()
    extra = [label for label in nodes[fix][1] if label not in nodes["never"][1]]
    counts = ", ".join(f"{f} {len(labels)}" for f, (_, labels) in nodes.items())
    return (f"{fix}. All four fixes replay correctly, but only {fix} adds a kernel to the graph "
            f"({', '.join(repr(e) for e in extra)}: a copy of x, tokens x hidden elements, every layer, "
            f"every decode step). Captured nodes: {counts}. The others change only what the host's "
            "dispose_tensor does: skip it while capturing (what SGLang did later), dispose only the "
            "routed branch's own permuted copy, or never free early (costs memory, not time).")


def _wrong_fix(given: str, _: str) -> str:
    nodes = _fix_nodes()
    return (f"{given} changes only a host-side decision (what dispose_tensor frees, and when), so its "
            f"captured graph has the same {len(nodes[given][1])} kernels as dispose='never'. A copy is a "
            "kernel: which fix puts one more node in the graph?")


# --------------------------------------------------------------------------- 7 timing
@cache
def _order_times() -> dict[str, float]:
    return {order: replay_latency(INCIDENT.with_(order=order, dispose="skip_in_capture")).step_us
            for order in ORDERS}


def _solve_speed() -> str:
    t = _order_times()
    delta = t["shared_first"] - t["routed_first"]
    return "same" if abs(delta) < 1e-6 else ("faster" if delta < 0 else "slower")


def _right_speed(answer: str, h200: H200) -> str:
    times = ", ".join(f"{o} {t:.1f} us" for o, t in _order_times().items())
    if answer == "same":
        why = ("A replay never reruns host code: each node starts when the nodes it depends on are done, "
               "and the edges come from streams and events, not from the host's order between two "
               "independent branches.")
    else:
        why = ("A replay runs the DAG, but the graph executor maps it onto its own internal streams in "
               "capture order: the branch captured first continues the first stream, the branch captured "
               f"second opens another one, whose first kernel starts late (graph_branch_launch_us = "
               f"{Profile().graph_branch_launch_us:g} us in the default profile). Shared first puts the "
               "long routed branch second, so the critical path starts late. Issue order decides what "
               "is frozen and, a little, when the branches start.")
    bench = h200.bench
    gpu = ""
    if bench:
        lat = bench["latency"]
        a = lat["graph_dual_shared_first"]["median_us"]
        b = lat["graph_dual_routed_first_skip_in_capture"]["median_us"]
        gpu = (f" On the H200 (bench-h200.json, medians) shared first replays in {a:.1f} us, routed first "
               f"(dispose skipped in capture) in {b:.1f} us: the same direction, but only "
               f"{abs(a - b) / max(a, b):.1%} apart, a smaller effect than the simulator's estimate.")
    return f"{answer} ({times}, simulated). {why}{gpu}"


def _wrong_speed(given: str, _: str) -> str:
    if given == "same":
        return ("the two graphs have the same nodes and edges, but a replay has to map two independent "
                "branches onto the GPU's streams. Which branch does the executor start first, and what "
                "does a branch captured second cost?")
    return ("compare which branch is long and which one the issue order makes start late in a replay "
            "(the branch captured second).")


# --------------------------------------------------------------------------- 8 report
REPORT_CONFIG = INCIDENT.with_(inputs="stale")
"""The capture whose checker report exercise 8 asks the learner to read."""


@cache
def _report_findings() -> tuple[Any, ...]:
    return tuple(check_trace(run(REPORT_CONFIG).trace))


def _solve_report() -> dict[str, Any]:
    findings = _report_findings()
    mutation = next(f for f in findings if f.code == HOST_MUTATION.code)
    stale = next(f for f in findings if f.code == STALE_INPUT.code)
    return {"tensor": mutation.label, "step": mutation.step, "rule": stale.rule}


def _right_report(expected: dict[str, Any]) -> str:
    return (f"tensor {expected['tensor']!r}, step {expected['step']}, rule {expected['rule']}. Rule 1 points "
            "at the cause (the host statement to move or skip), rule 2 at the launch that froze the "
            f"damage, rule {expected['rule']} at a second, unrelated bug: nobody copied new inputs into the "
            "graph's input buffer. Read a report from the cause: fix the first error first.")


def _wrong_report(given: dict[str, Any], expected: dict[str, Any]) -> str:
    findings = _report_findings()
    hints = []
    if given["tensor"] != expected["tensor"]:
        hints.append("tensor: the label in the heading of the host_mutation finding (rule 1) names the "
                     "tensor the host changed.")
    if given["step"] != expected["step"]:
        frozen = {f.step for f in findings if f.code == EMPTY_ARGUMENT.code}
        hints.append("step: that is the step of the launch that froze the damage (rule 2); the statement "
                     "to move is the set_ itself." if given["step"] in frozen else
                     "step: the host step of the set_ (dispose_tensor) is in the rule 1 heading, "
                     "'at step N'.")
    if given["rule"] != expected["rule"]:
        hints.append("rule: find the finding whose code talks about the graph's inputs.")
    return f"{len(hints)} of 3 wrong.\n" + "\n".join(f"  {h}" for h in hints)


# --------------------------------------------------------------------------- registry
def exercises(h200: H200) -> dict[int, Exercise]:
    """The exercises, their explanations quoting ``h200`` where it measured the same thing."""
    return {
        1: Exercise("Is either order safe?", "order",
                    record_answer({o: word_answer(OUTCOME_WORDS, o) for o in ORDERS}),
                    _solve_order, _wrong_order, partial(_right_order, h200=h200)),
        2: Exercise("What did the captured node freeze after set_?", "freeze", pointer_answer,
                    lambda: _frozen_x()[0], _wrong_freeze, _right_freeze),
        3: Exercise("Crash, error or silently wrong?", "modes",
                    record_answer({m: word_answer(OUTCOME_WORDS, m) for m in SHARED_MODES}),
                    _solve_modes, _wrong_modes, partial(_right_modes, h200=h200)),
        4: Exercise("What does the silently wrong output hold?", "silent", word_answer(SHARED_INPUTS, "answer_4"),
                    _solve_shared_input, _wrong_shared_input, _right_shared_input),
        5: Exercise("The stale-buffer trap", "trap", word_answer(OUTCOME_WORDS, "answer_5"),
                    _solve_trap, _wrong_trap, partial(_right_trap, h200=h200)),
        6: Exercise("Which fix costs a copy?", "fixes", word_answer(FIXES, "answer_6"),
                    _solve_fix, _wrong_fix, _right_fix),
        7: Exercise("Does issue order change replay time?", "timing", word_answer(SPEEDS, "answer_7"),
                    _solve_speed, _wrong_speed, partial(_right_speed, h200=h200)),
        8: Exercise("Reading a checker report", "report",
                    record_answer({"tensor": text_answer, "step": whole_number, "rule": whole_number}),
                    _solve_report, _wrong_report, _right_report),
    }


def workbook(h200: H200) -> Workbook:
    """Notebook 06's workbook: ``check(number, answer)``, ``expected(number)``; the explanations
    quote ``h200`` where it measured the same thing."""
    return Workbook("the lab", exercises(h200), READ, _NAMES)
