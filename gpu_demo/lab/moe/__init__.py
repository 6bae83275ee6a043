"""The dual-stream MoE demo: the incident, for real, on a GPU.

``model`` (``DualStreamMoELayer`` and ``MoEStack``, in both issue orders and with every fix),
``kernels`` and ``triton_kernels`` (the shared expert's three consumers, the PDL
residual add), ``dual_streams`` (fork and join), ``faults`` (the capture
mistakes of the matrix), ``settings`` (dtype, device, seed), ``harness`` (one
configuration captured, replayed and judged, each in its own process),
``decode`` (greedy decoding through captured layers), ``recording`` (the stack
recorded, for ``python -m gpu_demo record``). Built on the guard's ``protocol`` and
``record`` (``gpu_demo.guard``).
"""
