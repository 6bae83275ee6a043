"""``torchrun --nproc-per-node N -m gpu_demo.distributed (run | check) ...``: the command, where users type it.

``check`` is the guard's job-wide check (``gpu_demo.guard.job``), ``run`` the lab's tensor-parallel
MoE (``gpu_demo.lab.distributed``); both are read by ``gpu_demo.lab.cli.torchrun``.
"""

from gpu_demo.lab.cli.torchrun import main_and_leave

if __name__ == "__main__":
    main_and_leave()
