"""Stories about the other ways to free a tensor early, and about record_stream.

FSDP frees a storage and keeps the tensor's shape; another framework's
dispose ``set_``s a tensor to a 0-dim one; ``record_stream`` keeps a block out
of the caching allocator's hands until another stream is done with it.
"""

import pytest

from simlib import IllegalAddress, Runtime, ShapeMismatch, Sym, raw
from simlib.checker import check
from simlib.engine.errors import StorageNotAllocated
from simlib.engine.values import Garbage
from simlib.trace import Free, Mutation


# ------------------------------------------------------------- the storage freed, shape kept
def test_freeing_the_storage_keeps_the_shape_and_every_view_loses_its_data(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    rows = x.view(32)
    old = x.ptr
    x.untyped_storage().resize_(0)
    assert x.shape == (4, 8) and x.numel == 32                  # the shape is kept ...
    assert x.ptr == 0 and rows.ptr == 0 and x.untyped_storage().nbytes() == 0   # ... the data is not
    free = next(r for r in rt.trace.records if isinstance(r, Free))
    mutation = next(r for r in rt.trace.records if isinstance(r, Mutation))
    assert free.ptr == old and (mutation.old_ptr, mutation.new_ptr) == (old, 0)
    assert mutation.old_shape == mutation.new_shape == (4, 8)


def test_a_torch_op_refuses_a_tensor_whose_storage_was_freed_so_the_capture_fails(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    with pytest.raises(StorageNotAllocated, match="data is not allocated yet") as err:
        with rt.graph(rt.current_stream) as g:
            x.untyped_storage().resize_(0)
            rt.op("mlp", x, out_shape=(4, 8))
    assert err.value.code == "storage_not_allocated" and "'x' has 32 elements" in str(err.value)
    assert not g.ok


def test_a_raw_kernel_on_a_freed_storage_freezes_pointer_zero_and_faults_on_replay(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    out = rt.empty((4, 8), "out")
    with rt.graph(rt.current_stream) as g:
        x.untyped_storage().resize_(0)
        node = rt.launch("raw_load", reads=[raw(x, 32)], writes=[out])
    arg = node.args[0]
    assert (arg.ptr, arg.nbytes, arg.storage_nbytes) == (0, 64, 0)
    g.replay()
    with pytest.raises(IllegalAddress, match="64 bytes at address 0"):
        rt.synchronize()


def test_a_freed_storage_can_be_given_a_new_block():
    rt = Runtime()
    x = rt.from_host((4, 8), "x", value="x1")
    x.untyped_storage().resize_(0)
    x.untyped_storage().resize_(64)
    assert x.ptr != 0 and x.untyped_storage().nbytes() == 64 and x.shape == (4, 8)
    with pytest.raises(ValueError, match="not to 32 bytes"):
        x.untyped_storage().resize_(32)


# ------------------------------------------------------------- set_ to a 0-dim tensor
def test_set_to_a_scalar_leaves_one_element_and_a_raw_kernel_reads_its_neighbours(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    scalar = rt.empty((), "scalar")
    x.set_(scalar)
    assert x.shape == () and x.numel == 1 and x.ptr == scalar.ptr != 0
    rt.release(scalar)                                      # x keeps the 2-byte block alive
    neighbour = rt.from_host((512,), "neighbour", value="n1")
    assert neighbour.ptr == x.ptr + 512                     # the next block after the scalar's
    out = rt.empty((4, 8), "out")
    load = rt.launch("raw_load", reads=[raw(x, 512)], writes=[out], fn=lambda v: v)
    assert load.args[0].nbytes == 1024 > load.args[0].storage_nbytes == 2
    first = rt.read(out)                                    # no fault: it read past the end
    assert isinstance(first, Garbage) and "neighbour" in first.why and Sym("n1") in first.parts
    neighbour.copy_(rt.from_host((512,), "n2", value="n2"))
    rt.launch("raw_load", reads=[raw(x, 512)], writes=[out], fn=lambda v: v)
    second = rt.read(out)
    assert Sym("n2") in second.parts and second != first   # the garbage follows the neighbour


def test_a_torch_op_on_a_scalar_where_a_matrix_was_expected_is_a_shape_error(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    x.set_(rt.empty((), "scalar"))
    with pytest.raises(ShapeMismatch, match="need to be at least 1D"):
        rt.linear("up", x, 8, 16)


# ------------------------------------------------------------- record_stream
def _reuse_program(rt: Runtime, record: bool):
    """``x`` made on main, read on alt, freed on main; then a same-sized tensor on main."""
    main, alt = rt.current_stream, rt.Stream("alt")
    h = rt.from_host((4, 8), "h", value="h1")
    with rt.graph(main) as g:
        x = rt.op("norm", h, out_shape=(4, 8), label="x")
        alt.wait_stream(main)
        if record:
            x.record_stream(alt)
        with rt.stream(alt):
            y = rt.op("reader", x, out_shape=(4, 8), label="y")
        old = x.ptr
        rt.release(x)
        z = rt.op("writer", h, out_shape=(4, 8), label="z")
        main.wait_stream(alt)
    return g, old, z, y


def test_without_record_stream_the_graph_pool_hands_the_freed_block_to_the_next_tensor(rt):
    g, old, z, _ = _reuse_program(rt, record=False)
    assert z.ptr == old
    assert [f.rule for f in check(rt.trace)] == [4]


def test_record_stream_keeps_the_block_out_of_the_capture_and_the_graph_clean(rt):
    g, old, z, y = _reuse_program(rt, record=True)
    assert z.ptr != old                              # not handed out again inside the capture
    assert check(rt.trace) == []
    g.replay()
    assert str(rt.read(y)) == "reader(norm(h1))"


def test_record_stream_outside_capture_waits_for_the_recorded_streams_work(rt):
    main, alt = rt.current_stream, rt.Stream("alt")
    x = rt.from_host((4, 8), "x", value="x1")
    alt.wait_stream(main)
    x.record_stream(alt)
    with rt.stream(alt):
        rt.launch("slow_reader", reads=[x], writes=[rt.empty((4, 8), "y")], duration_us=500.0)
    old = x.ptr
    rt.release(x)
    assert rt.empty((4, 8), "soon").ptr != old        # alt may still be reading it
    rt.synchronize()
    assert rt.empty((4, 8), "later").ptr == old       # alt's work is done: the block is reused


def test_record_stream_on_the_allocation_stream_is_ignored(rt):
    x = rt.from_host((4, 8), "x", value="x1")
    x.record_stream(rt.current_stream)
    old = x.ptr
    rt.release(x)
    assert rt.empty((4, 8), "next").ptr == old
