"""The guard for users' own code: is this capture safe?

``check.check_capture`` / ``assert_capture_safe``: record a callable's capture
(``gpu_demo.record``), explain it with ``simlib.checker``, and prove it by a
differential replay (``differential``, in one child process, or a warm worker
inside ``warm_checks()``; ``target`` says what can be checked and how it
travels; ``stochastic`` why random ops still compare exactly;
``pytest_plugin`` one warm worker per test session). ``process``:
``capture_checked()`` for a block, and the whole-process check
(``CAPTURE_ORDER_CHECK``, entered through ``gpu_demo.autocheck``). For any
program: imports nothing from the MoE demo.
"""
