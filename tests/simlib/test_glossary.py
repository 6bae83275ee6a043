"""The notebooks' prose says outcomes in the glossary's words, and the right word for each case.

``simlib.glossary`` defines the outcome codes once. Three rules hold the notebooks'
markdown cells to it (code cells and fenced code blocks are not prose):

1. **Retired words.** ``timing_dependent`` (in any spelling: ``timing-dependent``,
   "timing dependent") was replaced by ``unordered``; it may not appear.
2. **Outcome codes in backticks are the glossary's.** A backticked word that reads
   like an outcome (it contains one of ``STEMS``: ``wrong``, ``safe``, ``race``...)
   must be a glossary code, a ``GRAPH_HOLDS`` key or an identifier of the project's
   code (``silent_wrong``, ``assert_capture_safe``); ``capture_error`` may name a CUDA
   error or ``shape_mismatch`` after its colon. ``silently_wrong``, ``safe`` or
   ``capture_error:oops`` fail.
3. **Shared-first is unordered.** A sentence (a table row, list item or heading
   counts as one) that names shared-first or the reorder fix and calls it
   ``correct``, ``safe`` or ``fragile`` must also say ``unordered`` or race: its
   replays come out right, but the checker finds a race on ``x``'s block. A
   sentence that names a fix keeping ``x`` alive (skip the dispose in capture, the
   own buffer, never dispose, a clone) may call that fix correct.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from simlib.glossary import CAPTURE_ERROR_PREFIX, GRAPH_HOLDS, OUTCOMES

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

RETIRED = re.compile(r"\btiming[\s_-]+dependent\b", re.IGNORECASE)
STEMS = frozenset({"correct", "unordered", "wrong", "safe", "unsafe", "fragile", "dependent",
                   "crash", "fault", "illegal", "race", "racy"})
CODE_SPAN = re.compile(r"`([^`\n]+)`")
WORDS = re.compile(r"[a-z]+(?:_[a-z]+)*")
CAPTURE_ERROR = re.compile(r"capture_error(?::(?:cudaError\w+|shape_mismatch|<name>))?")
SHARED_FIRST = re.compile(
    r"shared[ _-]first|shared expert(?: block| branch)?(?: is)?(?: issued| launched| goes)? first"
    r"|\breorder", re.IGNORECASE)
BARE_VERDICT = re.compile(r"\b(?:correct(?:ly)?|safe(?:ly)?|fragile)\b", re.IGNORECASE)
RACE = re.compile(r"\bunordered\b|\brac(?:e|es|y|ing)\b", re.IGNORECASE)
KEEPS_X_ALIVE = re.compile(r"skip_in_capture|own_buffer|\bclon(?:e|es|ed|ing)\b|\"never\"|"
                           r"never dispos|skip(?:s|ping)? (?:the )?dispos|own (?:permuted )?buffer",
                           re.IGNORECASE)
GLOSSARY_CODES = ", ".join(code + ("<name>" if code == CAPTURE_ERROR_PREFIX else "")
                           for code in OUTCOMES)


@cache
def project_identifiers() -> frozenset[str]:
    """Every snake_case name in simlib's and gpu_demo's source (functions, codes, options)."""
    names: set[str] = set()
    for package in ("simlib", "gpu_demo"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", path.read_text()))
    return frozenset(names)


def known_codes() -> frozenset[str]:
    glossary = {code.rstrip(":") for code in OUTCOMES} | set(GRAPH_HOLDS)
    return frozenset(glossary) | project_identifiers()


def prose(markdown: str) -> str:
    """``markdown`` without fenced code blocks and HTML comments."""
    markdown = re.sub(r"^```.*?^```[^\n]*$", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"<!--.*?-->", "", markdown, flags=re.DOTALL)


def sentences(markdown: str) -> list[str]:
    """Sentences of the prose; each heading, list item and table row starts a new one."""
    units: list[list[str]] = [[]]
    for line in prose(markdown).splitlines():
        stripped = line.strip()
        if not stripped:
            units.append([])
        elif re.match(r"(#+ |[-*+] |\d+\. |\||>)", stripped):
            units.append([stripped])
        else:
            units[-1].append(stripped)
    out = []
    for unit in units:
        text = " ".join(unit)
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*_(\[#|])", text) if s]
    return out


def problems(markdown: str) -> list[str]:
    """Every way ``markdown`` breaks the three rules, one line each, saying how to fix it."""
    found = []
    text = prose(markdown)
    for hit in RETIRED.finditer(text):
        found.append(f"retired word {hit.group(0)!r}: the glossary's word is `unordered`")
    known = known_codes()
    for span in CODE_SPAN.findall(text):
        token = span.strip()
        if token.startswith("capture_error"):
            if not CAPTURE_ERROR.fullmatch(token):
                found.append(f"`{token}` is not an outcome code: capture_error:<name> names a CUDA "
                             "error (cudaError...) or shape_mismatch")
        elif (WORDS.fullmatch(token) and STEMS & set(token.split("_")) and token not in known
              and not RETIRED.search(token)):
            found.append(f"`{token}` is not an outcome code; the glossary's are: {GLOSSARY_CODES}")
    for sentence in sentences(markdown):
        if (SHARED_FIRST.search(sentence) and BARE_VERDICT.search(sentence)
                and not RACE.search(sentence) and not KEEPS_X_ALIVE.search(sentence)):
            word = BARE_VERDICT.search(sentence).group(0)
            found.append(f"calls shared-first {word!r} without saying it is `unordered` (two "
                         f"accesses to the same memory that nothing orders): {sentence!r}")
    return found


# ----------------------------------------------------------------- the rules, on examples
MUST_FAIL = {
    "shared first called correct": "Shared first is correct.",
    "the reorder called safe": "The reorder fix (#29463) is safe.",
    "issue order in words": "Issuing the shared expert first makes every replay correct.",
    "a table row": "| shared_first/plain/always | correct |",
    "a heading": "## Why the reorder fix is fragile",
    "a list item": "- **reorder (#29463)**: correct, and 1% faster.",
    "retired word, hyphen": "Routed first is wrong; shared first is timing-dependent.",
    "retired code": "The replays are `timing_dependent`.",
    "retired words, spaced": "The outcome is timing dependent.",
    "an outcome code the glossary lacks": "Routed first ends `silently_wrong`.",
    "a bare verdict code": "The fix is `safe`.",
    "a made-up capture error": "It ends in `capture_error:oops`.",
    "a second sentence": "Routed first is silently wrong. Shared first replays correctly.",
}
MUST_PASS = {
    "the glossary's answer": "Shared first is `unordered`: the graph has two accesses to the same "
                             "memory that nothing orders.",
    "a replay and its race": "The H200's replays of shared first were correct, and the checker "
                             "finds a race on x's block.",
    "a fix that keeps x alive": "With `dispose=\"skip_in_capture\"`, shared first is correct too.",
    "a fix named in words": "Skipping the dispose in capture makes either order correct, the "
                            "reorder included.",
    "other orders": "Which order is correct? Routed first is `silent_wrong`.",
    "code blocks are not prose": "```python\nshared_first = 'correct'  # timing_dependent\n```",
    "identifiers of the code": "`assert_capture_safe` fails on `cross_stream_race` and "
                               "`reuse_after_free`; `is_illegal_address` says a fault.",
    "glossary codes": "`correct`, `unordered`, `silent_wrong`, `illegal_address`, "
                      "`capture_error:cudaErrorStreamCaptureUnsupported`, `capture_error:shape_mismatch`, "
                      "`capture_error`, `null_pointer_node`, `no_node`, `shape_error`.",
    "words that only look alike": "The shared expert runs first on the device; the result is "
                                  "correct only by timing in a race.",
}


@pytest.mark.parametrize("markdown", MUST_FAIL.values(), ids=MUST_FAIL.keys())
def test_the_rules_catch(markdown):
    assert problems(markdown), markdown


@pytest.mark.parametrize("markdown", MUST_PASS.values(), ids=MUST_PASS.keys())
def test_the_rules_let_pass(markdown):
    assert problems(markdown) == []


def test_a_problem_says_what_to_write_instead():
    (said,) = problems("Shared first is correct.")
    assert "`unordered`" in said and "'correct'" in said
    (said,) = problems("The replays are `silently_wrong`.")
    assert "silent_wrong" in said and "capture_error:<name>" in said


def test_every_glossary_code_is_known():
    assert {code.rstrip(":") for code in OUTCOMES} <= known_codes()
    assert not RETIRED.search(" ".join(known_codes()))


# ----------------------------------------------------------------- the notebooks
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebooks_say_outcomes_in_the_glossarys_words(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    found = [f"cell {i}: {problem}" for i, cell in enumerate(cells)
             if cell["cell_type"] == "markdown"
             for problem in problems("".join(cell["source"]))]
    assert not found, f"{notebook.name}:\n" + "\n".join(found)
