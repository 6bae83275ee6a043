"""The command line of the lab on a real GPU: ``python -m gpu_demo COMMAND``.

``run``     one configuration (flags mirror ``simlib.spec.MoEConfig``) or
            ``--matrix`` (every ``simlib.spec.MATRIX`` row), each case in its own
            process; prints a table, writes JSON with provenance
``bench``   replay latency, overlap efficiency, the PDL residual add, and the
            simulator's calibration numbers (two JSON files); ``--host-costs``:
            the host cost of an eager forward per op kind
``decode``  greedy decoding through captured layers versus eager: token agreement
``record``  record a capture as a simlib trace and print the checker's report
            (``--dry-run``: on the CPU, no GPU needed); exit 1 if it finds a hazard

``fidelity`` the simulator against the committed H200 results (no GPU)

``check``, ``corpus`` and ``recorder-overhead`` are ``gpu_demo.cli.check``'s.
``zoo`` is ``gpu_demo.zoo.runner``'s (the model zoo's truth and the guard's verdicts).
``record --dry-run``, ``fidelity``, ``check``, ``corpus --summary`` and
``recorder-overhead --dry-run`` run on a CPU; every other command needs CUDA,
and without it prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from gpu_demo.cli import check as check_cli
from gpu_demo.cli.common import (
    cannot_write,
    cell_text,
    default_path,
    format_table,
    no_cuda,
    positive_int,
    refuse_unwritable,
    write_result,
)
from gpu_demo.moe.settings import RunSettings
from gpu_demo.protocol.tolerance import DTYPES
from gpu_demo.zoo import runner as zoo_runner
from simlib.graph import CAPTURE_MODES
from simlib.spec import (
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


DESCRIPTION = "The capture-order lab on a real GPU: run, bench, decode, record, check, corpus, fidelity."
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


def build_parser() -> argparse.ArgumentParser:
    parser = _parser(prog="python -m gpu_demo", description=DESCRIPTION,
                     epilog="record --dry-run, fidelity, check, corpus --summary and recorder-overhead "
                            "--dry-run run on a CPU; every other command needs CUDA, and without it "
                            "prints one line and exits with status 2.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_parser)

    run = commands.add_parser("run", help="capture and replay one configuration, or the whole matrix")
    _config_flags(run)
    run.add_argument("--matrix", action="store_true", help="run every simlib.spec.MATRIX configuration")
    run.add_argument("--jobs", type=positive_int, default=1, help="cases run at once (each in its own process)")
    run.add_argument("--timeout", type=positive_int, default=180, help="seconds before a case is abandoned")
    run.add_argument("--out", type=Path, metavar="FILE",
                     help="JSON results file (default: results/matrix-<gpu>.json with --matrix, "
                          "none without)")

    bench = commands.add_parser("bench", help="replay latency, overlap efficiency, PDL, calibration")
    _config_flags(bench)
    bench.add_argument("--bench-replays", type=positive_int, default=300, help="timed replays per variant")
    bench.add_argument("--out", type=Path, metavar="FILE",
                       help="latency JSON (default: results/bench-<gpu>.json, or "
                            "results/pdl-<gpu>.json with --pdl-only)")
    bench.add_argument("--calibration-out", type=Path, metavar="FILE",
                       help="calibration JSON (default: results/calibration-<gpu>.json)")
    bench.add_argument("--pdl-only", action="store_true",
                       help="only the PDL residual add, split into fusion and PDL")
    bench.add_argument("--host-costs", action="store_true",
                       help="only the host cost of an eager forward per op kind, from torch.profiler "
                            "(writes results/host-costs-<gpu>.json, or --out)")

    decode = commands.add_parser("decode", help="token agreement of graph-replay decoding with eager")
    _config_flags(decode)
    decode.add_argument("--steps", type=positive_int, default=32, help="greedy decode steps")
    decode.add_argument("--single", action="store_true",
                        help="decode only the configuration the flags give, not the incident and its fixes")
    decode.add_argument("--jobs", type=positive_int, default=1, help="configurations decoded at once")
    decode.add_argument("--timeout", type=positive_int, default=180, help="seconds before a case is abandoned")
    decode.add_argument("--out", type=Path, metavar="FILE",
                        help="JSON results file (default: results/decode-<gpu>.json)")

    record = commands.add_parser("record", help="record a capture as a simlib trace and check it")
    _config_flags(record)
    record.add_argument("--dry-run", action="store_true", help="record on the CPU without capturing (no GPU needed)")
    record.add_argument("--trace-out", type=Path, metavar="FILE",
                        help="also write the trace as JSON (default: not written)")
    record.add_argument("--strict", action="store_true",
                        help="exit 1 on warnings (races) too, not only on errors")

    commands.add_parser("fidelity", help="the simulator against the committed H200 results "
                        "(outcomes and replay latency; no GPU needed)")
    check_cli.register(commands)  # check, corpus, recorder-overhead (gpu_demo.cli.check)
    commands.add_parser("zoo", add_help=False, help="the model zoo on a GPU: truth, verdict and check time per "
                        "model (gpu_demo.zoo.runner; its flags: zoo --help)")
    return parser


def _config_flags(parser: argparse.ArgumentParser) -> None:
    d = MoEConfig()
    parser.add_argument("--order", choices=ORDERS, default=d.order, help="branch the host issues first under capture")
    parser.add_argument("--shared-mode", choices=SHARED_MODES, default=d.shared_mode, help="how the shared expert reads x")
    parser.add_argument("--dispose", choices=DISPOSE_POLICIES, default=d.dispose, help="what dispose_tensor frees")
    parser.add_argument("--clone", action=argparse.BooleanOptionalAction, default=d.clone,
                        help="the shared branch reads a clone of x taken before the fork")
    parser.add_argument("--inputs", choices=INPUT_MODES, default=d.inputs, help="what each replay's input buffer holds")
    parser.add_argument("--capture-fault", choices=CAPTURE_FAULTS, default=d.capture_fault, help="a deliberate capture mistake")
    parser.add_argument("--routed-stream", choices=ROUTED_STREAMS, default=d.routed_stream,
                        help="stream of the routed experts under capture (the shared expert takes the other)")
    parser.add_argument("--pdl", action=argparse.BooleanOptionalAction, default=d.pdl,
                        help="residual add as a PDL-launched Triton kernel")
    parser.add_argument("--dispose-kind", choices=DISPOSE_KINDS, default=d.dispose_kind,
                        help="how dispose_tensor frees x: set_ to an empty or a 0-dim tensor, or free the storage")
    parser.add_argument("--capture-mode", choices=CAPTURE_MODES, default=d.capture_mode,
                        help="torch.cuda.graph's capture_error_mode")
    parser.add_argument("--alt-delay-us", type=float, default=d.alt_delay_us, metavar="US",
                        help="under capture, a torch.cuda._sleep of this many microseconds heads the alt branch")
    parser.add_argument("--record-stream", action=argparse.BooleanOptionalAction, default=d.record_stream,
                        help="under capture, x.record_stream(alt) before the branches")
    for name in _SIZE_FIELDS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name), metavar="N",
                            help=_SIZE_HELP[name])
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16", help="dtype of weights and activations")
    parser.add_argument("--seed", type=int, default=0, help="random seed of weights and inputs")


def _config(args: argparse.Namespace) -> MoEConfig:
    return MoEConfig(
        order=args.order, shared_mode=args.shared_mode, dispose=args.dispose, clone=args.clone,
        inputs=args.inputs, capture_fault=args.capture_fault, pdl=args.pdl, routed_stream=args.routed_stream,
        dispose_kind=args.dispose_kind, capture_mode=args.capture_mode, alt_delay_us=args.alt_delay_us,
        record_stream=args.record_stream, **{name: getattr(args, name) for name in _SIZE_FIELDS},
    )


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
        print(fidelity_report())
        return 0
    dry_run = args.command == "record" and args.dry_run
    try:
        config = _config(args)
        settings = RunSettings(dtype=args.dtype, seed=args.seed, device="cpu" if dry_run else "auto")
    except ValueError as exc:
        parser.error(str(exc))
    refused = refuse_unwritable(args.command, args, "out", "calibration_out", "trace_out")
    if refused is not None:
        return refused
    if not dry_run and no_cuda(args.command, " (or record --dry-run on the CPU)" if args.command == "record" else ""):
        return 2
    handler = {"run": _run, "bench": _bench, "decode": _decode, "record": _record}[args.command]
    return handler(args, config, settings, argv)


# -- commands ---------------------------------------------------------------------

def fidelity_report() -> str:
    """Both comparisons with the committed H200 results, as Markdown (the README quotes it)."""
    from gpu_demo.measure import conformance, prediction

    return (conformance.format_table(conformance.rows()) + "\n\n"
            + prediction.format_table(prediction.predictions()))


def _errors_cell(errors: list[float | None], tolerance: float, shown: int = 4) -> str:
    """The first few replay errors, and for a long run how many replays were wrong."""
    from gpu_demo.moe.harness import count_wrong

    cell = " ".join("fault" if e is None else f"{e:.3g}" for e in errors[:shown])
    if len(errors) > shown:
        cell += f" ... ({count_wrong(errors, tolerance)} of {len(errors)} wrong)"
    return cell


def _run(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.moe.harness import run_many

    configs = list(MATRIX) if args.matrix else [config]
    results = run_many(configs, settings, jobs=args.jobs, timeout=args.timeout)
    rows = [[r.name, r.outcome, _errors_cell(r.errors, settings.tolerance), r.message or ""] for r in results]
    print(format_table(["config", "outcome", "error per replay", "first error"], rows))
    out = args.out or (default_path("matrix") if args.matrix else None)
    if out:
        cases = [{"name": r.name, **r.__dict__} for r in results]
        write_result(out, argv, {"settings": settings.to_dict(), "tolerance": settings.tolerance, "cases": cases})
    return 0


def _bench(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.measure.benchmark import Bench, run_bench, run_pdl
    from gpu_demo.measure.calibration import run_calibration

    if args.host_costs:
        from gpu_demo.measure.host_costs import format_summary, run_host_costs

        costs = run_host_costs(config, settings, timed=args.bench_replays)
        print(format_table(["kind", "ops", "launches", "host us each"], format_summary(costs)))
        write_result(args.out or default_path("host-costs"), argv, costs)
        return 0
    if args.pdl_only:
        bench = Bench(config, settings, args.bench_replays)
        pdl = run_pdl(bench)
        rows = [[name, f"{v['median_us']:.2f}"] for name, v in pdl.items() if isinstance(v, dict)]
        rows += [[name, f"{v:.3f}"] for name, v in pdl.items() if not isinstance(v, dict)]
        print(format_table(["variant", "median us / saving us"], rows))
        write_result(args.out or default_path("pdl"), argv, {"config": bench.config.to_dict(),
                                                        "settings": settings.to_dict(),
                                                        "replays_per_variant": args.bench_replays,
                                                        "pdl": pdl})
        return 0
    bench = run_bench(config, settings, replays=args.bench_replays)
    lat, eff = bench["latency"], bench["overlap"]["efficiency"]
    rows = [[name, f"{v['median_us']:.2f}", cell_text(eff.get(name))] for name, v in lat.items()]
    rows += [[name, f"{v['median_us']:.2f}", ""] for name, v in bench["pdl"].items() if isinstance(v, dict)]
    print(format_table(["variant", "median us", "overlap efficiency"], rows))
    write_result(args.out or default_path("bench"), argv, bench)
    write_result(args.calibration_out or default_path("calibration"), argv, run_calibration(config, settings))
    return 0


def _decode(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.moe.decode import decode_suite
    from gpu_demo.moe.harness import run_children

    configs = [config] if args.single else decode_suite(config)
    payloads = [{"config": c.to_dict(), "settings": settings.to_dict(), "steps": args.steps} for c in configs]
    raws = run_children("gpu_demo.moe.decode:decode_payload", payloads, args.jobs, args.timeout)
    results = [{"name": c.name, **raw} for c, raw in zip(configs, raws)]
    rows = [[r["name"], r.get("status", r.get("outcome")), cell_text(r.get("token_agreement")),
             cell_text(r.get("first_divergence_step"))] for r in results]
    print(format_table(["config", "status", "token agreement with eager", "first divergent step"], rows))
    write_result(args.out or default_path("decode"), argv, {"settings": settings.to_dict(), "steps": args.steps,
                                                        "layers": config.layers, "cases": results})
    return 0


def _record(args: argparse.Namespace, config: MoEConfig, settings: RunSettings, argv: list[str]) -> int:
    from gpu_demo.guard.check import check_trace
    from gpu_demo.moe.record import record_moe

    trace = record_moe(config, settings)
    if args.trace_out:
        from gpu_demo.measure.provenance import provenance

        trace.meta["provenance"] = provenance(argv)
        try:
            args.trace_out.parent.mkdir(parents=True, exist_ok=True)
            args.trace_out.write_text(trace.to_json(indent=1))
        except OSError as exc:
            return cannot_write("record", "trace_out", args.trace_out, exc.strerror or str(exc))
    captured = [r for r in trace.records if getattr(r, "graph", None) is not None]
    if trace.meta["mode"] == "dry_run":
        from gpu_demo.record.dry_run import NOT_SEEN

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


