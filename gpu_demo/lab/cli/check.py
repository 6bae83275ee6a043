"""``python -m gpu_demo check | corpus | recorder-overhead``: the guard from the shell.

``check TARGET``          record, check and (on a GPU) differentially replay one callable;
                          exit 0 passed, 1 a hazard (or graph and eager differ), 2 bad
                          usage, 3 could not check, 4 a CPU dry run only (nothing seen,
                          but nothing replayed: not a pass)
``corpus``                the corpus on a GPU: truth and guard per program, a table and JSON
                          (``--summary``: docs/results.md's paragraph from the committed results)
``recorder-overhead``     time to record and check a 61-layer capture against the plain capture
                          (``--dry-run``: the recorder's cost per op on a machine without CUDA)

TARGET is ``module:callable`` or ``path/to/file.py:callable``. A class, a function of no parameters, or a function
whose first two parameters are ``device, dtype`` is a factory, built on the device
in the child; it may return ``(fn, example_inputs)``, and then ``--input-shape`` is
optional. Anything else is called on the inputs. See ``gpu_demo.guard.target``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from gpu_demo.guard.protocol.tolerance import DTYPES, dtype_name
from gpu_demo.lab.cli.common import (
    cannot_write,
    default_path,
    format_table,
    no_cuda,
    positive_int,
    refuse_unwritable,
    refuse_with_summary,
    write_result,
)
from simlib.glossary import COULD_NOT_CHECK, NOT_ON_GPU, PASSED

BAD_USAGE = 2


def register(commands: argparse._SubParsersAction) -> None:
    """Add the three subcommands to ``python -m gpu_demo``'s parser (``args.handler`` runs one)."""
    check = commands.add_parser(
        "check", help="is a callable safe to capture? (recording, checker, replay)",
        description="Record a callable's capture, run the checker over it, and on a GPU replay it with fresh "
                    "inputs against an eager reference. Without CUDA only a CPU dry run runs, which is never a pass.",
        epilog="exit status: 0 passed, 1 NOT capture-safe (or graph and eager differ), 2 bad usage, "
               "3 could not check, 4 NOT CHECKED ON A GPU (a CPU dry run only)")
    check.add_argument("target", help="module:callable or file.py:callable (a function, a class or a factory; "
                                      "see gpu_demo.guard.target)")
    check.add_argument("--input-shape", type=_shape, action="append", default=[], metavar="D0,D1,...",
                       help="shape of one example input (repeat for several inputs; random values)")
    check.add_argument("--dtype", type=dtype_name, choices=tuple(DTYPES), default="bfloat16",
                       help="dtype of inputs and factories (bf16, fp16 and fp32 are taken too)")
    check.add_argument("--replays", type=positive_int, default=3, help="replays with fresh inputs")
    check.add_argument("--reference", help="module:callable computing the right answer eagerly (default: the target)")
    check.add_argument("--strict", action="store_true", help="fail on races (verdict unordered) too")
    check.add_argument("--seed", type=int, default=0, help="random seed of the example and replay inputs")
    check.add_argument("--timeout", type=positive_int, default=600, help="seconds before the child is abandoned")
    check.add_argument("--json", type=Path, help="also write the report as JSON, with provenance (default: not written)")
    check.set_defaults(handler=_check)

    corpus = commands.add_parser("corpus", help="the guard against the corpus on a GPU (truth and verdicts)")
    corpus.add_argument("--out", type=Path, help="JSON results (default results/corpus-<gpu>.json)")
    corpus.add_argument("--jobs", type=positive_int, default=1, help="programs run at once")
    corpus.add_argument("--replays", type=positive_int, default=3, help="replays with fresh inputs per program")
    corpus.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16", help="dtype of weights and inputs")
    corpus.add_argument("--timeout", type=positive_int, default=300, help="seconds before a child is abandoned")
    corpus.add_argument("--only", nargs="+", metavar="PROGRAM",
                        help="run (or with --summary, show) only these programs (default: every program)")
    corpus.add_argument("--anchors", action="store_true",
                        help="also run each program under TORCH_CUDA_SANITIZER=1 and compute-sanitizer memcheck")
    corpus.add_argument("--summary", action="store_true",
                        help="print docs/results.md's corpus paragraph from the committed results (no GPU; "
                             "with --only, those programs' rows)")
    corpus.set_defaults(handler=_corpus, command_parser=corpus)

    overhead = commands.add_parser("recorder-overhead", help="record+check time of a deep capture vs plain capture")
    overhead.add_argument("--layers", type=positive_int, default=61, help="layers in each stack captured")
    overhead.add_argument("--repeats", type=positive_int, default=5, help="timed repeats of each (median reported)")
    overhead.add_argument("--out", type=Path, help="JSON results (default results/recorder-overhead-<gpu>.json)")
    overhead.add_argument("--dry-run", action="store_true",
                          help="no GPU: time the recorder's CPU dry run per op (writes JSON only with --out)")
    overhead.set_defaults(handler=_overhead)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape; write sizes separated by commas, e.g. 16,512")
    return dims


# -- commands --------------------------------------------------------------------------------

def _check(args: argparse.Namespace, argv: list[str]) -> int:
    from gpu_demo.guard.check import check_capture
    from gpu_demo.guard.target import TargetError

    refused = refuse_unwritable("check", args, "json")
    if refused is not None:
        return refused
    dtype = DTYPES[args.dtype]
    inputs = [torch.randn(shape, generator=torch.Generator().manual_seed(args.seed)).to(dtype)
              for shape in args.input_shape]
    try:
        report = check_capture(args.target, *inputs, reference=args.reference, replays=args.replays,
                               strict=args.strict, dtype=dtype, seed=args.seed, timeout=args.timeout)
    except TargetError as exc:
        print(f"gpu_demo check: {exc}", file=sys.stderr)
        return BAD_USAGE
    print(report.format())
    if args.json:
        try:
            write_result(args.json, argv, report.to_dict())
        except OSError as exc:
            return cannot_write("check", "json", args.json, exc.strerror or str(exc))
    return exit_code(report.answer)


def exit_code(answer: str) -> int:
    """``gpu_demo check``'s exit code for one of the guard's answers (``GuardReport.answer``):
    0 passed, 1 a hazard or graph and eager differ, 3 could not check, 4 a CPU dry run only."""
    return {PASSED: 0, COULD_NOT_CHECK: 3, NOT_ON_GPU: 4}.get(answer, 1)


CORPUS_RUN_FLAGS = ("out", "jobs", "replays", "dtype", "timeout", "anchors")   # a run's: none goes with --summary


def _corpus(args: argparse.Namespace, argv: list[str]) -> int:
    from gpu_demo.lab import corpus
    from gpu_demo.lab.corpus import runner

    names = args.only or list(corpus.PROGRAMS)
    unknown = sorted(set(names) - set(corpus.PROGRAMS))
    if unknown:
        print(f"gpu_demo corpus: unknown program(s) {', '.join(unknown)}; the programs are: "
              + ", ".join(corpus.PROGRAMS), file=sys.stderr)
        return 2
    if args.summary:
        refused = refuse_with_summary("gpu_demo corpus", args, args.command_parser, CORPUS_RUN_FLAGS)
        if refused is None:
            print(runner.summary(runner.load_results(), only=args.only))
        return refused or 0
    refused = refuse_unwritable("corpus", args, "out")
    if refused is not None:
        return refused
    if no_cuda("corpus"):
        return 2
    results = runner.run_corpus(names, jobs=args.jobs, dtype=args.dtype, replays=args.replays,
                                timeout=args.timeout, anchors=args.anchors)
    print(format_table(runner.TABLE_HEADERS, runner.table_rows(results)))
    out = args.out or default_path("corpus")
    write_result(out, argv, {"dtype": args.dtype, "replays": args.replays, "programs": results})
    print(f"beside the committed H200 run, program by program: python -m gpu_demo compare {out}")
    return 0


def _overhead(args: argparse.Namespace, argv: list[str]) -> int:
    from gpu_demo.lab.measure.overhead import run_dry_overhead, run_overhead

    refused = refuse_unwritable("recorder-overhead", args, "out")
    if refused is not None:
        return refused
    if args.dry_run:
        try:
            results = run_dry_overhead(layers=args.layers, repeats=args.repeats)
        except RuntimeError as exc:
            print(f"gpu_demo recorder-overhead --dry-run: {exc}", file=sys.stderr)
            return 2
    elif no_cuda("recorder-overhead"):
        return 2
    else:
        results = run_overhead(layers=args.layers, repeats=args.repeats)
    # "plain s": the plain passes the ratio pairs with (in a process that never recorded, on a GPU)
    rows = [[name, r["ops"], r["records"], f"{r.get('plain_untraced_s', r['plain_s'])['median']:.3f}",
             f"{r['record_s']['median']:.3f}",
             f"{r['check_s']['median']:.3f}", f"{r['ratio']:.2f}", "yes" if r["within_target"] else "NO",
             r["floor_us_per_op"], r["record_us_per_op"]]
            for name, r in results.items() if isinstance(r, dict) and "ratio" in r]
    print(format_table(["stack", "ops", "records", "plain s", "record s", "check s", "ratio", "< 3x",
                        "floor us/op", "record us/op"], rows))
    if args.out or not args.dry_run:
        write_result(args.out or default_path("recorder-overhead"), argv, results)
    return 0

