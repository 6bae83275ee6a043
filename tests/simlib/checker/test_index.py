"""The checker ends on any trace, even one whose view links form a cycle (issue 22).

A trace recorded from a tiny Hugging Face Llama held
``View(tensor=267, base=267, ptr=0, numel=0, shape=(0,))``: a view op that
returned its input. Following view->base links from it never ended. These
traces are built by hand from ``simlib.trace`` records, like a recorder's;
each is checked under an alarm, so a walk that loops fails the test instead
of hanging it, and its findings must be those of the same trace without the
looping records (a view of itself links nothing; a back edge adds no base).
"""

from __future__ import annotations

import pytest
from checker_stories import plain_arg
from deadline import within

from simlib.checker import Finding, check
from simlib.trace import Capture, Launch, Mutation, Record, Replay, Trace, View

X_PTR, IN_PTR = 0x7F3A_0000_0000, 0x7F3A_0001_0000


HIDDEN, X = 1, 2          # tensor ids: the graph's input, and the tensor the capture empties


def bounded_check(records: list[Record]) -> list[Finding]:
    with within(10):
        return check(Trace(records=records))


def empty_view(step: int, tensor: int, base: int, label: str = "x.view") -> View:
    """A view taken of an emptied storage (pointer 0, no elements), during graph 0's capture."""
    return View(step, float(step), tensor, label, base, 0, 0, (0,), 0)


def disposed_x(*views: View, reader: int = X) -> list[Record]:
    """Graph 0 writes ``x``, the host empties it, then ``shared`` reads tensor ``reader``
    (``x`` or a view of it) with pointer 0; ``views`` come right after the mutation."""
    return [
        Capture(0, 0.0, "begin", 0, "main"),
        Launch(1, 1.0, 10, "rms_norm", "x", "norm", "main",
               (plain_arg(HIDDEN, "hidden", IN_PTR, 8, "r"), plain_arg(X, "x", X_PTR, 8, "w")), 0),
        Mutation(2, 2.0, "set_", X, "x", X_PTR, 8, (8,), 0, 0, (0,), 0, "dispose_tensor"),
        *views,
        Launch(10, 10.0, 11, "shared_expert_into", "shared", "shared", "alt",
               (plain_arg(reader, "x.view" if reader != X else "x", 0, 0, "r"),
                plain_arg(9, "out", X_PTR + 4096, 8, "w")), 0, deps=(10,)),
        Capture(11, 11.0, "end", 0, "main", inputs=(IN_PTR,)),
        Replay(12, 12.0, 0, 0, "main"),
    ]


SEED = [(1, "x"), (2, "x"), (5, "hidden")]      # what the disposed-x trace is reported for


def codes(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.rule, f.label) for f in findings]


def test_the_trace_without_views_is_the_seed_bug():
    assert codes(bounded_check(disposed_x())) == SEED


def test_a_view_of_itself_ends_and_changes_no_finding():
    """Issue 22's record, on the emptied tensor itself and on one nothing else names."""
    looping = [empty_view(3, X, X, "x"), empty_view(4, 267, 267, "t267")]
    assert bounded_check(disposed_x(*looping)) == bounded_check(disposed_x())


def test_a_view_of_itself_keeps_the_base_the_view_was_taken_of():
    """Tensor 3 is a view of ``x``; a later record naming 3 its own base must not hide that,
    so rule 2 still says ``shared`` got ``x`` through the view."""
    real = empty_view(3, 3, X)
    findings = bounded_check(disposed_x(real, empty_view(4, 3, 3), reader=3))
    assert codes(findings) == SEED
    assert findings == bounded_check(disposed_x(real, reader=3))
    assert "through the view 'x.view'" in findings[1].why


@pytest.mark.parametrize("length", [2, 3])
def test_a_cycle_of_views_ends_with_the_findings_of_its_chain(length):
    """``x`` <- 3 <- 4 ... is a chain of views of the emptied ``x``; one more record naming the
    last view ``x``'s base closes it into a cycle (two views: x's base 3, 3's base x)."""
    chain = [empty_view(3 + k, 3 + k, X + k if k else X) for k in range(length - 1)]
    back_edge = empty_view(3 + length - 1, X, 3 + length - 2, "x")
    last = 3 + length - 2
    cyclic = bounded_check(disposed_x(*chain, back_edge, reader=last))
    assert codes(cyclic) == SEED
    assert cyclic == bounded_check(disposed_x(*chain, reader=last))
    assert "through the view 'x.view'" in cyclic[1].why


def test_a_bounded_index_forgets_old_views_but_not_the_ones_a_kept_view_descends_from():
    # A server takes a view of an output every step: the index keeps the newest half once it holds
    # VIEWS_KEPT, and the old views those descend from (a weak reference made at start-up) stay.
    from simlib.checker.index import VIEWS_KEPT, Index
    from simlib.trace import View

    index = Index(bounded=True)
    index.add(View(0, 0.0, 1, "logits", 0, 0x1000, 64, (64,), None))        # tensor 1 views tensor 0
    index.add(View(1, 0.0, 2, "weak", 1, 0x1000, 64, (64,), None))          # and tensor 2 views 1
    for step in range(2, VIEWS_KEPT + 2):
        index.add(View(step, 0.0, 10 + step, "t", 2, 0x1000, 8, (8,), None))   # weak[:n], each served step
    assert len(index.views) < VIEWS_KEPT // 2 + 10
    assert index.lineage(10 + VIEWS_KEPT + 1) == {10 + VIEWS_KEPT + 1, 2, 1, 0}
    assert 12 not in index.views   # an old step's view, which nothing kept descends from
