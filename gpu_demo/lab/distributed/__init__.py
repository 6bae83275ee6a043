"""Beyond one GPU: the dual-stream MoE, tensor-parallel over torchrun's ranks.

``tp_moe``   the dual-stream MoE sharded over the ranks, an all-reduce in each merge
``run``      the per-rank cases of ``torchrun ... -m gpu_demo.distributed run --tp N``
``example``  a small job the guard's job-wide check (``gpu_demo.guard.job``) is shown on
"""
