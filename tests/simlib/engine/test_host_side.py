"""The host side a graph never sees again: host objects' ints and flags, an owner's tensor rebound,
generators a graph does or does not advance, tensor lists, pinned host buffers updated in place."""

from __future__ import annotations

import pytest

from simlib import ShapeMismatch
from simlib.trace import Capture, Free, HostState, Launch, Rebind, Trace

HERE = "tests/simlib/engine/test_host_side.py:"


def test_a_capture_records_each_host_int_or_flag_it_changed_with_the_line_that_did(rt):
    cache = rt.host_object("cache", pos=0, full=False, name="kv")
    counter = rt.zeros((1,), "counter")                  # a device counter: a kernel advances it
    with rt.graph(label="step") as g:
        cache.pos += 1
        cache.full = cache.pos >= 1
        cache.name = "kv2"                               # not an int or a bool: not host state
        rt.launch("add_one", reads=[counter], writes=[counter])
    changes = list(rt.trace.of(HostState))
    assert [(h.graph, h.owner, h.attr, h.before, h.after) for h in changes] == [
        (g.id, "cache", "pos", "0", "1"), (g.id, "cache", "full", "False", "True")]
    assert all(h.site.startswith(HERE) for h in changes) and changes[0].site != changes[1].site
    end = next(r for r in rt.trace.of(Capture) if r.op == "end")
    assert rt.trace.records.index(changes[-1]) < rt.trace.records.index(end)   # the capture rules see them
    cache.pos += 1
    with rt.graph(label="again"):
        rt.launch("add_one", reads=[counter], writes=[counter])
    assert len(list(rt.trace.of(HostState))) == 2         # changed outside a capture: nothing recorded


def test_rebinding_an_owners_tensor_is_recorded_before_the_old_one_is_freed(rt):
    x = rt.from_host((4,), "x", value="x")
    layer = rt.host_object("layer", weight=rt.from_host((4,), "weight", value="w1"))
    with rt.graph() as g:
        y = rt.op("linear", x, layer.weight, out_shape=(4,))
    old_ptr = layer.weight.ptr
    new = rt.rebind(layer, "weight", rt.from_host((4,), "weight", value="w2"))
    assert layer.weight is new
    rebind, free = list(rt.trace.of(Rebind))[0], list(rt.trace.of(Free))[-1]
    assert (rebind.owner, rebind.attr, rebind.old_ptr, rebind.new_ptr) == ("layer", "weight", old_ptr, new.ptr)
    assert free.ptr == old_ptr and free.step == rebind.step and rt.trace.records.index(rebind) < \
        rt.trace.records.index(free)
    g.replay()
    assert str(rt.read(y)) == "linear(x, w1)"             # the graph keeps the old tensor's address


def test_a_view_of_the_old_tensor_keeps_it_alive_across_a_rebind(rt):
    layer = rt.host_object("layer", weight=rt.from_host((4,), "weight", value="w1"))
    kept = rt.view(layer.weight, (4,), label="kept")
    rt.rebind(layer, "weight", rt.from_host((4,), "weight", value="w2"))
    assert not list(rt.trace.of(Free)) and str(rt.read(kept)) == "w1"
    with pytest.raises(TypeError, match="replaces a tensor with a tensor"):
        rt.rebind(rt.host_object("m", step=3), "step", kept)


def test_generators_a_graph_advances_draw_anew_and_any_other_repeats_the_captures_numbers(rt):
    registered, private = rt.Generator("registered"), rt.Generator("private")
    x = rt.from_host((4,), "x", value="x")
    eager = rt.random("dropout", x, out_shape=(4,), generator=private)
    assert str(rt.read(eager)) == "dropout(x, private@0)"
    with rt.graph(generators=[registered]) as g:
        outs = [rt.random("rand", x, out_shape=(4,)),
                rt.random("dropout", x, out_shape=(4,), generator=registered),
                rt.random("dropout", x, out_shape=(4,), generator=private)]
    seen = []
    for _ in range(2):
        g.replay()
        seen.append([str(rt.read(o)) for o in outs])
    assert seen == [["rand(x, default@0)", "dropout(x, registered@0)", "dropout(x, private@1)"],
                    ["rand(x, default@1)", "dropout(x, registered@1)", "dropout(x, private@1)"]]
    assert [dict(n.scalars)["generator"] for n in g.nodes] == ["default", "registered", "private"]
    assert [r.generators for r in rt.trace.of(Capture)] == [("registered",), ("registered",)]
    with pytest.raises(ValueError, match="already exists"):
        rt.Generator("private")


def test_stack_takes_one_tensor_list_argument(rt):
    out = rt.from_host((4,), "out", value="y")
    stacked = rt.stack([out, out])
    launch = list(rt.trace.of(Launch))[-1]
    assert [(a.name, a.element_of, a.tensor) for a in launch.args if a.reads] == [
        ("tensors[0]", "tensors", out.id), ("tensors[1]", "tensors", out.id)]
    assert stacked.shape == (2, 4) and str(rt.read(stacked)) == "stack(y, y)"
    with pytest.raises(ShapeMismatch, match="one shape"):
        rt.stack([out, rt.empty((2,), "z")])


def test_a_captured_copy_from_a_pinned_buffer_reads_what_the_host_wrote_there_before_each_replay(rt):
    pinned = rt.host_buffer((4,), "positions_host", value="pos@1")
    positions = rt.empty((4,), "positions")
    with rt.graph() as g:
        rt.copy_from_host(positions, pinned)
        y = rt.op("rope", positions, out_shape=(4,))
    for k in (2, 3):
        pinned.fill(f"pos@{k}")                           # in place, on the host
        g.replay()
        assert str(rt.read(y)) == f"rope(pos@{k})"
    assert g.node("copy_h2d").role == "h2d"
    with pytest.raises(ShapeMismatch, match="pinned buffer"):
        rt.copy_from_host(rt.empty((2,), "small"), pinned)


def test_the_new_records_round_trip_and_old_traces_still_load(rt):
    layer = rt.host_object("layer", weight=rt.empty((4,), "w"), pos=0)
    with rt.graph(generators=[rt.Generator("g")]):
        layer.pos = 1
        rt.stack([layer.weight, layer.weight])
    rt.rebind(layer, "weight", rt.empty((4,), "w2"))
    assert Trace.from_json(rt.trace.to_json()).to_json() == rt.trace.to_json()
    old = {"version": 1, "records": [
        {"kind": "capture", "step": 0, "t_us": 0.0, "op": "begin", "graph": 0, "stream": "main"},
        {"kind": "launch", "step": 1, "t_us": 0.0, "id": 0, "kernel": "k", "label": "k", "role": "", "stream": "main",
         "graph": 0, "args": [{"name": "in0", "tensor": 1, "label": "x", "ptr": 16, "numel": 1, "shape": [1],
                               "nbytes": 2, "access": "r"}]}]}
    capture, launch = Trace.from_dict(old).records
    assert capture.generators == () and launch.args[0].element_of == ""
