"""The lab's self-checks: unanswered prints, wrong raises with a hint, right explains.

Also: the reference answers agree with the recorded H200 where it measured the
same thing, the learner's notebook gives no answer away, and the solutions
notebook holds exactly the reference answers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ipython_shown import tracebacks_shown
from notebook_lab import LAB, RECORDED

from simlib.programs.spec import MoEConfig
from simlib.tutorial import lab
from simlib.tutorial.workbook import WrongAnswer

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = ROOT / "notebooks"

# One concrete wrong answer per exercise, and what its hint must talk about.
WRONG = {
    1: ({"shared_first": "correct", "routed_first": "silent_wrong"}, "dispose_tensor"),
    2: (4096, "set_"),
    3: ({"plain": "silent_wrong", "static_buffer": "silent_wrong", "raw_kernel": "capture_error"}, "plain"),
    4: ("x2", "buffer"),
    5: ("silent_wrong", "warm-up"),
    6: ("never", "kernel"),
    7: ("same", "branch"),
    8: ({"tensor": "hidden_in", "step": 0, "rule": 2}, "rule 1"),
}


def _answer_cells(path: Path) -> dict[int, str]:
    cells = json.loads(path.read_text())["cells"]
    found = {}
    for cell in cells:
        source = "".join(cell["source"])
        m = re.match(r"answer_(\d+) = ", source)
        if cell["cell_type"] == "code" and m:
            found[int(m.group(1))] = source
    return found


@pytest.mark.parametrize("number", sorted(LAB.exercises))
@pytest.mark.parametrize("blank", [..., None])
def test_an_unanswered_placeholder_prints_not_answered_yet_and_does_not_raise(number, blank, capsys):
    assert LAB.check(number, blank) is None
    assert "not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize("number", [1, 3, 8])
def test_a_half_filled_dict_names_what_is_still_missing(number, capsys):
    answer = dict.fromkeys(LAB.expected(number), ...)
    first = next(iter(answer))
    answer[first] = LAB.expected(number)[first]
    LAB.check(number, answer)
    out = capsys.readouterr().out
    assert "not answered yet" in out and first not in out.split("still to fill in:")[1]


@pytest.mark.parametrize("number", sorted(LAB.exercises))
def test_the_reference_answer_passes_and_says_why(number, capsys):
    LAB.check(number, LAB.expected(number))
    out = capsys.readouterr().out
    assert f"Exercise {number}" in out and ": right." in out
    assert len(out) > 120  # an explanation, not just "right"


@pytest.mark.parametrize("number", sorted(LAB.exercises))
def test_a_wrong_answer_raises_with_a_hint_and_where_to_read(number):
    answer, topic = WRONG[number]
    with pytest.raises(AssertionError) as err:
        LAB.check(number, answer)
    message = str(err.value)
    assert f"Exercise {number}" in message and "not yet" in message
    assert topic in message
    assert "Read: notebook" in message


@pytest.mark.parametrize("number", [4, 5, 6, 7])
def test_a_wrong_answer_does_not_give_the_right_one_away(number):
    with pytest.raises(AssertionError) as err:
        LAB.check(number, WRONG[number][0])
    assert not re.search(rf"\b{re.escape(LAB.expected(number))}\b", str(err.value))


def test_calling_shared_first_correct_is_coached_towards_the_race_without_naming_it():
    with pytest.raises(WrongAnswer) as err:
        LAB.check(1, WRONG[1][0])
    message = str(err.value)
    assert "1 of 2 wrong (shared_first)" in message and "x's block" in message
    assert "unordered" not in message and "routed_first:" not in message


def test_a_wrong_answer_shows_its_coaching_in_ipython_without_a_traceback():
    shown = tracebacks_shown("from notebook_lab import LAB as lab\nlab.check(2, '0x0')",
                             "lab.check(1, {'shared_first': 'correct', 'routed_first': 'silent_wrong'})",
                             "lab.check(12, 0)")
    assert len(shown) == 3
    for stb in shown:
        text = "\n".join(stb)
        assert "Traceback" not in text and "lab.py" not in text and "File " not in text
    assert shown[0][0].startswith("Exercise 2 (")
    assert "not a string; got '0x0'" in shown[0][0]
    assert shown[1][0].startswith("Exercise 1 (Is either order safe?): not yet.")
    assert shown[2] == ["there is no exercise 12; the lab has exercises 1 to 8"]


def test_a_wrong_mode_answer_names_only_the_wrong_modes_without_their_outcomes():
    with pytest.raises(AssertionError) as err:
        LAB.check(3, WRONG[3][0])
    message = str(err.value)
    assert "2 of 3 wrong (plain, raw_kernel)" in message
    assert "static_buffer:" not in message
    assert not any(word in message for word in ("capture_error", "illegal_address"))


def test_the_pre_dispose_address_gets_its_own_hint():
    before = lab._frozen_x()[2]
    with pytest.raises(AssertionError, match=r"before\* dispose_tensor ran"):
        LAB.check(2, before)


def test_the_rule_2_step_gets_its_own_hint():
    frozen = next(f.step for f in lab._report_findings() if f.code == "empty_argument")
    with pytest.raises(AssertionError, match="step of the launch that froze the damage"):
        LAB.check(8, {**LAB.expected(8), "step": frozen})


@pytest.mark.parametrize("number, answer, expected_form", [
    (1, "shared_first", "dict with the keys 'shared_first', 'routed_first'"),
    (1, {"shared first": "unordered", "routed_first": "silent_wrong"}, "dict with the keys"),
    (1, {"shared_first": "fragile", "routed_first": "silent_wrong"},
     "shared_first must be one of 'correct', 'unordered', 'silent_wrong', 'illegal_address', "
     "'capture_error'"),
    (1, {"shared_first": "timing_dependent", "routed_first": "silent_wrong"}, "must be one of"),
    (1, {"shared_first": "Unordered", "routed_first": "silent_wrong"},
     "shared_first: write it exactly as 'unordered'"),
    (1, {"shared_first": "unordered", "routed_first": "silent wrong"},
     "routed_first: write it exactly as 'silent_wrong'"),
    (2, "null", "integer"),
    (2, True, "integer"),
    (2, "0x0", "not a string; got '0x0' (without the quotes, 0x0 is the Python integer 0)"),
    (2, 0.0, "integer"),
    (4, "X1", "write it exactly as 'x1'"),
    (6, "Clone", "write it exactly as 'clone'"),
    (8, {"tensor": "x", "step": "55", "rule": 5}, "a Python integer such as 3 (no quotes)"),
    (8, {"tensor": 7, "step": 55, "rule": 5}, "a tensor label in quotes"),
    (3, ["plain"], "dict with the keys"),
    (3, {"plain": "crash", "static_buffer": "silent_wrong", "raw_kernel": "correct"}, "plain must be one of"),
    (8, {"tensor": "x"}, "dict with the keys"),
])
def test_a_malformed_answer_raises_saying_what_form_is_expected(number, answer, expected_form):
    with pytest.raises(AssertionError, match=re.escape(expected_form)):
        LAB.check(number, answer)


@pytest.mark.parametrize("number, answer", [
    (2, 0x0),
    (3, {"plain": "capture_error:shape_mismatch", "static_buffer": "silent_wrong",
         "raw_kernel": "illegal_address"}),
])
def test_any_spelling_python_or_the_glossary_defines_passes(number, answer, capsys):
    LAB.check(number, answer)
    assert ": right." in capsys.readouterr().out


def test_an_unknown_exercise_is_refused_with_the_range():
    with pytest.raises(ValueError, match="exercises 1 to 8"):
        LAB.check(9, "x")
    with pytest.raises(ValueError, match="exercises 1 to 8"):
        LAB.check(True, "x")


# -- the reference answers come from the simulator and match the real GPU -------------

def test_the_mode_answers_match_the_recorded_h200_outcomes():
    expected = LAB.expected(3)
    for mode, family in expected.items():
        case = RECORDED.case(lab.INCIDENT.with_(shared_mode=mode))
        assert case is not None and case["outcome"].split(":")[0] == family


def test_the_trap_answer_matches_the_h200_and_the_silent_value_comes_from_the_warm_up():
    case = RECORDED.case(lab.INCIDENT.with_(inputs="same_as_eager"))
    assert case["outcome"] == LAB.expected(5) == "correct"
    assert case["errors"] == [0.0, 0.0, 0.0]
    x, got, want = lab._silent_replay()
    assert f"shared(norm({LAB.expected(4)}))" in got and got != want


def test_neither_order_is_safe_and_the_h200_agrees_with_each_verdict():
    from simlib.programs.predictions import agrees, possible_outcomes

    answer = LAB.expected(1)
    assert answer == {"shared_first": "unordered", "routed_first": "silent_wrong"}
    verdicts = lab._order_verdicts()
    assert verdicts["shared_first"][1] == "correct"       # its replays, all the same
    assert [f.rule for f in verdicts["shared_first"][2]] == [4]
    for order in answer:
        config = lab.INCIDENT.with_(order=order)
        assert agrees(possible_outcomes(config).outcomes, RECORDED.case(config)["outcome"])


def test_every_fix_is_correct_and_only_the_costly_one_adds_a_node():
    nodes = lab._fix_nodes()
    assert all(outcome == "correct" for outcome, _ in nodes.values())
    counts = {fix: len(labels) for fix, (_, labels) in nodes.items()}
    costly = LAB.expected(6)
    assert counts[costly] == counts["never"] + 1
    assert all(counts[f] == counts["never"] for f in counts if f != costly)


def test_the_report_answer_names_the_set_of_x_and_the_stale_input_rule():
    answer = LAB.expected(8)
    mutation = next(f for f in lab._report_findings() if f.rule == 1)
    assert (answer["tensor"], answer["step"], answer["rule"]) == (mutation.label, mutation.step, 5)
    assert lab.REPORT_CONFIG == MoEConfig(inputs="stale")


def test_the_lab_imports_neither_torch_nor_matplotlib_nor_gpu_demo():
    import subprocess
    import sys
    code = ("import sys, simlib.tutorial.lab; "
            "bad = [m for m in ('torch', 'matplotlib', 'gpu_demo') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# -- the notebooks ------------------------------------------------------------------

def test_the_learners_notebook_gives_no_answer_away():
    cells = _answer_cells(NOTEBOOKS / "06-lab.ipynb")
    assert sorted(cells) == sorted(LAB.exercises)
    for number, source in cells.items():
        value = "\n".join(line.split("#")[0] for line in source.splitlines()).split("=", 1)[1]
        value = re.sub(r'"\w+"\s*:', "", value)   # dict keys name the questions, not answers
        assert "..." in value and re.fullmatch(r"[\s{}.,]*", value), f"answer_{number} is not blank: {source}"


def test_the_solutions_notebook_holds_the_reference_answers():
    for number, source in _answer_cells(NOTEBOOKS / "06-lab-solutions.ipynb").items():
        scope: dict = {}
        exec(source, scope)
        assert scope[f"answer_{number}"] == LAB.expected(number), f"answer_{number}"


def test_both_lab_notebooks_ask_the_same_questions():
    def prose(name: str) -> list[str]:
        cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
        return ["".join(c["source"]) for c in cells
                if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Exercise")]
    assert prose("06-lab.ipynb") == prose("06-lab-solutions.ipynb")
    assert len(prose("06-lab.ipynb")) == len(LAB.exercises)


def test_every_section_a_hint_sends_the_learner_to_exists():
    headings = {}
    for path in NOTEBOOKS.glob("0*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        headings[path.stem] = {line.lstrip("#").strip() for c in cells if c["cell_type"] == "markdown"
                               for line in "".join(c["source"]).splitlines() if line.startswith("#")}
    looked_up = 0
    for key, where in lab.READ.items():
        for notebook, sections in re.findall(r"(0\d-[a-z-]+), sections? ((?:'[^']+'(?: and )?)+)", where):
            for section in re.findall(r"'([^']+)'", sections):
                assert section in headings[notebook], f"READ[{key!r}]: {notebook} has no section {section!r}"
                looked_up += 1
    assert looked_up == len(re.findall(r"'[^']+'", " ".join(lab.READ.values())))   # none escaped the pattern


@pytest.mark.parametrize("number, answer, opens", [(6, "skip_in_capture", "skip_in_capture "), (6, "never", "never "),
                                                   (4, "x2", "x2 "), (4, "0", "The buffer")])
def test_a_hint_keeps_an_identifier_as_written_and_capitalises_prose(number, answer, opens):
    with pytest.raises(WrongAnswer) as wrong:
        LAB.check(number, answer)
    assert str(wrong.value).split("not yet. ", 1)[1].startswith(opens)


def test_the_learners_summary_gives_no_answer_away():
    from simlib.glossary import OUTCOMES, words

    cells = json.loads((NOTEBOOKS / "06-lab.ipynb").read_text())["cells"]
    (summary,) = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith("## Summary")]
    answers = [a for n in LAB.exercises for a in (lambda e: e.values() if isinstance(e, dict) else [e])(
        LAB.expected(n)) if isinstance(a, str)]
    giveaways = {a for a in answers} | {a.replace("_", " ") for a in answers} | {words(a) for a in answers
                                                                                 if a in OUTCOMES}
    found = [g for g in giveaways if re.search(rf"\b{re.escape(g)}\b", summary, re.IGNORECASE)]
    assert not found, f"06-lab's summary states answers: {found}"
