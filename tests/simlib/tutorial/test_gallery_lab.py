"""The gallery's self-checks coach like the lab's: unanswered prints, wrong raises with a hint, right explains."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ipython_shown import tracebacks_shown

from simlib.checker.rules import RULES
from simlib.programs.gallery import CASES
from simlib.tutorial import gallery_lab
from simlib.tutorial.workbook import WrongAnswer

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "07-gallery.ipynb"

# One concrete wrong answer per exercise, and what its hint must talk about.
WRONG = {
    1: ("scale@5", "replay run"),
    2: ({"buffer_rebound": "input_rebuilt", "workspace_freed_in_capture": "freed_under_graph",
         "workspace_resized_under_graph": "graphs_clobber"}, "resize_"),
    3: ({"read_later": "correct", "read_at_once": "correct"}, "weak reference"),
    4: ({"weights_rebound_after_sync": "input_fresh_between_graphs", "logits_kept_without_clone": "output_overwritten",
         "view_sliced_by_host_length": "view_frozen", "host_counter_in_capture": "host_state_branch",
         "generator_not_registered": "unregistered_generator", "drafter_shared_pool": "graphs_clobber",
         "op_between_pieces_fresh": "input_fresh_between_graphs"}, "names the change"),
}


@pytest.mark.parametrize("number", sorted(gallery_lab.EXERCISES))
@pytest.mark.parametrize("blank", [..., None])
def test_an_unanswered_placeholder_prints_not_answered_yet(number, blank, capsys):
    assert gallery_lab.check(number, blank) is None
    assert "not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize("number", sorted(gallery_lab.EXERCISES))
def test_the_reference_answer_passes_and_says_why(number, capsys):
    gallery_lab.check(number, gallery_lab.expected(number))
    out = capsys.readouterr().out
    assert f"Exercise {number}" in out and ": right." in out and len(out) > 200


@pytest.mark.parametrize("number, answer, topic", [(n, *WRONG[n]) for n in sorted(WRONG)])
def test_a_wrong_answer_raises_with_a_hint_and_where_to_read(number, answer, topic):
    with pytest.raises(WrongAnswer, match=rf"^Exercise {number} \(.*\): not yet\. ") as err:
        gallery_lab.check(number, answer)
    assert topic in str(err.value) and "\nRead: notebook 07-gallery, section" in str(err.value)


def test_the_answers_are_read_off_the_simulated_cases():
    replay = next(r for r in CASES["host_scalar_frozen"].run().replays if r.call == 5)
    assert f"all_reduce(x5, {gallery_lab.expected(1)})" == str(replay.got) != str(replay.want)
    assert set(gallery_lab.expected(2).values()) == {"freed_under_graph"}
    assert gallery_lab.expected(3) == {"read_later": "silent_wrong", "read_at_once": "correct"}
    assert gallery_lab.expected(4) == {name: CASES[name].rules[0] for name in gallery_lab.FAMILY_CASES}
    assert len(set(gallery_lab.expected(4).values())) == 7           # seven cases, seven rules


def test_a_wrong_answer_names_only_what_is_wrong_and_gives_nothing_away():
    with pytest.raises(AssertionError) as err:
        gallery_lab.check(2, WRONG[2][0])
    message = str(err.value)
    assert "2 of 3 wrong (buffer_rebound, workspace_resized_under_graph)" in message
    assert "freed_under_graph" not in message and "workspace_freed_in_capture:" not in message
    with pytest.raises(AssertionError) as err:
        gallery_lab.check(1, "scale@1")
    assert "scale@3" not in str(err.value) and "which call was the capture" in str(err.value)


@pytest.mark.parametrize("number, answer, expected_form", [
    (1, "scale 5", "answer_1 must be one of 'scale@1', 'scale@2', 'scale@3', 'scale@5'"),
    (1, 3, "a word in quotes"),
    (3, {"read_later": "silent wrong", "read_at_once": "correct"}, "write it exactly as 'silent_wrong'"),
    (3, "silent_wrong", "dict with the keys 'read_later', 'read_at_once'"),
    (2, {"buffer_rebound": "rule 10"}, "dict with the keys"),
])
def test_a_malformed_answer_says_what_form_is_expected(number, answer, expected_form):
    with pytest.raises(AssertionError, match=re.escape(expected_form)):
        gallery_lab.check(number, answer)


def test_an_unknown_exercise_is_refused_with_the_gallery_s_range():
    with pytest.raises(ValueError, match="^there is no exercise 5; the gallery has exercises 1 to 4$"):
        gallery_lab.check(5, "x")


def test_the_notebook_asks_every_exercise_unanswered_in_the_order_of_their_numbers():
    cells = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    checks = [cells.index(f"gallery_lab.check({number}, answer_{number})") for number in sorted(gallery_lab.EXERCISES)]
    assert checks == sorted(checks)
    codes = "|".join(RULES)
    for number in gallery_lab.EXERCISES:
        (answer,) = [c for c in cells if c.startswith(f"answer_{number} = ")]
        values = re.sub(r"#.*", "", answer)          # the comments list the choices
        assert "..." in values and not re.search(rf'"(scale@\d|correct|silent_wrong|{codes})"', values)


def test_a_wrong_answer_shows_its_coaching_in_ipython_without_a_traceback():
    (stb,) = tracebacks_shown("from simlib.tutorial import gallery_lab\n"
                              "gallery_lab.check(3, {'read_later': 'correct', 'read_at_once': 'correct'})")
    assert stb[0].startswith("Exercise 3 (Two graphs in one pool: read later, or at once?): not yet.")
    assert not any("Traceback" in line or "File " in line for line in stb)


def test_every_section_a_hint_sends_the_learner_to_exists_in_the_notebook():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    headings = {line.lstrip("#").strip() for c in cells if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("#")}
    named = [s for where in gallery_lab.READ.values() for s in re.findall(r"'([^']+)'", where)]
    assert len(named) >= len(gallery_lab.READ) and set(named) <= headings, set(named) - headings
