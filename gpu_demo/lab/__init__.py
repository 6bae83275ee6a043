"""The lab around the guard: the incident for real on a GPU, and everything that measures the guard.

``moe/``          the dual-stream MoE of the incident: model, kernels, harness, decode
``distributed/``  that MoE tensor-parallel over torchrun's ranks
``corpus/``       small plain-PyTorch programs, hazardous and safe, and the runner of their GPU truth
``zoo/``          small random-weight timm and Hugging Face models the guard must pass
``measure/``      benchmarks, calibration, the recorder's overhead, conformance, provenance
``cli/``          the command lines (``python -m gpu_demo``, ``torchrun ... -m gpu_demo.distributed``)
``exercise/``     the tutorial's GPU exercise: a layer to write, judged by the guard
``results/``      the results recorded on real GPUs, read with json alone (no torch)

The lab stands on the guard (``gpu_demo.guard``); the guard never reaches into the lab.
"""
