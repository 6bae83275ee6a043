"""The gallery's what-if widget: each control re-simulates, and the text and picture follow."""

import pytest

pytest.importorskip("ipywidgets")

from simlib.programs.gallery import READ_AT_ONCE, READ_LATER, shared_pool_what_if  # noqa: E402
from simlib.tutorial.gallery_explorer import pool_what_if  # noqa: E402


def test_the_replay_order_and_the_fix_change_what_it_says_and_shows():
    widget = pool_what_if()
    assert widget.status[0] == shared_pool_what_if(READ_LATER).summary()
    assert "silently wrong" in widget.status_html.value and "!= eager" in widget.status_html.value
    first = widget.image.value
    widget.order.value = READ_AT_ONCE
    assert widget.answer.outcome == "correct" and widget.image.value != first
    assert "graphs_clobber" not in widget.status_html.value
    widget.order.value = READ_LATER
    assert widget.image.value == first           # one encoding: equal bytes, equal picture
    widget.copied_out.value = True
    assert widget.image.value != first
    assert widget.answer == shared_pool_what_if(READ_LATER, copied_out=True) and widget.redraws == 4
    assert "copying each output out" in widget.status[0] and "!=" not in widget.status_html.value


def test_an_unknown_order_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="order='bs1 first': choose"):
        pool_what_if("bs1 first")
