"""What recording and checking a capture costs, against the same capture without them.

Issue 10's target: recording a 61-layer capture with ``gpu_demo.guard.record.recorder`` and
checking it with ``simlib.checker`` takes less than 3 times as long as warming
up and capturing it plainly. One repeat of each, interleaved so drift hits all,
and the ratio is the median over repeats of each recorded pass's time over the
plain pass's just before it (the H200 host runs everything 1.6 times slower for
seconds at a time: medians taken apart would pair a slow spell with a fast one):

``untraced``  ``gpu_demo.guard.protocol.capture_replay.warm_up`` (three eager forwards on a side stream) and a
              ``torch.cuda.graph`` capture, then a device sync, timed in a child
              process that never records (``gpu_demo.lab.measure.untraced_passes``), on the same CPU
              core as this process: the capture as a program that does not record
              runs it. ``ratio`` is against this
``plain``     the same, timed in this process, where torch's GPU-trace callbacks
              stay on once the first recording has started them
              (``ratio_same_process`` is against this)
``floor``     the same under a dispatch mode that only calls each op, as the
              recorder calls it (``gpu_demo.guard.record.dispatch_mode``): the least a Python
              dispatch mode, and so this recorder, can cost
``recorded``  ``record_capture(fn, inputs, replays=0)``: the same warm-up (its
              first call unrecorded, as ``record_capture`` does) and capture
              under the recorder, then a device sync (``record_s``), and
              ``check(trace)`` (``check_s``)

A first untimed pass of each compiles kernels and fills the allocator's caches.
Each timed pass starts from a collected heap (``gc.collect()``, untimed), as a
recording in a fresh process does; the collections a recording triggers
itself are timed (``gc_s``: CPython collects the whole heap, torch's included,
once enough of the trace's objects have piled up, 0.1 to 0.2 s a time).
Per op (``ops``: the ops one pass dispatches): ``floor_us_per_op`` and
``record_us_per_op`` are the medians' excess over ``plain``, and
``trace_callbacks_us_per_op`` that of ``plain`` over ``untraced``: what torch's
GPU-trace callbacks (``gpu_demo.guard.record.hooks``) cost each op once on, with nobody
listening. ``gc_s`` is the time the recording spent in Python's garbage
collector. Two stacks: the project's ``MoEStack`` with
``MoEConfig(layers=61, order="shared_first")``, and a plain-PyTorch stack of 61
``safe_dual_stream`` corpus layers (no project annotations: what the recorder
sees in user code; ``gpu_demo.lab.measure.overhead_stacks``).

``run_dry_overhead`` measures the same on a machine without CUDA, where
``record_capture`` is a dry run (two eager forwards and a ``dry_capture``
forward) and no callbacks exist, so the ratio is against ``plain``: the
recorder's cost per op on this CPU, reproducibly, without a GPU.
Its MoE stack is shrunk (``DRY_RUN_SIZES``): the same ops and records, with
CPU matmuls small enough not to drown the per-op cost being measured; it runs
one intra-op thread and times with this process's CPU time
(``time.process_time``), so that other busy processes on a shared machine
neither stall its matmuls nor count against it.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator

import torch

from gpu_demo.guard.record.capture import RECORDED_WARMUPS, record_capture
from gpu_demo.guard.record.dispatch_mode import QuickDispatchMode, op_caller
from gpu_demo.guard.record.dry_run import dry_capture
from gpu_demo.lab.measure.overhead_stacks import STACKS, gpu_pass, moe_stack
from gpu_demo.lab.measure.untraced_passes import UntracedPasses
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import check

TARGET_RATIO = 3.0
DRY_RUN_SIZES = {"hidden": 64, "intermediate": 128}
Recorded = tuple[float, float, dict[str, Any]]
Clock = Callable[[], float]


class EmptyDispatchMode(QuickDispatchMode):
    """Calls each op and nothing else, the way the recorder calls it; counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        self.ops += 1
        return op_caller(func)(*args, **(kwargs or {}))


def compare(plain: Callable[[], float], recorded: Callable[[], Recorded], repeats: int,
            floor: Callable[[], float] | None = None, ops: int | None = None,
            untraced: Callable[[], float] | None = None, settle: Callable[[], Any] = gc.collect) -> dict[str, Any]:
    """Time ``plain``, ``floor``, ``untraced`` and ``recorded`` ``repeats`` times each,
    interleaved in that order, after one untimed pass, each after ``settle()``. ``ratio``:
    the median of (record + check) / untraced per repeat, the two passes of a pair timed
    back to back (without ``untraced``: / plain); with ``ops``, the cost per op.

    ``untraced`` times a plain pass in a process that never recorded
    (``gpu_demo.lab.measure.untraced_passes``): once a recorder has run, torch's GPU-trace callbacks stay on
    in this one for good, and its plain passes pay for them (``ratio_same_process`` is
    against those)."""
    runs = [plain, recorded, *([floor] if floor else []), *([untraced] if untraced else [])]
    for run in runs:
        run()
    untraced_s: list[float] = []
    plain_s: list[float] = []
    floor_s: list[float] = []
    record_s: list[float] = []
    check_s: list[float] = []
    sizes: dict[str, Any] = {}
    gc_s: list[float] = []
    for _ in range(repeats):
        settle()
        plain_s.append(plain())
        if floor:
            settle()
            floor_s.append(floor())
        settle()
        if untraced:
            untraced_s.append(untraced())   # settles in its own process; this one's heap is as settled
        rec, chk, sizes = recorded()        # right after the untraced pass it is paired with
        record_s.append(rec)
        check_s.append(chk)
        gc_s.append(sizes.pop("gc_s", 0.0))
    total = [r + c for r, c in zip(record_s, check_s)]
    same_process = statistics.median(t / p for t, p in zip(total, plain_s))
    ratio = statistics.median(t / u for t, u in zip(total, untraced_s)) if untraced else same_process
    result = {
        "plain_s": _stats(plain_s), **({"plain_untraced_s": _stats(untraced_s)} if untraced else {}),
        "record_s": _stats(record_s), "check_s": _stats(check_s),
        "record_and_check_s": _stats(total), "ratio": round(ratio, 3),
        **({"ratio_same_process": round(same_process, 3)} if untraced else {}),
        "target_ratio": TARGET_RATIO,
        "within_target": ratio < TARGET_RATIO, **sizes,
    }
    if any(gc_s):
        result["gc_s"] = _stats(gc_s)
    if floor:
        result["floor_s"] = _stats(floor_s)
    if ops:
        result["ops"] = ops
        result["record_us_per_op"] = _per_op(record_s, plain_s, ops)
        if floor:
            result["floor_us_per_op"] = _per_op(floor_s, plain_s, ops)
        if untraced:
            result["trace_callbacks_us_per_op"] = _per_op(plain_s, untraced_s, ops)
    return result


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 4), "min": round(min(samples), 4),
            "samples": [round(s, 4) for s in samples]}


def _per_op(samples: list[float], plain: list[float], ops: int) -> float:
    return round((statistics.median(samples) - statistics.median(plain)) / ops * 1e6, 2)


@contextmanager
def collector_time() -> Iterator[list[float]]:
    """Seconds spent in garbage collections inside (the one entry of the yielded list)."""
    spent, started = [0.0], [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - started[0]

    gc.callbacks.append(callback)
    try:
        yield spent
    finally:
        gc.callbacks.remove(callback)


PROBE_LOOPS = 200_000


def host_speed_probe() -> float:
    """Seconds a fixed pure-Python loop takes now (about 10 ms on a quiet host): the host's speed at
    this moment. On the H200 the same unchecked start-up has taken 0.38 s to 0.62 s within one call,
    and three of seven checked ones ran 1.2 to 1.5 times slower than the rest, checks and collector
    alike: a run's probe tells whether the host was slow as it began."""
    started = time.perf_counter()
    total = 0
    for i in range(PROBE_LOOPS):
        total += i & 7
    return time.perf_counter() - started


@contextmanager
def host_usage() -> Iterator[dict[str, float]]:
    """The host's speed on entry (``probe_s``, ``host_speed_probe``, not counted inside) and what it
    gave this process inside: ``cpu_s`` (user and system, all threads), ``involuntary_switches``
    (times the scheduler took a CPU away) and ``minor_faults``. A run whose wall time is well over
    its CPU time, or that was switched out often, was held off the CPU by other work rather than
    slowed by its own."""
    usage: dict[str, float] = {"probe_s": host_speed_probe()}
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        yield usage
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        usage.update(cpu_s=after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                     involuntary_switches=after.ru_nivcsw - before.ru_nivcsw,
                     minor_faults=after.ru_minflt - before.ru_minflt)


def _dry_pass(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> None:
    for _ in range(RECORDED_WARMUPS):   # the dry run records every warm-up call
        fn(*inputs)
    with dry_capture():
        fn(*inputs)


def timed(one_pass: Callable[[], None], clock: Clock,
          mode: Callable[[], AbstractContextManager[Any]] | None = None) -> Callable[[], float]:
    """A function that times one pass, inside ``mode()`` (a dispatch mode...) if given."""
    def run() -> float:
        started = clock()
        if mode is None:
            one_pass()
        else:
            with mode():
                one_pass()
        return clock() - started
    return run


def _timed_recorded(fn: Callable[..., Any], inputs: list[torch.Tensor], clock: Clock) -> Callable[[], Recorded]:
    def run() -> Recorded:
        with collector_time() as in_gc:
            started = clock()
            trace = record_capture(fn, inputs, replays=0)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            recorded = clock()
        findings = check(trace)
        checked = clock()
        error = trace.meta.get("capture_error")
        if error:
            raise RuntimeError(f"the recorded capture failed ({error}); the overhead of a failed capture means nothing")
        return recorded - started, checked - recorded, {"records": len(trace.records), "findings": len(findings),
                                                         "gc_s": in_gc[0]}
    return run


def ops_in(one_pass: Callable[[], None]) -> int:
    """The ops one pass dispatches."""
    with EmptyDispatchMode() as counter:
        one_pass()
    return counter.ops


def _measure(fn: Callable[..., Any], inputs: list[torch.Tensor], repeats: int,
             one_pass: Callable[[Callable[..., Any], list[torch.Tensor]], None], clock: Clock,
             untraced: Callable[[], float] | None = None) -> dict[str, Any]:
    def run() -> None:
        one_pass(fn, inputs)

    return compare(timed(run, clock), _timed_recorded(fn, inputs, clock), repeats,
                   floor=timed(run, clock, EmptyDispatchMode), ops=ops_in(run), untraced=untraced)


def run_overhead(layers: int = 61, repeats: int = 5, settings: RunSettings | None = None) -> dict[str, Any]:
    """Both stacks, on this machine's GPU."""
    settings = settings or RunSettings()
    core = min(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else None   # Linux only
    results: dict[str, Any] = {"layers": layers, "repeats": repeats, "settings": settings.to_dict(), "core": core}
    with torch.no_grad(), _on_core(core):
        for name, make in STACKS.items():
            fn, inputs = make(layers, settings)
            with UntracedPasses(name, layers, settings, core=core) as untraced:
                results[name] = _measure(fn, inputs, repeats, gpu_pass, time.perf_counter, untraced)
            del fn, inputs
    return results


@contextmanager
def _on_core(core: int | None) -> Iterator[None]:
    """This thread on one CPU core inside; the untraced child runs on the same one, so both
    passes of a pair run on one core, whatever speed the host gives it then (``None``: no
    affinity on this system, nothing changes)."""
    if core is None:
        yield
        return
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def run_dry_overhead(layers: int = 61, repeats: int = 5) -> dict[str, Any]:
    """Both stacks as a dry run on the CPU (float32; the MoE stack at ``DRY_RUN_SIZES``)."""
    if torch.cuda.is_available():
        raise RuntimeError("the dry run is for machines without CUDA; hide the GPUs (CUDA_VISIBLE_DEVICES=) "
                           "or measure the real capture without --dry-run")
    settings = RunSettings(dtype="float32", device="cpu")
    results: dict[str, Any] = {"layers": layers, "repeats": repeats, "settings": settings.to_dict(),
                               "mode": "dry_run", "moe_sizes": DRY_RUN_SIZES, "intra_op_threads": 1,
                               "clock": "process_time"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # OpenMP threads spin against any other busy process: 40x slower matmuls
    try:
        with torch.no_grad():
            for name, make in STACKS.items():
                fn, inputs = make(layers, settings, **(DRY_RUN_SIZES if make is moe_stack else {}))
                results[name] = _measure(fn, inputs, repeats, _dry_pass, time.process_time)
    finally:
        torch.set_num_threads(threads)
    return results
