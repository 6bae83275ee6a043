"""An argument's extent is the byte span its view can touch from its pointer, for any strides.

Every view here is taken of an ``arange`` storage, so the elements a view can touch
are its own values: the span from its pointer must end exactly one element past its
largest value. Expanded (stride-0) views, transposes, stepped slices, ``as_strided``
and zero-size dims are drawn at random.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpu_demo.guard.record import patches  # noqa: E402
from gpu_demo.guard.record.tensor_reads import extent_bytes  # noqa: E402
from simlib.checker import check  # noqa: E402
from simlib.trace import Launch, SkippedLaunch, View  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name

STORAGE = 4 * 5 * 6
DTYPES = st.sampled_from([torch.int64, torch.int32, torch.int16])


@st.composite
def views(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """``(base, view)``: a random chain of view ops over an ``arange`` of ``STORAGE`` elements."""
    base = torch.arange(STORAGE, dtype=draw(DTYPES))
    t = base.view(4, 5, 6)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["permute", "transpose", "slice", "expand", "as_strided", "select", "empty"]))
        if op == "permute":
            t = t.permute(tuple(draw(st.permutations(range(t.dim())))))
        elif op == "transpose" and t.dim() >= 2:
            t = t.transpose(0, t.dim() - 1)
        elif op == "slice" and t.dim():
            dim = draw(st.integers(0, t.dim() - 1))
            start = draw(st.integers(0, t.shape[dim]))
            t = t[(slice(None),) * dim + (slice(start, None, draw(st.integers(1, 3))),)]
        elif op == "expand":
            dim = draw(st.integers(0, t.dim()))
            t = t.unsqueeze(dim)
            t = t.expand(*t.shape[:dim], draw(st.integers(0, 3)), *t.shape[dim + 1:])
        elif op == "select" and t.dim() and all(t.shape):
            dim = draw(st.integers(0, t.dim() - 1))
            t = t.select(dim, draw(st.integers(0, t.shape[dim] - 1)))
        elif op == "empty" and t.dim():
            t = t.narrow(draw(st.integers(0, t.dim() - 1)), 0, 0)
        elif op == "as_strided":
            offset = draw(st.integers(0, STORAGE - 1))
            sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
            strides = [draw(st.integers(0, 7)) for _ in sizes]
            reach = sum((n - 1) * s for n, s in zip(sizes, strides) if n) if all(sizes) else 0
            if offset + reach < STORAGE:
                t = base.as_strided(sizes, strides, offset)
    return base, t


def touched_span(base: torch.Tensor, view: torch.Tensor) -> int:
    """Bytes from the view's first element to one past the last one it can touch, read off its values."""
    if not view.numel():
        return 0
    return (int(view.max()) - view.storage_offset() + 1) * base.element_size()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(views())
def test_an_arguments_extent_is_the_span_its_view_touches_from_its_pointer(streams, drawn):
    base, view = drawn
    with recording(streams) as recorder:
        view.clone()     # a launch, or with no elements a skipped one: both freeze the argument
    (launch,) = [r for r in recorder.trace.records if isinstance(r, (Launch, SkippedLaunch))]
    arg = launch.args[0]
    assert arg.nbytes == extent_bytes(view) == touched_span(base, view)
    if view.numel():
        assert arg.ptr == base.data_ptr() + view.storage_offset() * base.element_size()
        assert arg.storage_nbytes == (STORAGE - view.storage_offset()) * base.element_size() >= arg.nbytes
    else:   # torch gives an empty tensor pointer 0, and nothing lies behind pointer 0
        assert (arg.ptr, arg.storage_nbytes) == (0, 0)
    assert launch.args[-1].nbytes == view.numel() * base.element_size()   # the clone is contiguous


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(views())
def test_no_legal_view_runs_past_its_storage_in_a_capture(streams, fake_graph_methods, drawn):
    _, view = drawn
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        view.clone()
        patches.record_triton_launch("strided_load", [("src_ptr", view)])
    assert [f for f in check(recorder.trace) if f.rule == 6] == []


def test_an_expanded_position_row_spans_its_storage_not_its_elements(streams, fake_graph_methods):
    positions, cls_token = torch.arange(16), torch.zeros(1, 1, 64)
    with recording(streams) as recorder, cuda_graph(FakeGraph(), streams):
        positions[None].expand(8, 16).add(1)          # HF's position_ids over a batch of 8
        cls_token.expand(8, -1, -1).contiguous()      # ViT's cls token, one per image
    spans = [launch.args[0].nbytes for launch in recorder.trace.of(Launch)]
    assert spans == [16 * 8, 64 * 4]
    assert check(recorder.trace) == []


def test_a_strided_kernel_argument_past_a_shortened_storage_is_rule_6(streams, fake_graph_methods):
    """The planted stride bug: every 8th element of a 64-element storage cut to 32 elements.
    Its elements alone (8 x 4 bytes) would fit; its span (57 x 4 bytes) does not."""
    base = torch.arange(64, dtype=torch.float32)
    column = base.as_strided((8,), (8,))
    with recording(streams) as recorder:
        base.untyped_storage().resize_(32 * 4)     # before the capture: eager runs see it too
        with cuda_graph(FakeGraph(), streams):
            patches.record_triton_launch("strided_load", [("src_ptr", column)])
    arg = recorder.trace.launches(graph=0)[0].args[0]
    assert (arg.numel, arg.nbytes, arg.storage_nbytes) == (8, 57 * 4, 32 * 4)
    (finding,) = check(recorder.trace)
    assert (finding.rule, finding.code, finding.label) == (6, "extent_exceeds_storage", arg.label)
    assert "extent of 228 bytes (8 elements)" in finding.why


def test_an_op_that_returns_its_own_input_records_no_view_of_it(streams):
    """``lift_fresh`` (how ``torch.tensor(...)`` constants enter a traced program) hands back
    its input: no new tensor, so no ``View`` whose base is itself."""
    x = torch.zeros(0)
    with recording(streams) as recorder:
        assert torch.ops.aten.lift_fresh.default(x) is x
        y = torch.ops.aten.alias.default(x)
    assert [(v.tensor, v.base) for v in recorder.trace.of(View)] == [(recorder.handles.handle(y).id,
                                                                       recorder.handles.handle(x).id)]
    assert recorder.handles.handle(y).id != recorder.handles.handle(x).id
