"""The command line of the lab on a real GPU: ``python -m gpu_demo COMMAND``.

``run``     one configuration (flags mirror ``simlib.programs.spec.MoEConfig``) or
            ``--matrix`` (every ``simlib.programs.spec.MATRIX`` row), each case in its own
            process; prints a table, writes JSON with provenance
``bench``   replay latency, overlap efficiency, the PDL residual add, and the
            simulator's calibration numbers (two JSON files), of the correct
            one-layer program (only the sizes are flags); ``--host-costs``:
            the host cost of an eager forward per op kind
``decode``  greedy decoding through captured layers versus eager: token agreement
            (the incident and its fixes, or ``--single``)
``record``  record a capture as a simlib trace and print the checker's report
            (``--dry-run``: on the CPU, no GPU needed); exit 1 if it finds a hazard

``fidelity`` the simulator against the committed H200 results, or a seat's (``--matrix``, ``--corpus``; no GPU)
``compare`` a corpus or zoo run against the committed H200 results, program by program (no GPU)

``check``, ``corpus`` and ``recorder-overhead`` are ``gpu_demo.lab.cli.check``'s.
``zoo`` is ``gpu_demo.lab.zoo.runner``'s (the model zoo's truth and the guard's verdicts).
``record --dry-run``, ``fidelity``, ``compare``, ``check``, ``corpus --summary`` and
``recorder-overhead --dry-run`` run on a CPU; every other command needs CUDA,
and without it prints one line and exits with status 2. A command never writes its
default results file over one already there (the committed H200 results): it asks
for the output flag instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

from gpu_demo.guard.protocol.tolerance import DTYPES
from gpu_demo.lab.cli import check as check_cli
from gpu_demo.lab.cli.common import (
    cannot_write,
    cell_text,
    default_path,
    format_table,
    no_cuda,
    positive_int,
    refuse_overwrite,
    refuse_unwritable,
    write_result,
)
from gpu_demo.lab.moe.settings import RunSettings
from gpu_demo.lab.zoo import runner as zoo_runner
from simlib.engine.graph import CAPTURE_MODES
from simlib.programs.spec import (
    CAPTURE_FAULTS,
    DISPOSE_KINDS,
    DISPOSE_POLICIES,
    INPUT_MODES,
    MATRIX,
    ORDERS,
    ROUTED_STREAMS,
    SHARED_MODES,
    MoEConfig,
)

_SIZE_FIELDS = ("layers", "tokens", "hidden", "intermediate", "experts", "top_k", "replays")
# The flags each command reads. ``bench`` times the correct one-layer program, so only
# the sizes of the MoE reach it; ``decode`` neither replays with refreshed inputs nor
# picks a capture mode, and its default suite sets the options that tell the incident
# from its fixes (``_SUITE_FIELDS``), so those need ``--single``.
_BENCH_FIELDS = ("tokens", "hidden", "intermediate", "experts", "top_k")
_SUITE_FIELDS = ("order", "shared_mode", "dispose", "clone", "capture_fault")
_NOT_DECODE_FIELDS = ("inputs", "capture_mode", "replays")


DESCRIPTION = "The capture-order lab on a real GPU: run, bench, decode, record, check, corpus, fidelity, compare."
_SIZE_HELP = {"layers": "MoE layers in the decode step", "tokens": "tokens in the decode batch",
              "hidden": "hidden size", "intermediate": "intermediate size of each expert",
              "experts": "routed experts", "top_k": "routed experts per token",
              "replays": "graph replays per case"}


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (an option whose default is None says its own)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.default is None
                or action.default is argparse.SUPPRESS):
            return text
        shown = ("on" if action.default else "off") if isinstance(action.default, bool) else "%(default)s"
        return f"{text} (default: {shown})"


def _parser(**kwargs: Any) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(formatter_class=_HelpFormatter, **kwargs)


class _Commands(argparse._SubParsersAction):
    """Subcommands whose help page opens with a description: their own, else their one-line help."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if "description" not in kwargs and kwargs.get("help"):
            kwargs["description"] = kwargs["help"][0].upper() + kwargs["help"][1:] + ("" if kwargs["help"][-1] in ".?)" else ".")
        return super().add_parser(name, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _parser(prog="python -m gpu_demo", description=DESCRIPTION,
                     epilog="record --dry-run, fidelity, compare, check, corpus --summary and recorder-overhead "
                            "--dry-run run on a CPU; every other command needs CUDA, and without it "
                            "prints one line and exits with status 2.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_parser, action=_Commands)

    run = commands.add_parser("run", help="capture and replay one configuration, or the whole matrix",
                              description="Capture and replay one configuration of the dual-stream MoE, or every "
                                          "row of the conformance matrix (--matrix), each case in its own process; "
                                          "print a table and write JSON with provenance. Needs CUDA.")
    _config_flags(run)
    run.add_argument("--matrix", action="store_true", help="run every simlib.programs.spec.MATRIX configuration")
    run.add_argument("--jobs", type=positive_int, default=1, help="cases run at once (each in its own process)")
    run.add_argument("--timeout", type=positive_int, default=180, help="seconds before a case is abandoned")
    run.add_argument("--out", type=Path, metavar="FILE",
                     help="JSON results file (default: results/matrix-<gpu>.json with --matrix, "
                          "none without; refused where that file is already there)")

    bench = commands.add_parser("bench", help="replay latency, overlap efficiency, PDL, calibration",
                                description="Time the correct program (one layer, shared expert first) in its "
                                            "variants: replay latency, two-stream overlap efficiency, the PDL "
                                            "residual add, and the simulator's calibration numbers. Only the "
                                            "MoE's sizes are yours to set. Needs CUDA.")
    _config_flags(bench, _BENCH_FIELDS, model=False)
    bench.add_argument("--bench-replays", type=positive_int, default=300, help="timed replays per variant")
    bench.add_argument("--out", type=Path, metavar="FILE",
                       help="latency JSON (default: results/bench-<gpu>.json, or "
                            "results/pdl-<gpu>.json with --pdl-only; refused where that file is already there)")
    bench.add_argument("--calibration-out", type=Path, metavar="FILE",
                       help="calibration JSON (default: results/calibration-<gpu>.json; refused where that "
                            "file is already there)")
    bench.add_argument("--pdl-only", action="store_true",
                       help="only the PDL residual add, split into fusion and PDL")
    bench.add_argument("--host-costs", action="store_true",
                       help="only the host cost of an eager forward per op kind, from torch.profiler "
                            "(writes results/host-costs-<gpu>.json, or --out)")

    decode = commands.add_parser("decode", help="token agreement of graph-replay decoding with eager",
                                 description="Greedy decoding of a tiny model through captured MoE layers, "
                                             "against eager decoding: the share of tokens that agree. By default "
                                             "the incident and each of its fixes; --single decodes the "
                                             "configuration the flags give. Needs CUDA.")
    _config_flags(decode, tuple(f for f in _SIZE_FIELDS if f not in _NOT_DECODE_FIELDS), skip=_NOT_DECODE_FIELDS,
                  single_only=_SUITE_FIELDS)
    decode.add_argument("--steps", type=positive_int, default=32, help="greedy decode steps")
    decode.add_argument("--single", action="store_true",
                        help="decode only the configuration the flags give, not the incident and its fixes")
    decode.add_argument("--jobs", type=positive_int, default=1, help="configurations decoded at once")
    decode.add_argument("--timeout", type=positive_int, default=180, help="seconds before a case is abandoned")
    decode.add_argument("--out", type=Path, metavar="FILE",
                        help="JSON results file (default: results/decode-<gpu>.json; refused where that file "
                             "is already there)")

    record = commands.add_parser("record", help="record a capture as a simlib trace and check it",
                                 description="Record a warm-up and a capture of the MoE as a simlib trace and "
                                             "print the checker's report; exit 1 on a hazard. Needs CUDA, except "
                                             "with --dry-run, which records on the CPU without capturing.")
    _config_flags(record)
    record.add_argument("--dry-run", action="store_true", help="record on the CPU without capturing (no GPU needed)")
    record.add_argument("--trace-out", type=Path, metavar="FILE",
                        help="also write the trace as JSON (default: not written)")
    record.add_argument("--strict", action="store_true",
                        help="exit 1 on warnings (races) too, not only on errors")

    fidelity = commands.add_parser(
        "fidelity", help="the simulator against the committed H200 results, or a GPU seat's "
        "(outcomes and replay latency; no GPU needed)",
        description="Compare the simulator's predictions with the committed H200 results (outcomes of the "
                    "conformance matrix and of the incident gallery's corpus twins, and replay latency), as "
                    "Markdown; with --matrix or --corpus, with a run of your own (its outcomes). Exit 0 when "
                    "every outcome is one the simulator predicts, 1 when one is not, 2 on a file that is not "
                    "such results. Runs on a CPU.")
    fidelity.add_argument("--matrix", type=Path, metavar="FILE",
                          help="a run --matrix results file (default: the committed matrix-h200.json)")
    fidelity.add_argument("--corpus", type=Path, metavar="FILE",
                          help="a corpus results file (default: the committed corpus-h200.json)")
    compare = commands.add_parser("compare", help="a corpus or zoo run against the committed H200 results, "
                                  "program by program (no GPU needed)",
                                  description="Compare a corpus or model-zoo results file (corpus --out, zoo "
                                              "--out) with the committed H200 results of its kind, or with "
                                              "--against FILE: each program's GPU truth and the guard's "
                                              "verdicts. Exit 0 when they agree, 1 when one changed (a race's "
                                              "timing is listed, not counted), 2 on a file that is not such "
                                              "results. Runs on a CPU.")
    compare.add_argument("results", type=Path, metavar="FILE", help="the results to compare (JSON)")
    compare.add_argument("--against", type=Path, metavar="FILE",
                         help="the results to compare with (default: corpus-h200.json or zoo-h200.json, "
                              "committed in gpu_demo/lab/results)")
    check_cli.register(commands)  # check, corpus, recorder-overhead (gpu_demo.lab.cli.check)
    commands.add_parser("zoo", add_help=False, help="the model zoo on a GPU: truth, verdict and check time per "
                        "model (gpu_demo.lab.zoo.runner; its flags: zoo --help)")
    return parser


def _config_flags(parser: argparse.ArgumentParser, sizes: tuple[str, ...] = _SIZE_FIELDS, model: bool = True,
                  skip: tuple[str, ...] = (), single_only: tuple[str, ...] = ()) -> None:
    """The ``MoEConfig`` flags a command reads: ``sizes``, and unless ``model`` is off the options
    of the program (less ``skip``; those in ``single_only`` say they need ``--single``)."""
    d = MoEConfig()
    options = parser.add_argument_group("the MoE program") if model else None
    flags = {
        "order": dict(choices=ORDERS, help="branch the host issues first under capture"),
        "shared_mode": dict(choices=SHARED_MODES, help="how the shared expert reads x"),
        "dispose": dict(choices=DISPOSE_POLICIES, help="what dispose_tensor frees"),
        "clone": dict(action=argparse.BooleanOptionalAction,
                      help="the shared branch reads a clone of x taken before the fork"),
        "inputs": dict(choices=INPUT_MODES, help="what each replay's input buffer holds"),
        "capture_fault": dict(choices=CAPTURE_FAULTS, help="a deliberate capture mistake"),
        "routed_stream": dict(choices=ROUTED_STREAMS,
                              help="stream of the routed experts under capture (the shared expert takes the other)"),
        "pdl": dict(action=argparse.BooleanOptionalAction, help="residual add as a PDL-launched Triton kernel"),
        "dispose_kind": dict(choices=DISPOSE_KINDS,
                             help="how dispose_tensor frees x: set_ to an empty or a 0-dim tensor, or free the storage"),
        "capture_mode": dict(choices=CAPTURE_MODES, help="torch.cuda.graph's capture_error_mode"),
        "alt_delay_us": dict(type=float, metavar="US",
                             help="under capture, a torch.cuda._sleep of this many microseconds heads the alt branch"),
        "record_stream": dict(action=argparse.BooleanOptionalAction,
                              help="under capture, x.record_stream(alt) before the branches"),
    }
    for name, spec in flags.items():
        if options is not None and name not in skip:
            if name in single_only:
                spec = {**spec, "help": spec["help"] + "; only with --single (the default suite sets it)"}
            options.add_argument(f"--{name.replace('_', '-')}", default=getattr(d, name), **spec)
    for name in sizes:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name), metavar="N",
                            help=_SIZE_HELP[name])
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16", help="dtype of weights and activations")
    parser.add_argument("--seed", type=int, default=0, help="random seed of weights and inputs")


def _config(args: argparse.Namespace) -> MoEConfig:
    """The configuration the flags give; a command that lacks a flag gets ``MoEConfig``'s default."""
    return MoEConfig(**{f.name: getattr(args, f.name) for f in fields(MoEConfig) if hasattr(args, f.name)})


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subcommand's own parser, so that its errors come under its own usage line."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[command]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["zoo"]:   # every flag after it is the zoo runner's own
        return zoo_runner.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if hasattr(args, "handler"):
            return args.handler(args, argv)
        return _main(parser, args, argv)
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python's exit-time flush
        # of stdout from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> int:
    if args.command == "fidelity":
        return _fidelity(args)
    if args.command == "compare":
        return _compare(args)
    dry_run = args.command == "record" and args.dry_run
    command_parser = _command_parser(parser, args.command)
    try:
        config = _config(args)
        settings = RunSettings(dtype=args.dtype, seed=args.seed, device="cpu" if dry_run else "auto")
    except ValueError as exc:
        command_parser.error(str(exc))
    if args.command == "decode" and not args.single:
        chosen = [f"--{name.replace('_', '-')}" for name in _SUITE_FIELDS
                  if getattr(config, name) != getattr(MoEConfig(), name)]
        if chosen:
            command_parser.error(f"{', '.join(chosen)} only with --single: the default decodes the incident "
                                 "and each of its fixes, which set these options themselves")
    refused = refuse_unwritable(args.command, args, "out", "calibration_out", "trace_out")
    if refused is not None:
        return refused
    if not dry_run and no_cuda(args.command, " (or record --dry-run on the CPU)" if args.command == "record" else ""):
        return 2
    refused = refuse_overwrite(args.command, args, _default_outputs(args))
    if refused is not None:
        return refused
    handler = {"run": _run, "bench": _bench, "decode": _decode, "record": _record}[args.command]
    return handler(args, config, settings, argv)


def _default_outputs(args: argparse.Namespace) -> dict[str, Path]:
    """Where each output flag of the command writes when it is not given (``run`` without
    ``--matrix`` and ``record`` write nothing then)."""
    if args.command == "run":
        return {"out": default_path("matrix")} if args.matrix else {}
    if args.command == "decode":
        return {"out": default_path("decode")}
    if args.command == "bench":
        if args.host_costs or args.pdl_only:
            return {"out": default_path("host-costs" if args.host_costs else "pdl")}
        return {"out": default_path("bench"), "calibration_out": default_path("calibration")}
    return {}


# -- commands ---------------------------------------------------------------------

def _compare(args: argparse.Namespace) -> int:
    from gpu_demo.lab.results import compare

    try:
        text, status = compare.report(args.against, args.results)
    except compare.ResultsError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    print(text)
    return status


def _fidelity(args: argparse.Namespace) -> int:
    try:
        text, agree = fidelity(args.matrix, args.corpus)
    except ValueError as exc:   # a file that is not such results: conformance says which, in one line
        print(f"fidelity: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if agree else 1


def fidelity(matrix: Path | None = None, corpus: Path | None = None) -> tuple[str, bool]:
    """The simulator's outcomes against a matrix and a corpus run (default: the committed H200
    results, with the replay latency too), as Markdown; and whether every outcome agrees."""
    from gpu_demo.lab import results
    from gpu_demo.lab.measure import conformance, prediction

    matrix_file, corpus_file = matrix or conformance.RESULTS, corpus or results.path("corpus-h200")
    for given in (matrix, corpus):
        if given is not None and not given.is_file():
            raise ValueError(f"{given}: no such file")
    scenarios, gallery = conformance.rows(matrix_file), conformance.gallery_rows(corpus_file)
    parts = [conformance.format_table(scenarios, conformance.card(matrix_file)),
             conformance.format_gallery_table(gallery, conformance.card(corpus_file))]
    if matrix is None and corpus is None:   # the latency is the committed H200 bench's
        parts.append(prediction.format_table(prediction.predictions()))
    return "\n\n".join(parts), all(r.agree for r in scenarios) and all(r.agree is not False for r in gallery)


def fidelity_report() -> str:
    """Both comparisons with the committed H200 results, as Markdown (docs/results.md quotes it)."""
    return fidelity()[0]


def _errors_cell(errors: list[float | None], tolerance: float, shown: int = 4) -> str:
    """The first few replay errors, and for a long run how many replays were wrong."""
    from gpu_demo.lab.moe.harness import count_wrong

    cell = " ".join("fault" if e is None else f"{e:.3g}" for e in errors[:shown])
    if len(errors) > shown:
        cell += f" ... ({count_wrong(errors, tolerance)} of {len(errors)} wrong)"
    return cell


def _run(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.lab.moe.harness import run_many

    configs = list(MATRIX) if args.matrix else [config]
    results = run_many(configs, settings, jobs=args.jobs, timeout=args.timeout)
    rows = [[r.name, r.outcome, _errors_cell(r.errors, settings.tolerance), r.message or ""] for r in results]
    print(format_table(["config", "outcome", "error per replay", "first error"], rows))
    if args.out:
        cases = [{"name": r.name, **r.__dict__} for r in results]
        write_result(args.out, argv, {"settings": settings.to_dict(), "tolerance": settings.tolerance, "cases": cases})
    return 0


def _bench(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.lab.measure.benchmark import Bench, run_bench, run_pdl
    from gpu_demo.lab.measure.calibration import run_calibration

    if args.host_costs:
        from gpu_demo.lab.measure.host_costs import format_summary, run_host_costs

        costs = run_host_costs(config, settings, timed=args.bench_replays)
        print(format_table(["kind", "ops", "launches", "host us each"], format_summary(costs)))
        write_result(args.out, argv, costs)
        return 0
    if args.pdl_only:
        bench = Bench(config, settings, args.bench_replays)
        pdl = run_pdl(bench)
        rows = [[name, f"{v['median_us']:.2f}"] for name, v in pdl.items() if isinstance(v, dict)]
        rows += [[name, f"{v:.3f}"] for name, v in pdl.items() if not isinstance(v, dict)]
        print(format_table(["variant", "median us / saving us"], rows))
        write_result(args.out, argv, {"config": bench.config.to_dict(),
                                                        "settings": settings.to_dict(),
                                                        "replays_per_variant": args.bench_replays,
                                                        "pdl": pdl})
        return 0
    bench = run_bench(config, settings, replays=args.bench_replays)
    lat, eff = bench["latency"], bench["overlap"]["efficiency"]
    rows = [[name, f"{v['median_us']:.2f}", cell_text(eff.get(name))] for name, v in lat.items()]
    rows += [[name, f"{v['median_us']:.2f}", ""] for name, v in bench["pdl"].items() if isinstance(v, dict)]
    print(format_table(["variant", "median us", "overlap efficiency"], rows))
    write_result(args.out, argv, bench)
    write_result(args.calibration_out, argv, run_calibration(config, settings))
    return 0


def _decode(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.lab.moe.decode import decode_suite
    from gpu_demo.lab.moe.harness import run_children

    configs = [config] if args.single else decode_suite(config)
    payloads = [{"config": c.to_dict(), "settings": settings.to_dict(), "steps": args.steps} for c in configs]
    raws = run_children("gpu_demo.lab.moe.decode:decode_payload", payloads, args.jobs, args.timeout)
    results = [{"name": c.name, **raw} for c, raw in zip(configs, raws)]
    rows = [[r["name"], r.get("status", r.get("outcome")), cell_text(r.get("token_agreement")),
             cell_text(r.get("first_divergence_step"))] for r in results]
    print(format_table(["config", "status", "token agreement with eager", "first divergent step"], rows))
    write_result(args.out, argv, {"settings": settings.to_dict(), "steps": args.steps,
                                                        "layers": config.layers, "cases": results})
    return 0


def _record(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.guard.check import check_trace
    from gpu_demo.lab.moe.recording import record_moe

    trace = record_moe(config, settings)
    if args.trace_out:
        from gpu_demo.lab.measure.provenance import provenance

        trace.meta["provenance"] = provenance(argv)
        try:
            args.trace_out.write_text(trace.to_json(indent=1))
        except OSError as exc:
            return cannot_write("record", "trace_out", args.trace_out, exc.strerror or str(exc))
    captured = [r for r in trace.records if getattr(r, "graph", None) is not None]
    if trace.meta["mode"] == "dry_run":
        from gpu_demo.guard.record.dry_run import NOT_SEEN

        print(f"{config.name}: {NOT_SEEN}; record on a GPU (without --dry-run) for those.")
    print(f"{config.name}: {trace.meta['mode']} recording, {len(trace.records)} records, "
          f"{len(captured)} inside the capture")
    error = trace.meta.get("capture_error")
    if error:
        print(f"capture failed: {error}")
    findings, report = check_trace(trace)
    print(report)
    failing = [f for f in findings if args.strict or f.severity == "error"]
    return 1 if failing or error else 0


