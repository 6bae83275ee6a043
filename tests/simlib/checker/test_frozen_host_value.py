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


def step(t: Tracer, tokens: int, start: str | None = None) -> None:
    """One decode step over ``tokens`` tokens, from the host position ``start`` (``None``: a
    position tensor on the device, as transformers' ``StaticLayer`` keeps): the embedding reads the
    ids; ``arange(tokens)`` reads nothing and the cache length's ``add_`` reads a counter of
    fixed shape, so only the call's other launches say how many tokens it ran on."""
    t.launch("embedding", arg(1, W, nbytes=8 * tokens, shape=(1, tokens)), arg(2, W + 512, "w"))
    t.launch("arange", arg(3, W + 1024, "w", nbytes=8 * tokens, shape=(tokens,)), scalars=[("end", str(tokens))])
    t.launch("add_", arg(4, W + 2048, "rw", nbytes=8, shape=(1,)), scalars=[("other", str(tokens))])
    t.launch("add", arg(3, W + 1024, nbytes=8 * tokens, shape=(tokens,)), arg(5, W + 3072, "w"),
             scalars=[("start", start)] if start else [])


def test_a_prefill_is_another_graphs_call_even_where_a_launch_reads_the_same_shapes():
    t = Tracer()
    t.call("warmup", lambda: step(t, 4))                            # the prefill: 4 tokens
    t.call("warmup", lambda: step(t, 1))
    t.call("capture", lambda: t.capture(0, lambda: step(t, 1)))
    assert t.check() == []


def test_a_decode_step_still_freezes_a_host_position_the_prefill_aside():
    t = Tracer()
    for tokens, start in ((4, "0"), (1, "4"), (1, "5")):
        t.call("warmup", lambda tokens=tokens, start=start: step(t, tokens, start))
    t.call("capture", lambda: t.capture(0, lambda: step(t, 1, "6")))
    findings = t.check()
    assert [(f.rule, f.label) for f in findings] == [(8, "add: start")]
    assert "start=4, 5 in the 2 earlier calls" in findings[0].why
