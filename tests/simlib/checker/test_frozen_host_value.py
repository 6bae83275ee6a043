"""Rule 8, ``frozen_host_value``: a host value that changes from call to call, frozen by the capture."""

from __future__ import annotations

from checker_stories import Tracer, W, arg, numbers

from simlib.checker import ERROR
from simlib.trace import Launch


def scaled(t: Tracer, *values: str, capture: str, layers: int = 1) -> None:
    """Warm-up calls with ``values`` of the scale, then the capture's call with ``capture``."""
    def body(value: str) -> None:
        for layer in range(layers):
            own = value if layers == 1 else f"{value}/{layer}"
            t.launch("mul", arg(1, W), arg(2, W + 512, "w"), scalars=[("scale", own)])
    for v in values:
        t.call("warmup", lambda v=v: body(v))
    t.call("capture", lambda: t.capture(0, lambda: body(capture)))


def test_a_scalar_that_changes_per_call_is_frozen_by_the_graph():
    t = Tracer()
    scaled(t, "0.5", "0.75", capture="1.0")
    findings = t.check()
    assert numbers(findings) == [8]
    f = findings[0]
    assert f.severity == ERROR and f.code == "frozen_host_value"
    assert "scale=1.0" in f.why and "0.5, 0.75" in f.why and "model.py:10" in f.why and "on main" in f.why
    assert f.step == next(r.step for r in t.records if isinstance(r, Launch) and r.graph == 0)
    assert "device tensor" in f.fix


def test_a_scalar_constant_across_calls_is_fine():
    t = Tracer()
    scaled(t, "0.5", "0.5", capture="0.5")
    assert t.check() == []


def test_per_layer_constants_are_fine_and_per_layer_changes_are_not():
    t = Tracer()
    scaled(t, "c", "c", capture="c", layers=3)       # layer k always gets c/k: n tells layers apart
    assert t.check() == []
    t = Tracer()
    scaled(t, "a", "b", capture="c", layers=3)
    findings = t.check()
    assert numbers(findings) == [8] and "2 more launches" in findings[0].why


def test_calls_that_read_other_shapes_belong_to_other_graphs():
    t = Tracer()
    t.call("warmup", lambda: t.launch("mul", arg(1, W, nbytes=128, shape=(64,)), scalars=[("n", "64")]))
    t.call("capture", lambda: t.capture(0, lambda: t.launch("mul", arg(1, W), scalars=[("n", "32")])))
    assert t.check() == []


def test_without_call_records_nothing_is_compared():
    t = Tracer()
    t.launch("mul", arg(1, W), scalars=[("scale", "0.5")])
    t.capture(0, lambda: t.launch("mul", arg(1, W), scalars=[("scale", "1.0")]))
    assert t.check() == []
