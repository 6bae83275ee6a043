"""The project's words, defined once: outcomes, and what a captured graph holds.

A reader meets the same questions in the README, the headline, the
notebooks, the lab, the checker and both CLIs ("is shared-first safe?",
"did the late launch freeze a null pointer or launch nothing?"). Every one
of them takes its words from here, so the answers cannot drift apart.

Outcomes
--------
What one configuration did on a device (observed), or what the simulator
says it will do (predicted). ``OUTCOMES`` maps each code to a ``Term``.

``correct``                every replay matched the eager reference, and the
                           graph orders every access that conflicts
``unordered``              the graph has two accesses to the same memory that
                           nothing orders, so a replay is right or wrong
                           depending on which runs first (``UNORDERED_MEANS``;
                           every replay we ran may still have been right)
``silent_wrong``           replays ran without error and computed something else
``illegal_address``        a replay faulted (sticky ``cudaErrorIllegalAddress``)
``capture_error:<name>``   capture failed; ``<name>`` is the CUDA error enum
                           (``cudaErrorStreamCaptureUnsupported``, ...) or
                           ``shape_mismatch`` for a host-side shape check
``warmup_error:<name>``    an eager warm-up call failed before anything was
                           captured; ``<name>`` as above, or the exception's type
``host_error:<name>``      host code around the graph failed (feeding inputs,
                           replaying, reading a result, the eager reference), not
                           the capture and not the device; ``<name>`` as above

``unordered`` is a verdict about the *program*, not a result a replay can
show: a replay is right or wrong. A GPU run of an unordered program reports
what its replays showed (``correct`` or ``silent_wrong``) and the checker's
race beside it.

One more word is the guard's alone (``GUARD_VERDICTS``), since no device run
and no simulation produces it: it compares two paths of one program.

``graph_eager_differ``     the replays and the eager reference disagree and the
                           checker found nothing in the capture: the two paths
                           compute different things, and neither is named wrong

The guard's answers
-------------------
``gpu_demo.guard``'s report opens with one answer (``GUARD_ANSWERS``), in this
order of precedence: ``NOT capture-safe`` (a hazard, proved by the replays or
read off the capture), ``could not check`` (the check itself could not be done),
``graph and eager differ`` (``words(GRAPH_EAGER_DIFFER)``), ``NOT CHECKED ON A
GPU`` (only the CPU dry run ran, and found nothing: never a pass) and ``passed``.

What the graph holds for a late consumer
----------------------------------------
After the host emptied a tensor during capture, what a consumer issued later
left in the graph depends on how it consumes the tensor (``GRAPH_HOLDS``):

``null_pointer_node``   a raw-pointer kernel launched anyway: the graph has a
                        node whose frozen pointer is 0 and whose size is the
                        static batch; every replay faults
``no_node``             the op had zero elements, so PyTorch launched nothing
                        (or the code skipped it): the graph has no node, and
                        the output keeps whatever it held before; every replay
                        is silently wrong
``shape_error``         a torch op checked shapes on the host while capturing
                        and raised: the capture fails, there is no graph
``host_branch``         Python code read the emptied shape (``if x.shape[0] == 0``)
                        and skipped the consumer: the graph holds only what that
                        code issued, so the skipped op has no node at all
"""

from __future__ import annotations

from dataclasses import dataclass

CORRECT = "correct"
UNORDERED = "unordered"
SILENT_WRONG = "silent_wrong"
ILLEGAL_ADDRESS = "illegal_address"
CAPTURE_ERROR_PREFIX = "capture_error:"
WARMUP_ERROR_PREFIX = "warmup_error:"
HOST_ERROR_PREFIX = "host_error:"
PREFIXES = (CAPTURE_ERROR_PREFIX, WARMUP_ERROR_PREFIX, HOST_ERROR_PREFIX)   # outcomes that name an error
SHAPE_MISMATCH = "shape_mismatch"
GRAPH_EAGER_DIFFER = "graph_eager_differ"

PASSED = "passed"
NOT_SAFE = "NOT capture-safe"
COULD_NOT_CHECK = "could not check"
NOT_ON_GPU = "NOT CHECKED ON A GPU"
GUARD_ANSWERS = (NOT_SAFE, COULD_NOT_CHECK, NOT_ON_GPU, PASSED)   # with words(GRAPH_EAGER_DIFFER)
NO_CAPTURE_SEEN = "no CUDA-graph capture was seen"   # what a check that watched a program says when it captured nothing


@dataclass(frozen=True)
class Term:
    """One word of the vocabulary.

    ``words``   how prose says it ("silently wrong")
    ``badge``   the short text on a picture's outcome badge
    ``meaning`` one sentence a learner can read on its own
    ``colour``  the badge colour (Okabe-Ito, safe for colour-blind readers)
    """

    code: str
    words: str
    badge: str
    meaning: str
    colour: str


# The one definition of "unordered"; every text that explains the word quotes this.
UNORDERED_MEANS = ("the graph has two accesses to the same memory that nothing orders, "
                   "so a replay is right or wrong depending on which runs first")

OUTCOMES: dict[str, Term] = {t.code: t for t in (
    Term(CORRECT, "correct", "correct",
         "every replay matched the eager reference, and the graph orders every access that conflicts",
         "#009E73"),
    Term(UNORDERED, "unordered", "unordered: a race", UNORDERED_MEANS, "#E69F00"),
    Term(SILENT_WRONG, "silently wrong", "silently wrong",
         "every replay ran without an error and computed something else",
         "#D55E00"),
    Term(ILLEGAL_ADDRESS, "an illegal-address fault", "illegal address",
         "a replay faulted with cudaErrorIllegalAddress, which is sticky: the process's CUDA context is lost",
         "#CC79A7"),
    Term(CAPTURE_ERROR_PREFIX, "a capture error", "capture fails",
         "the capture itself failed, so there is no graph to replay",
         "#56B4E9"),
    Term(WARMUP_ERROR_PREFIX, "a warm-up error", "warm-up fails",
         "an eager warm-up call failed before the capture, so nothing was captured",
         "#0072B2"),
    Term(HOST_ERROR_PREFIX, "a host error", "host code fails",
         "the host code around the graph failed (feeding inputs, replaying, reading a result), "
         "not the capture and not a replay on the device",
         "#999999"),
)}

# The guard's verdict when replays and eager disagree with nothing found (gpu_demo.guard.check).
GUARD_VERDICTS: dict[str, Term] = {t.code: t for t in (
    Term(GRAPH_EAGER_DIFFER, "graph and eager differ", "graph and eager differ",
         "the replays and the eager reference disagree and the checker found nothing in the capture: "
         "the program computes something else when captured (a path taken only in capture, or not taken), "
         "and the guard cannot tell which of the two is the one you meant",
         "#999999"),
)}

NULL_POINTER_NODE = "null_pointer_node"
NO_NODE = "no_node"
SHAPE_ERROR = "shape_error"
HOST_BRANCH = "host_branch"

GRAPH_HOLDS: dict[str, str] = {
    NULL_POINTER_NODE: "a node whose frozen pointer is 0 (a raw-pointer kernel launched anyway); "
                       "every replay faults",
    NO_NODE: "no node at all (zero elements, so PyTorch launched nothing); the output keeps what it "
             "held before, and every replay is silently wrong",
    SHAPE_ERROR: "no graph: a host-side shape check raised while capturing, so the capture failed",
    HOST_BRANCH: "only what host code issued after branching on the emptied shape: no node uses the "
                 "data, and an op that code skipped has no node at all",
}


def capture_error(name: str) -> str:
    """The outcome string for a capture that failed with ``name``."""
    return CAPTURE_ERROR_PREFIX + name


def warmup_error(name: str) -> str:
    """The outcome string for a warm-up call that failed with ``name``."""
    return WARMUP_ERROR_PREFIX + name


def host_error(name: str) -> str:
    """The outcome string for host code around the graph that failed with ``name``."""
    return HOST_ERROR_PREFIX + name


def _prefix(outcome: str) -> str | None:
    return next((p for p in PREFIXES if outcome.startswith(p)), None)


def family(outcome: str) -> str:
    """An outcome without the error it names: ``capture_error:shape_mismatch`` -> ``capture_error``."""
    prefix = _prefix(outcome)
    return prefix.rstrip(":") if prefix is not None else outcome


def term(outcome: str) -> Term:
    """The ``Term`` for an outcome code (any ``capture_error:<name>`` and the like included) or a guard verdict."""
    prefix = _prefix(outcome)
    if prefix is not None:
        return OUTCOMES[prefix]
    if outcome in GUARD_VERDICTS:
        return GUARD_VERDICTS[outcome]
    if outcome not in OUTCOMES:
        raise ValueError(f"{outcome!r} is not an outcome; the outcomes are: "
                         + ", ".join(repr(c) for c in OUTCOMES) + " (each ...:<name>)")
    return OUTCOMES[outcome]


def words(outcome: str) -> str:
    """How prose says ``outcome``: ``silently wrong``, ``a capture error (shape_mismatch)``."""
    found, prefix = term(outcome), _prefix(outcome)
    if prefix is not None:
        return f"{found.words} ({outcome.removeprefix(prefix)})"
    return found.words


def badge(outcome: str) -> str:
    """The outcome badge's text: ``unordered: a race``, ``capture fails: shape_mismatch``."""
    found, prefix = term(outcome), _prefix(outcome)
    if prefix is not None:
        return f"{found.badge}: {outcome.removeprefix(prefix)}"
    return found.badge
