"""Rule 7, ``frozen_state``: the graph reads what only the warm-up wrote from its inputs."""

from __future__ import annotations

import pytest
from checker_stories import Recorder, T, warm_up_and_capture

from simlib.checker import ERROR
from simlib.checker.incremental import IncrementalChecker
from simlib.glossary import GRAPH_HOLDS, NO_NODE
from simlib.trace import Free


@pytest.mark.parametrize("guard", [True, False], ids=["shape_guard", "zero_rows"])
def test_a_static_buffer_the_capture_stopped_writing_keeps_the_warm_ups_answer(guard):
    findings = warm_up_and_capture(dispose=True, guard=guard).check()
    frozen = [f for f in findings if f.rule == 7]
    assert [(f.code, f.severity, f.label) for f in frozen] == [("frozen_state", ERROR, "shared_out")]
    why = frozen[0].why
    assert "'shared_expert' on main wrote it eagerly at step" in why and "static input 'hidden'" in why
    assert "set_ of 'x' at step" in why and "before the graph's first read" in why
    if guard:                                         # the host read that skipped the writer
        assert "host code read 'x'.shape at step" in why and "emptied shape (0,)" in why
    else:                                             # the recorder saw the op that launched nothing
        assert "'shared_expert' on main at step" in why and GRAPH_HOLDS[NO_NODE] in why


def test_without_evidence_the_frozen_buffer_names_the_dispose_as_a_likely_cause():
    [frozen] = [f for f in warm_up_and_capture(dispose=True, guard=True, seen=False).check() if f.rule == 7]
    assert "The capture emptied 'x' (set_ at step" in frozen.why and "if the op that writes" in frozen.why


def test_the_safe_twins_of_the_frozen_buffer_are_clean():
    assert warm_up_and_capture(dispose=False, guard=True).check() == []    # the graph writes it
    refreshed = warm_up_and_capture(dispose=True, guard=True, refresh_eagerly=True).check()
    assert [f for f in refreshed if f.rule == 7] == []                     # rewritten before replays


def test_a_constant_cache_built_in_warm_up_is_not_frozen_state():
    """Rotary-style cache: computed once in the first forward (the warm-up) from constants and
    from a template's shape only, then read by every replay. Nothing input-derived: no finding."""
    rec = Recorder()
    hidden = rec.empty("hidden")
    rec.launch("copy_", writes=[hidden])
    cos = rec.empty("cos_cache")
    mask = rec.empty("mask")
    for captured in (False, True):
        if captured:
            rec.begin(inputs=(hidden,))
        else:
            rec.launch("arange_cos", writes=[cos], kernel="aten.cos.out")           # from constants
            rec.launch("ones_like", reads=[hidden], writes=[mask], kernel="aten.ones_like.default")
        y = rec.empty("y")
        rec.launch("rotary", reads=[hidden, cos, mask], writes=[y])
    rec.end()
    rec.launch("copy_", writes=[hidden])
    rec.replay(0)
    assert rec.check() == []


def test_data_derived_from_the_input_but_freed_before_the_capture_is_not_frozen():
    rec = Recorder()
    hidden = rec.empty("hidden")
    tmp = rec.empty("tmp")
    rec.launch("scale", reads=[hidden], writes=[tmp])
    rec._emit(Free, label="tmp", ptr=tmp.ptr, nbytes=0, stream="main", pool="default", graph=None)
    table = rec.empty("table", ptr=tmp.ptr)           # the block again, holding a new tensor
    rec.begin(inputs=(hidden,))
    rec.launch("lookup", reads=[hidden, table], writes=[rec.empty("y")])
    rec.end()
    assert rec.check() == []




@pytest.mark.parametrize("from_input", [False, True], ids=["from_a_temporary", "from_the_input"])
def test_an_input_viewed_inside_its_block_derives_only_from_what_it_held_since_its_allocation(from_input):
    """``x.chunk(2)[1]``: the graph reads its input at a pointer inside the input's block, where
    no allocation starts. A rotary table computed from a temporary the block held before the
    input was allocated there derives nothing from the input (the whole process names the
    inputs by the refresh before the first replay); the table computed from the input is frozen."""
    rec = Recorder()
    table = rec.empty("cos_table", shape=(32,))
    scratch = rec.empty("scratch", shape=(64,))
    rec.launch("arange", writes=[scratch])                                  # from constants
    if not from_input:
        rec.launch("cos", reads=[scratch], writes=[table])
    rec._emit(Free, label="scratch", ptr=scratch.ptr, nbytes=0, stream="main", pool="default", graph=None)
    hidden = rec.empty("hidden", ptr=scratch.ptr, shape=(64,))            # the block again: the input
    rec.launch("copy_", writes=[hidden])
    second = T(hidden.id, "hidden", hidden.ptr + hidden.storage // 2, (32,), hidden.storage // 2)
    if from_input:
        rec.launch("cos", reads=[second], writes=[table])
    rec.begin()
    rec.launch("rotate", reads=[second, table], writes=[rec.empty("y", shape=(32,))])
    rec.end()
    rec.launch("copy_", writes=[hidden])                                    # the refresh names the input
    rec.replay(0)
    found = IncrementalChecker(whole_program=True).feed(rec.records)
    assert [f.label for f in found if f.rule == 7] == (["cos_table"] if from_input else [])
