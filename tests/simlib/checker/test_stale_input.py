"""Rule 5, ``stale_input``: a replay with nothing written into a static input since the last one."""

from __future__ import annotations

import pytest
from checker_stories import scenario_findings, severities, streams

from simlib import Runtime
from simlib.checker import ERROR, check
from simlib.programs.spec import MoEConfig


def test_replays_without_a_refresh_since_the_last_replay_are_stale():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        inp = rt.from_host((8,), "inp", value="x1")
        with rt.graph(main, inputs=[inp]) as g:
            rt.op("f", inp, out_shape=(8,))
        rt.view(inp, (4,), offset=4, label="inp.tail").copy_(rt.from_host((4,), value="t"))
        g.replay()                                   # a partial write still refreshes it
        g.replay()                                   # stale: nothing written since the last replay
        inp.copy_(rt.from_host((8,), value="x3"))
        g.replay()
    findings = check(rt.trace)
    assert severities(findings) == [(5, ERROR)]
    assert findings[0].label == "inp" and findings[0].pointers == (inp.ptr,)
    assert "1 of its 3 replays" in findings[0].why and "replay #1" in findings[0].why


@pytest.mark.parametrize("order", ["shared_first", "routed_first"])
def test_stale_inputs_are_rule_5_and_refreshed_ones_are_not(order):
    stale = scenario_findings(MoEConfig(order=order, inputs="stale"))
    assert [f.label for f in stale if f.rule == 5] == ["hidden_in"]
    assert "3 of its 3 replays" in next(f.why for f in stale if f.rule == 5)
    trap = scenario_findings(MoEConfig(order=order, inputs="same_as_eager"))
    assert all(f.rule != 5 for f in trap)
