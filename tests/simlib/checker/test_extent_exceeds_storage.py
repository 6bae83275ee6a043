"""Rule 6, ``extent_exceeds_storage``: a captured launch touches more bytes than lie behind its pointer."""

from __future__ import annotations

import pytest
from checker_stories import HIDDEN, ITEM, NBYTES, ROWS, Recorder, rules

from simlib.checker import ERROR
from simlib.glossary import GRAPH_HOLDS, NULL_POINTER_NODE
from simlib.trace import Arg


@pytest.mark.parametrize("access, words", [("r", "reads 32 bytes past its end"),
                                           ("w", "writes 32 bytes past its end, over whatever")])
def test_a_kernel_sized_past_its_storage_is_rule_6(access, words):
    for declared in (ROWS * HIDDEN + 16, ROWS * HIDDEN):            # 16 elements too many, or exact
        rec = Recorder()
        rec.begin()
        buf = rec.empty("buf")
        other = rec.empty("other")
        rec.launch("fill", writes=[buf])
        rec.launch("raw_kernel", reads=[rec.arg(buf, access, numel=declared)] if access == "r" else [other],
                   writes=[rec.arg(buf, access, numel=declared)] if access == "w" else [other])
        rec.end()
        findings = rec.check()
        if declared == ROWS * HIDDEN:
            assert findings == []
            continue
        assert rules(findings) == [(6, "extent_exceeds_storage", ERROR)]
        assert findings[0].label == "buf" and findings[0].pointers == (buf.ptr,)
        assert f"extent of {declared * ITEM} bytes" in findings[0].why
        assert f"only {NBYTES} bytes of storage" in findings[0].why and words in findings[0].why


def test_an_unknown_storage_size_is_not_guessed_but_a_null_pointer_has_none():
    rec = Recorder()
    x = rec.empty("x")
    rec.dispose(x)                                   # emptied before the capture: not rule 1 or 2
    rec.begin()
    unknown = Arg("in", 99, "mystery", 0x7E00_0000_1000, 999, (999,), 999 * ITEM, "r", storage_nbytes=None)
    rec.launch("raw_kernel", reads=[unknown, rec.arg(x, "r", numel=ROWS * HIDDEN)],
               writes=[rec.empty("out")])
    rec.end()
    [finding] = rec.check()
    assert (finding.rule, finding.label, finding.pointers) == (6, "x", (0,))
    assert GRAPH_HOLDS[NULL_POINTER_NODE] in finding.why and "cudaErrorIllegalAddress" in finding.why
