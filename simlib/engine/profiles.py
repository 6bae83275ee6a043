"""Timing profiles calibrated from measurements on real GPUs.

``H200`` holds the values ``python -m gpu_demo bench`` read off an NVIDIA H200
(driver 580.159.04, CUDA 13.0, torch 2.11.0, Triton 3.6.0) on 2026-11-29,
committed in ``gpu_demo/lab/results/calibration-h200.json`` and
``bench-h200.json``; ``tests/gpu_demo/measure/test_fidelity.py`` keeps the two in step.
Where the real module and the simulated program split a role into different
numbers of kernels, the role's measured total is divided evenly over the
simulated kernels, so each role costs what it costs on the GPU.

An eager forward's time is host time per op, which a profile of kernel
parameters cannot hold: ``simlib.programs.eager_program`` replays the real module's
ops at the costs recorded in ``gpu_demo/lab/results/host-costs-h200.json``.
"""

from __future__ import annotations

from .timing import Profile

H200 = Profile(
    name="H200",
    launch_host_us=11.72,          # eager_op_launch_host_us: host time of one small eager op
    # A graph of one 0.864 us kernel took 3.952 us between CUDA events (floor_one_kernel):
    # the device-side cost of starting work.
    launch_latency_us=3.088,
    graph_launch_us=22.687,        # graph_launch_host_us: host time of graph.replay()
    graph_node_gap_us=0.257,       # same_stream_gap_us.median inside a replay
    # The measured join gap (0.224 us, last kernel on alt to the first after the join)
    # is no longer than the same-stream gap: a join costs nothing extra inside a replay.
    cross_stream_gap_us=0.0,
    # First kernel of the branch captured second: 7.743 us (shared_first) and 8.384 us
    # (routed_first) after the replay began (bench diagnostics).
    graph_branch_launch_us=8.06,
    # The PDL residual add started 0.03 us after its predecessor ended (0.26 us without
    # PDL): PDL removed the gap but no prologue ran before the predecessor finished.
    pdl_prologue_us=0.0,
    kernel_us={
        "norm": 1.92,
        "gate": 2.656,
        "topk": 14.863,
        "permute": 22.144,
        "experts.gate_up": 13.968 / 3, "experts.act": 13.968 / 3, "experts.down": 13.968 / 3,
        "combine": 9.297,
        "shared": 11.648 / 3,
        "merge": 2.432,
        # Not measured: eager-only work keeps the generic values.
        "copy": 2.0, "fill": 1.5, "other": 3.0,
    },
    source="gpu_demo/lab/results/calibration-h200.json (NVIDIA H200, 2026-11-29)",
)

PROFILES = {"generic": Profile(), "H200": H200}
