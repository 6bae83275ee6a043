"""``benchmarks/process_startup_overhead.py``'s ``quiet`` (issue 34): which repeats met the host at its
quickest, on made-up runs (the benchmark itself captures real graphs: its results are checked in
``tests/gpu_demo/lab/measure/test_gpu_demo_results.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def startup():  # noqa: ANN201
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        import process_startup_overhead
    return process_startup_overhead


def repeat(unchecked_s: float, checked_s: float, probes_ms: tuple[float, float]) -> tuple[dict, dict]:
    return ({"startup_s": unchecked_s, "host": {"probe_s": probes_ms[0] / 1000}},
            {"startup_s": checked_s, "host": {"probe_s": probes_ms[1] / 1000}})


def test_a_repeat_with_either_child_in_a_slow_spell_is_left_out_of_the_quiet_ratio(startup):
    runs = [repeat(0.36, 0.72, (6.5, 6.6)),    # 2.0x, both quick
            repeat(0.37, 0.77, (6.6, 7.8)),    # 2.08x, 7.8 ms is within 1.2x of 6.5
            repeat(0.37, 1.10, (6.5, 15.0)),   # 2.97x: its checked child met a slow spell
            repeat(0.60, 0.74, (11.0, 6.5))]   # 1.23x: its unchecked child did
    found = startup.quiet(runs)
    assert found["repeats"] == 2 and found["probe_within"] == startup.QUIET == 1.2
    assert found["ratio"] == pytest.approx((0.72 / 0.36 + 0.77 / 0.37) / 2)


def test_no_quiet_repeat_gives_no_ratio_rather_than_a_made_up_one(startup):
    runs = [repeat(0.36, 0.72, (6.5, 9.0)), repeat(0.37, 0.74, (9.5, 6.5))]
    assert startup.quiet(runs) == {"probe_within": 1.2, "repeats": 0, "ratio": None}


def test_a_child_that_reported_no_probe_is_never_counted_quiet(startup):
    assert startup.quiet_repeats([(6.5, None), (6.6, 7.0), (None, None)]) == [1]
    assert startup.quiet_repeats([(None, None)]) == []
