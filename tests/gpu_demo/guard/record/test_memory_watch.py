"""The memory watch a serving program's recorder stands aside behind: which calls it hands on to be recorded."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_demo.guard.record.memory_watch import MemoryWatch, Ranges, install_at_bottom, uninstall  # noqa: E402


def test_ranges_merge_and_say_whether_a_span_overlaps_one():
    ranges = Ranges([(100, 200), (150, 300), (500, 501), (400, 400)])   # merged; an empty one counts a byte
    assert ranges.los == [100, 400, 500] and ranges.his == [300, 401, 501]
    assert ranges.touches(299, 10) and ranges.touches(50, 51) and ranges.touches(400, 0)
    assert not ranges.touches(300, 100) and not ranges.touches(0, 100) and not Ranges()


def watching(*tensors: torch.Tensor) -> tuple[MemoryWatch, list[str]]:
    picked: list[str] = []

    def record(func, args, kwargs):  # noqa: ANN001
        picked.append(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)

    watch = MemoryWatch(record)
    watch.ranges = Ranges((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    return watch, picked


def test_only_calls_that_touch_watched_memory_are_handed_on_metadata_reads_never():
    out, other = torch.randn(8, 4), torch.randn(8, 4)
    watch, picked = watching(out)
    with watch:
        other.add(1)                                # elsewhere: runs as it is
        out.shape, out.dtype, out.size(0), out.dim(), out.data_ptr()   # metadata only
        out[:2].clone()                             # a view of it, then a read of the view
        torch.stack([other, out])                   # a list holding it
        torch.add(other, 1, out=torch.empty(0))     # elsewhere, out= included
        torch.mul(other, 2, out=out)                # written through out=
    assert picked == ["__getitem__", "clone", "stack", "mul"]


def test_installed_at_the_bottom_it_stays_under_the_programs_own_modes_and_leaves_cleanly():
    out = torch.randn(4)
    watch, picked = watching(out)
    seen = []

    class Programs(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Programs():
        install_at_bottom(watch)                    # a replay inside the program's mode stands the recorder aside
        out.add(1)
        assert torch._C._get_function_stack_at(0) is watch
    assert torch._C._len_torch_function_stack() == 1   # the program's mode left in its own order
    uninstall(watch)
    assert torch._C._len_torch_function_stack() == 0 and picked == ["add"] and seen
