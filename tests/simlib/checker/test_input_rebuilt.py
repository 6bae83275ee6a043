"""Rule 9, ``input_rebuilt``: an input the host rebuilds in a fresh tensor every call."""

from __future__ import annotations

from checker_stories import P, Tracer, W, arg, numbers


def positions_call(t: Tracer, tensor: int, ptr: int, *, copy_role: str = "h2d") -> None:
    t.launch("copy_h2d", arg(tensor, ptr, "w", label="positions"), role=copy_role, site="model.py:5")
    t.launch("rope", arg(tensor, ptr, label="positions"), arg(9, W + 4096, "w"))


def test_an_input_rebuilt_from_the_host_every_call_is_flagged():
    t = Tracer()
    for k in range(2):
        t.call("warmup", lambda k=k: positions_call(t, 10 + k, W))     # same address, a fresh tensor
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P)))
    findings = t.check()
    assert numbers(findings) == [9]
    f = findings[0]
    assert f.label == "positions" and f.code == "input_rebuilt"
    assert "2 earlier calls" in f.why and "re-reads the host buffer" in f.why
    assert "static.copy_" in f.fix


def test_a_static_buffer_refreshed_each_call_is_fine():
    t = Tracer()
    for _ in range(2):
        t.call("warmup", lambda: positions_call(t, 10, W))              # one tensor, every call
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 10, W)))
    assert t.check() == []


def test_one_earlier_call_is_not_enough_to_say_every_call():
    t = Tracer()
    t.call("warmup", lambda: positions_call(t, 10, W))
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P)))
    assert t.check() == []


def test_fresh_tensors_not_copied_from_the_host_are_not_rebuilt_inputs():
    t = Tracer()
    for k in range(2):
        t.call("warmup", lambda k=k: positions_call(t, 10 + k, W, copy_role="copy"))
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P, copy_role="copy")))
    assert t.check() == []
