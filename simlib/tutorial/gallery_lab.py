"""Self-checks for the predict-then-run exercises of ``notebooks/07-gallery.ipynb``.

    from simlib.tutorial import gallery_lab
    answer_1 = "scale@5"               # the learner's prediction
    gallery_lab.check(1, answer_1)

The same coaching as notebook 06's lab (``simlib.tutorial.workbook.Workbook``): a placeholder
prints "not answered yet", a wrong answer raises ``WrongAnswer`` with a hint and
the section to read (no traceback), a right one says why, with the simulator's
evidence. The reference answers are read off the gallery's simulated runs.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Callable

from ..checker.rules import (
    FREED_UNDER_GRAPH,
    FROZEN_HOST_VALUE,
    GRAPHS_CLOBBER,
    HOST_STATE_BRANCH,
    INPUT_FRESH_BETWEEN_GRAPHS,
    INPUT_REBUILT,
    OUTPUT_OVERWRITTEN,
    UNREGISTERED_GENERATOR,
    VIEW_FROZEN,
    WEIGHTS_REBOUND,
)
from ..engine.values import Call, Sym
from ..glossary import CORRECT, SILENT_WRONG
from ..programs.gallery import CASES, READ_AT_ONCE, READ_LATER, shared_pool_what_if
from ..programs.harness import Replayed
from .workbook import Exercise, Workbook, record_answer, word_answer

SCALES = ("scale@1", "scale@2", "scale@3", "scale@5")
ASKED_REPLAY = 5                     # exercise 1 asks about the replay that stands for call 5
ORDERS = {"read_later": READ_LATER, "read_at_once": READ_AT_ONCE}
RULE_CODES = tuple(r.code for r in (FROZEN_HOST_VALUE, INPUT_REBUILT, FREED_UNDER_GRAPH, GRAPHS_CLOBBER))
FREED_CASES = ("buffer_rebound", "workspace_freed_in_capture", "workspace_resized_under_graph")
FAMILY_CODES = tuple(r.code for r in (OUTPUT_OVERWRITTEN, WEIGHTS_REBOUND, VIEW_FROZEN, HOST_STATE_BRANCH,
                                      UNREGISTERED_GENERATOR, GRAPHS_CLOBBER, INPUT_FRESH_BETWEEN_GRAPHS))
FAMILY_CASES = ("weights_rebound_after_sync", "logits_kept_without_clone", "view_sliced_by_host_length",
                "host_counter_in_capture", "generator_not_registered", "drafter_shared_pool", "op_between_pieces_fresh")

READ = {
    "scalar": "notebook 07-gallery, section '1. A host scalar frozen into the graph'",
    "pool": "notebook 07-gallery, section '6. Two graphs in one pool'",
    "freed": "notebook 07-gallery, sections '3. A buffer re-bound every call', '4. A workspace freed "
             "inside capture' and '5. A workspace resized under a graph'",
    "family": "notebook 07-gallery, section '8. The family in 2026'",
}


# --------------------------------------------------------------------------- 1 scalar
@cache
def _scalar_replay() -> Replayed:
    """The replay of ``host_scalar_frozen`` that stands for call 5."""
    return next(r for r in CASES["host_scalar_frozen"].run().replays if r.call == ASKED_REPLAY)


def _solve_scalar() -> str:
    """The ``scale@k`` symbol among the arguments of what that replay computed."""
    got = _scalar_replay().got
    args = got.args if isinstance(got, Call) else ()
    (scale,) = [a.name for a in args if isinstance(a, Sym) and a.name.startswith("scale@")]
    return scale


def _right_scalar(scale: str) -> str:
    got, want = _scalar_replay().got, _scalar_replay().want
    return (f"{scale}: the capture's call was call {scale.removeprefix('scale@')} (two warm-ups, then the "
            "capture). A launch reads its scalar arguments on the host when it is issued, like its "
            "pointers, and the graph keeps that value: a replay runs no host code, so whatever the host "
            f"holds now never reaches it.\n  replay: {got}\n  eager:  {want}\n"
            "The checker's rule 8 (frozen_host_value) sees the value change over the warm-up calls and "
            "the capture's call.")


def _wrong_scalar(given: str, _: str) -> str:
    if given == f"scale@{ASKED_REPLAY}":
        return (f"the host holds scale@{ASKED_REPLAY} now, and eager uses it. Does a replay run "
                "the module's Python code, and when was the all-reduce's scalar argument read?")
    return (f"{given} is the value of a warm-up call. The graph holds what one call launched: which call "
            "was the capture?")


# --------------------------------------------------------------------------- 3 pool
def _solve_pool() -> dict[str, str]:
    return {key: shared_pool_what_if(order).outcome for key, order in ORDERS.items()}


_POOL_HINTS = {
    "read_later": "read_later: the bs2 graph was captured into the bs1 graph's pool after the bs1 output "
                  "was kept only as a weak reference. Where may that capture put its own output, and "
                  "what do the bs1 output's bytes hold after the bs2 replay?",
    "read_at_once": "read_at_once: each output is read right after its own replay. Does any other replay "
                    "write that memory between a replay and its read?",
}


def _right_pool(expected: dict[str, str]) -> str:
    lines = [f"  {shared_pool_what_if(order).summary()}" for order in ORDERS.values()]
    fixed = shared_pool_what_if(READ_LATER, copied_out=True).summary()
    return ("The same graphs, the same pool; only the host's order of replays and reads differs:\n"
            + "\n".join(lines) + f"\nThe fix copies each output out before another graph replays:\n  {fixed}")


def _wrong_pool(given: dict[str, str], expected: dict[str, str]) -> str:
    off = [k for k in ORDERS if given[k] != expected[k]]
    return f"{len(off)} of 2 wrong ({', '.join(off)}).\n" + "\n".join(f"  {_POOL_HINTS[k]}" for k in off)


# --------------------------------------------------------------------------- 2 freed, 4 the 2026 family
@cache
def _rules(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The checker's rules on each named case's hazard."""
    return {name: tuple(CASES[name].run().rules) for name in names}


def _listed_rules(names: tuple[str, ...]) -> str:
    return "\n".join(f"  {name}: {', '.join(rules)}" for name, rules in _rules(names).items())


def _first_rules(names: tuple[str, ...], among: tuple[str, ...] | None = None) -> Callable[[], dict[str, str]]:
    """Each case's first rule the checker reports (of ``among``, where given: a case may fire an older
    rule too, as a fresh input between graphs is also a freed block)."""
    return lambda: {name: next(r for r in rules if among is None or r in among) for name, rules in _rules(names).items()}


def _wrong_cases(names: tuple[str, ...], hints: dict[str, str]) -> Callable[[dict[str, str], dict[str, str]], str]:
    """Which of the cases are wrong, each with its hint (never the answer)."""
    def wrong(given: dict[str, str], expected: dict[str, str]) -> str:
        off = [n for n in names if given[n] != expected[n]]
        return f"{len(off)} of {len(names)} wrong ({', '.join(off)}).\n" + "\n".join(f"  {hints[n]}" for n in off)
    return wrong


_FREED_HINTS = {
    "buffer_rebound": "buffer_rebound: the capture's copy read the tensor the attribute named then. What "
                      "happened to that tensor when the attribute was re-bound, while the capture went on?",
    "workspace_freed_in_capture": "workspace_freed_in_capture: the workspace was allocated before the "
                                  "capture. Whose pool does its block go back to when the plugin deletes "
                                  "it, and who reads that block in every replay?",
    "workspace_resized_under_graph": "workspace_resized_under_graph: resize_ moves the workspace to a new "
                                     "block. What does the graph captured before it still point at?",
}


def _right_freed(expected: dict[str, str]) -> str:
    return ("Three stories, one rule: in each, a block a graph reads was freed outside the graph's pool "
            "while the graph lives on, and the allocator handed it to someone else.\n"
            + _listed_rules(FREED_CASES)
            + "\nThe fix is the same too: keep what a graph reads alive, in place, as long as the graph.")


_FAMILY_HINTS = {
    "weights_rebound_after_sync": "weights_rebound_after_sync: the sync gives the module a new tensor. Which "
                                  "tensor's address did the graph capture, and what names the change?",
    "logits_kept_without_clone": "logits_kept_without_clone: the list holds the graph's static output once per "
                                 "step. What does the next replay of the same graph do to it?",
    "view_sliced_by_host_length": "view_sliced_by_host_length: cache[:n] is a pointer and sizes read on the "
                                  "host. How do they differ from call to call, and what did the graph keep?",
    "host_counter_in_capture": "host_counter_in_capture: the count is a Python int the captured update "
                               "advances. Who advances it after the capture?",
    "generator_not_registered": "generator_not_registered: a graph advances some generators on every replay. "
                                "Is the sampler's one of them?",
    "drafter_shared_pool": "drafter_shared_pool: the target's logits and the draft's lie in one pool. Whose "
                           "replay writes that memory between the target's replay and the verification?",
    "op_between_pieces_fresh": "op_between_pieces_fresh: the op between the two pieces returns a new tensor "
                               "each step. Which address did the second piece capture as its input?",
}


def _right_family(expected: dict[str, str]) -> str:
    return ("Seven stories from the public record in 2026, seven rules: in each, a replay computes with "
            "something the host changed, replaced or meant to change, or another graph overwrote, and "
            "nothing fails.\n"
            + _listed_rules(FAMILY_CASES)
            + "\nEach fix moves what changes to where a replay sees it (in place, on the device, registered, "
            "written into the static input) or reads a result before another replay writes over it.")


EXERCISES: dict[int, Exercise] = {
    1: Exercise("Which scale does a replay use?", "scalar", word_answer(SCALES, "answer_1"),
                _solve_scalar, _wrong_scalar, _right_scalar),
    2: Exercise("Which rule names the freed block?", "freed",
                record_answer({n: word_answer(RULE_CODES, n) for n in FREED_CASES}),
                _first_rules(FREED_CASES), _wrong_cases(FREED_CASES, _FREED_HINTS), _right_freed),
    3: Exercise("Two graphs in one pool: read later, or at once?", "pool",
                record_answer({k: word_answer((CORRECT, SILENT_WRONG), k) for k in ORDERS}),
                _solve_pool, _wrong_pool, _right_pool),
    4: Exercise("Which rule names each hazard of 2026?", "family",
                record_answer({n: word_answer(FAMILY_CODES, n) for n in FAMILY_CASES}),
                _first_rules(FAMILY_CASES, FAMILY_CODES), _wrong_cases(FAMILY_CASES, _FAMILY_HINTS), _right_family),
}

GALLERY_LAB = Workbook("the gallery", EXERCISES, READ, frozenset(SCALES))


def expected(number: int) -> Any:
    """The reference answer of gallery exercise ``number``, read off a simulation."""
    return GALLERY_LAB.expected(number)


def check(number: int, answer: Any) -> None:
    """Print whether ``answer`` is right; raise ``WrongAnswer`` (with a hint) if it is not."""
    GALLERY_LAB.check(number, answer)
