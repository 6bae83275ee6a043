"""Beyond one GPU: the tensor-parallel MoE, and the capture-order guard under torchrun.

``tp_moe``   the dual-stream MoE sharded over the ranks, an all-reduce in each merge
``ranks``    every rank's trace to rank 0 over the job's store; ``ranks_checked()``
``run``      the per-rank cases of ``torchrun ... -m gpu_demo.distributed run --tp N``

The cross-rank rule itself (12, ``collective_mismatch``) is pure Python in
``simlib.checker.rule_cross_rank``; collectives reach the recorder as ``c10d``
ops (``gpu_demo.record.op_plans``).
"""
