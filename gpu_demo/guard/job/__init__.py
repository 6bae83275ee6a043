"""The guard across the ranks of a torchrun job: what no rank can see alone.

``ranks``      every rank's trace to rank 0 over the job's store, checked together;
               ``ranks_checked()``, ``capture_checked()`` for a job
``whole_job``  the whole-process check on every rank, merged on rank 0
               (``torchrun ... -m gpu_demo.distributed check script.py``)

The cross-rank rule itself (12, ``collective_mismatch``) is pure Python in
``simlib.checker.rule_cross_rank``; collectives reach the recorder as ``c10d``
ops (``gpu_demo.guard.record.op_plans``).
"""
