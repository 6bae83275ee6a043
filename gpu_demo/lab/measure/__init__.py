"""Measurements and conformance: what the H200 showed, and whether the simulator agrees.

``benchmark`` (replay latency, overlap, PDL), ``calibration`` and ``host_costs``
(the simulator's profile), ``profiling`` (torch.profiler helpers),
``overhead``, ``overhead_stacks`` and ``untraced_passes`` (what recording costs),
``probe_recorder`` (the recorder on plain PyTorch programs), ``conformance``
and ``prediction`` (the simulator against the committed results),
``provenance`` (where a result came from; ``RESULTS_DIR``).
"""
