"""Rule codes and outcome words are spelled in one place each: the checker's table and the glossary.

The rule: in the source of simlib and gpu_demo, a string literal whose whole value is a rule
code (``simlib.checker.rules.RULES``), an outcome or guard verdict (``simlib.glossary``: ``correct``,
``capture_error:``, ``graph_eager_differ``, ...) or one of the guard's answers (``passed``,
``NOT capture-safe``, ...) stands only in ``simlib/checker/rules.py`` and ``simlib/glossary.py``.
Everywhere else the code names the constant (``HOST_MUTATION.code``, ``glossary.CORRECT``).
Not counted: docstrings (prose may mention a word), a literal that only contains a word
(``f"... {x} unordered ..."``: prose), and the keys of a dict display, which name a record's
fields (``{"passed": self.passed}`` in a report's JSON), not an outcome.
"""

from __future__ import annotations

import ast
from pathlib import Path

from simlib import glossary
from simlib.checker.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
HOMES = {ROOT / "simlib" / "checker" / "rules.py", ROOT / "simlib" / "glossary.py"}
WORDS = frozenset({*RULES, *glossary.OUTCOMES, *glossary.GUARD_VERDICTS, *glossary.GUARD_ANSWERS})


def spelled(source: str) -> list[tuple[int, str]]:
    """(line, word) of every string literal in ``source`` that is a rule code or an outcome word."""
    tree = ast.parse(source)
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        if isinstance(node, ast.Dict):
            exempt.update(id(key) for key in node.keys if key is not None)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in WORDS and id(node) not in exempt)


def test_the_table_and_the_glossary_hold_every_word_we_look_for():
    assert {"host_mutation", "graphs_clobber", "collective_mismatch"} <= WORDS
    assert {"correct", "unordered", "capture_error:", "graph_eager_differ", "passed", "NOT CHECKED ON A GPU"} <= WORDS


def test_no_rule_code_or_outcome_word_is_spelled_outside_its_home():
    found = [f"{path.relative_to(ROOT)}:{line}: {word!r}"
             for package in ("simlib", "gpu_demo") for path in sorted((ROOT / package).rglob("*.py"))
             if path not in HOMES for line, word in spelled(path.read_text())]
    assert found == [], "spell these with simlib.checker.rules or simlib.glossary:\n" + "\n".join(found)


def test_the_scan_finds_what_the_guard_and_the_lab_used_to_write():
    planted = '''
"""A docstring may say passed, unordered and host_mutation."""
RACE_CODES = frozenset({"cross_stream_race", "reuse_after_free"})
PASSED = "passed"

def solve(findings):
    """``f.code == "host_mutation"`` in a docstring is prose."""
    mutation = next(f for f in findings if f.code == "host_mutation")
    return {"passed": True, "said": f"{mutation} was unordered", "outcome": "correct"}
'''
    assert spelled(planted) == [(3, "cross_stream_race"), (3, "reuse_after_free"), (4, "passed"),
                                (8, "host_mutation"), (9, "correct")]
