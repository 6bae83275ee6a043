"""``Intervals``, the address map every rule finds overlaps in, against a plain list of ranges."""

from hypothesis import given, settings
from hypothesis import strategies as st

from simlib.checker.intervals import Intervals

spans = st.tuples(st.integers(0, 200), st.integers(1, 60)).map(lambda s: (s[0], s[0] + s[1]))
ops = st.lists(st.tuples(st.sampled_from(["put", "update", "discard", "clear"]), st.lists(spans, min_size=1, max_size=4)),
               max_size=30)


def _overlapping(held: dict, lo: int, hi: int) -> set:
    return {key for key in held if key[0] < hi and lo < key[1]}


@settings(max_examples=200, deadline=None)
@given(ops, st.lists(spans, min_size=1, max_size=10))
def test_queries_agree_with_a_plain_list_after_any_changes(changes, queries):
    intervals: Intervals[int] = Intervals()
    held: dict = {}
    for n, (op, ranges) in enumerate(changes):
        if op == "put":
            for lo, hi in ranges:
                intervals.put(lo, hi, n)
                held[lo, hi] = n
        elif op == "update":
            intervals.update(((r, n) for r in ranges))
            held.update((r, n) for r in ranges)
        elif op == "discard":
            for lo, hi in ranges:
                intervals.discard(lo, hi)
                held.pop((lo, hi), None)
        else:
            for lo, hi in ranges:
                intervals.clear(lo, hi)
                held = {k: v for k, v in held.items() if not lo <= k[0] < hi}
    assert [k for k, _ in intervals.items()] == sorted(held)
    for lo, hi in queries:
        want = _overlapping(held, lo, hi)
        assert {k for k, _ in intervals.overlapping(lo, hi)} == want
        assert intervals.touches(lo, hi) == bool(want)
        assert all(intervals.get(*k) == held[k] for k in want)


def test_discard_forgets_only_the_range_named():
    intervals = Intervals([((0, 10), "a"), ((0, 20), "b"), ((5, 8), "c")])
    intervals.discard(0, 10)
    intervals.discard(100, 200)   # not held: nothing happens
    assert [k for k, _ in intervals.items()] == [(0, 20), (5, 8)]
    assert intervals.touches(9, 10) and not intervals.touches(20, 30)
