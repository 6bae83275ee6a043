"""What a Triton kernel reads and writes, read off its source (no Triton needed)."""

from __future__ import annotations

import pytest

from gpu_demo.guard.record.triton_access import access_of, of_kernel


def access(source: str) -> dict[str, str]:
    import ast
    import textwrap

    (kernel,) = [n for n in ast.parse(textwrap.dedent(source)).body if isinstance(n, ast.FunctionDef)]
    result = access_of(source, tuple(a.arg for a in kernel.args.args))
    assert result.unknown is None, result.unknown
    return result.access


def test_a_direct_store_writes_its_pointer_and_a_load_reads_its_own():
    assert access("""
        def copy(src, dst, numel, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < numel
            tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)
    """) == {"src": "r", "dst": "w", "numel": "r", "BLOCK": "r"}


def test_a_pointer_derived_through_assignments_is_followed_to_the_store():
    assert access("""
        def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            base = out_ptr + pid * BLOCK
            ptrs = base + tl.arange(0, BLOCK)
            target = ptrs
            doubled = tl.load(x_ptr + tl.arange(0, BLOCK)) * 2
            tl.store(target, doubled.to(out_ptr.dtype.element_ty), mask=tl.arange(0, BLOCK) < n)
    """) == {"x_ptr": "r", "out_ptr": "w", "n": "r", "BLOCK": "r"}


def test_the_derivation_order_does_not_matter_and_augmented_assignments_count():
    # ``later`` is assigned from ``early`` textually before ``early`` gets the pointer (a loop).
    assert access("""
        def ring(a_ptr, b_ptr, steps):
            later = 0
            early = 0
            for i in range(steps):
                later = early + 1
                early = b_ptr
            p = a_ptr
            p += 4
            tl.store(later, 1.0)
            tl.store(pointer=p, value=tl.load(p))
    """) == {"a_ptr": "rw", "b_ptr": "w", "steps": "r"}


def test_an_atomic_reads_and_writes_and_its_old_value_is_no_pointer():
    assert access("""
        def histogram(idx_ptr, counts_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            bins = tl.load(idx_ptr + offs, mask=offs < n)
            old = tl.atomic_add(counts_ptr + bins, 1)
            tl.store(counts_ptr + bins, old)
    """) == {"idx_ptr": "r", "counts_ptr": "rw", "n": "r", "BLOCK": "r"}


def test_a_loaded_index_does_not_make_the_index_tensor_written():
    assert access("""
        def scatter(values_ptr, index_ptr, out_ptr):
            i = tl.arange(0, 16)
            where = tl.load(index_ptr + i)
            tl.store(out_ptr + where, tl.load(values_ptr + i))
    """) == {"values_ptr": "r", "index_ptr": "r", "out_ptr": "w"}


def test_an_argument_that_is_loaded_and_stored_is_read_and_written():
    assert access("""
        def add_into(acc_ptr, x_ptr):
            i = tl.arange(0, 16)
            tl.store(acc_ptr + i, tl.load(acc_ptr + i) + tl.load(x_ptr + i))
    """) == {"acc_ptr": "rw", "x_ptr": "r"}


def test_block_pointers_and_tensor_descriptors_store_through_their_base():
    assert access("""
        def tiles(a_ptr, b_ptr, c_ptr, desc, M, N):
            a = tl.make_block_ptr(base=a_ptr, shape=(M, N), strides=(N, 1), offsets=(0, 0),
                                  block_shape=(16, 16), order=(1, 0))
            b = tl.advance(tl.make_block_ptr(b_ptr, (M, N), (N, 1), (0, 0), (16, 16), (1, 0)), (16, 0))
            c = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[16, 16])
            tile = tl.load(a, boundary_check=(0, 1))
            tl.store(b, tile)
            c.store([0, 0], tile)
            desc.atomic_add([0, 0], desc.load([0, 0]))
    """) == {"a_ptr": "r", "b_ptr": "w", "c_ptr": "w", "desc": "rw", "M": "r", "N": "r"}


def test_a_pointer_handed_to_a_helper_may_be_written_there():
    assert access("""
        def outer(x_ptr, y_ptr, z_ptr, w_ptr):
            i = tl.arange(0, 16)
            _store_twice(y_ptr + i, tl.load(x_ptr + i))
            helpers.fill(w_ptr, 0.0, x_ptr.dtype.element_ty)
            v = tl.load(z_ptr + i).to(z_ptr.dtype.element_ty)
            w = (v + 1).to(tl.float32)
            tl.store(z_ptr + i, tl.maximum(w, 0.0))
    """) == {"x_ptr": "r", "y_ptr": "rw", "z_ptr": "rw", "w_ptr": "rw"}


def test_source_that_does_not_parse_leaves_every_argument_read_and_written():
    result = access_of("def broken(a_ptr, b_ptr):\n    tl.store(a_ptr,\n", ("a_ptr", "b_ptr"))
    assert result.access == {"a_ptr": "rw", "b_ptr": "rw"} and "does not parse" in result.unknown
    assert result.of("a_ptr") == "rw" and result.of("anything") == "rw"


@pytest.mark.parametrize("source, names, why", [
    (None, ("a",), "no source"),
    ("x = 1\n", ("a",), "no function definition"),
    ("def k(a, b):\n    tl.store(a, 1)\n", ("a", "c"), "parameters (a, b) are not the kernel's (a, c)"),
])
def test_source_that_cannot_be_matched_to_the_kernel_is_unknown(source, names, why):
    result = access_of(source, names)
    assert why in result.unknown and set(result.access.values()) == {"rw"}


def test_a_kernel_object_is_read_through_its_source_or_its_python_function():
    def kernel(src, dst):
        tl.store(dst, tl.load(src))  # noqa: F821 (never run: only read)

    class WithSource:
        src = "def kernel(src, dst):\n    tl.store(dst, tl.load(src))\n"
        arg_names = ["src", "dst"]

    class WithFunction:
        fn = staticmethod(kernel)
        arg_names = ["src", "dst"]

    assert of_kernel(WithSource()).access == of_kernel(WithFunction()).access == {"src": "r", "dst": "w"}
    assert of_kernel(WithSource()) is of_kernel(WithSource())   # cached per source
