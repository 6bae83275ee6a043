"""What a benchmark's child reports of the host it ran on (no GPU)."""

from __future__ import annotations

from gpu_demo.lab.measure.overhead import host_speed_probe, host_usage

PAGE, HUGE_PAGE = 4096, 2 << 20


def test_host_usage_counts_the_pages_touched_and_the_cpu_spent_inside_only():
    with host_usage() as usage:
        memory = bytearray(64 << 20)               # mapped, not yet touched
        memory[::PAGE] = b"\x01" * (len(memory) // PAGE)
        sum(range(2_000_000))
    assert set(usage) == {"probe_s", "cpu_s", "involuntary_switches", "minor_faults"}
    assert usage["minor_faults"] >= len(memory) // HUGE_PAGE   # a fault per page written (4 KiB, or 2 MiB where huge)
    assert usage["cpu_s"] > 0 and usage["involuntary_switches"] >= 0
    with host_usage() as idle:
        pass
    assert idle["minor_faults"] < usage["minor_faults"] and idle["cpu_s"] < usage["cpu_s"]


def test_the_probe_times_a_fixed_loop():
    assert 0 < host_speed_probe() < 10
