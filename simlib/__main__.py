"""Command line: ``python -m simlib check | export | headline``.

    python -m simlib check --scenario moe --order routed_first      # exits 1: errors found
    python -m simlib check --trace recorded.json --strict           # a saved (or real) trace
    python -m simlib export --order shared_first --pdl --out trace.json
    python -m simlib headline --out out --gpu-results gpu_demo/lab/results/matrix-h200.json

``check`` exits 1 when the checker finds an error (wrong on every replay) or
the capture itself failed, 0 otherwise; warnings (races) fail only with
``--strict``. A failed capture is said first (there is no graph to check).
Outcomes are in ``simlib.glossary``'s words; ``--json`` carries both the
replays' ``outcome`` and the ``verdict`` the text gives (``unordered`` for a
race the replays did not lose), ``null`` for a saved trace, which has no replays. Bad arguments, and a ``--trace``
that is not a simlib trace (a Chrome/Perfetto export, say), exit 2 with a usage
message; a reader that stops early (``| head``) ends the output quietly. Never
a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from .checker import ERROR, check, format_report
from .checker.verdict import verdict
from .export import write_chrome_trace
from .glossary import CAPTURE_ERROR_PREFIX, words
from .programs import scenarios
from .programs.scenarios import ScenarioResult
from .programs.spec import CAPTURE_FAULTS, DISPOSE_POLICIES, INPUT_MODES, ORDERS, ROUTED_STREAMS, SHARED_MODES, MoEConfig
from .trace import Capture, Trace
from .tutorial.headline import write_headline

SCENARIOS = ("moe",)
_DEFAULTS = MoEConfig()
# (flag, MoEConfig field, choices or type, help)
_SCENARIO_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--order", "order", ORDERS, "which branch the host issues first inside the capture"),
    ("--shared-mode", "shared_mode", SHARED_MODES, "how the shared expert consumes the layer input"),
    ("--dispose", "dispose", DISPOSE_POLICIES, "what dispose_tensor does"),
    ("--inputs", "inputs", INPUT_MODES, "how replays get their inputs"),
    ("--capture-fault", "capture_fault", CAPTURE_FAULTS, "a deliberate capture mistake"),
    ("--routed-stream", "routed_stream", ROUTED_STREAMS, "the stream the routed experts run on"),
    ("--layers", "layers", int, "number of MoE layers (1 to 61)"),
    ("--tokens", "tokens", int, "tokens in the decode batch"),
)
_SCENARIO_FLAGS = (("--clone", "clone", "the shared branch reads a clone of the input"),
                   ("--pdl", "pdl", "launch the residual add with programmatic dependent launch"))
_SCENARIO_FIELDS = tuple(o[1] for o in _SCENARIO_OPTIONS) + tuple(f[1] for f in _SCENARIO_FLAGS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except SystemExit as exit_:   # argparse's --help and usage errors
        return exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BrokenPipeError:       # the reader went away (``... | head``): stop quietly
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return                    # not a real file (a test's capture): nothing will flush
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simlib",
        description="Simulate CUDA graph capture of the dual-stream MoE, check a trace for "
                    "capture hazards, or export it for Perfetto.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    source = _source_options()

    check_cmd = commands.add_parser(
        "check", parents=[source], help="report the capture hazards of a scenario or trace",
        description="Run the capture-hazard checker. Exit status 1 when it finds an error "
                    "(wrong on every replay) or the capture failed; warnings (unordered: two accesses "
                    "to the same memory that nothing orders) fail only with --strict.")
    check_cmd.add_argument("--json", action="store_true", help="print the findings as JSON")
    check_cmd.add_argument("--strict", action="store_true", help="fail (exit 1) on warnings too")
    check_cmd.set_defaults(run=_check, parser=check_cmd)

    export_cmd = commands.add_parser(
        "export", parents=[source], help="write a Chrome/Perfetto trace of a scenario or trace",
        description="Write Chrome Trace Event JSON; open it in https://ui.perfetto.dev or "
                    "chrome://tracing.")
    export_cmd.add_argument("--out", required=True, type=Path, metavar="FILE.json",
                            help="where to write the Chrome trace")
    export_cmd.set_defaults(run=_export, parser=export_cmd)

    headline_cmd = commands.add_parser(
        "headline", help="print and save the headline comparison",
        description="Run the headline comparison of the orders and fixes, save its files under "
                    "--out and print the summary.")
    headline_cmd.add_argument("--out", required=True, type=Path, metavar="DIR",
                              help="directory for the headline files")
    headline_cmd.add_argument("--gpu-results", type=Path, metavar="FILE.json",
                              help="a GPU's matrix results (python -m gpu_demo run --matrix) for the table's GPU column")
    headline_cmd.set_defaults(run=_headline, parser=headline_cmd)
    return parser


def _source_options() -> argparse.ArgumentParser:
    """The options saying what to check or export: a simulated scenario, or a saved trace."""
    source = argparse.ArgumentParser(add_help=False)
    where = source.add_argument_group("input (a simulated scenario, the default, or a saved trace)")
    where.add_argument("--scenario", choices=SCENARIOS,
                       help="simulate this scenario (default: moe)")
    where.add_argument("--trace", type=Path, metavar="FILE.json",
                       help="read a saved simlib trace (Trace.to_json) instead of simulating")
    options = source.add_argument_group("scenario options (default: MoEConfig's)")
    for flag, name, kind, text in _SCENARIO_OPTIONS:
        default = getattr(_DEFAULTS, name)
        if kind is int:
            options.add_argument(flag, dest=name, type=int, metavar="N",
                                 help=f"{text} (default: {default})")
        else:
            options.add_argument(flag, dest=name, choices=kind, help=f"{text} (default: {default})")
    for flag, name, text in _SCENARIO_FLAGS:
        options.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                             help=f"{text} (default: {'on' if getattr(_DEFAULTS, name) else 'off'})")
    return source


# --------------------------------------------------------------------------- commands
def _check(args: argparse.Namespace) -> int:
    trace, source, result = _load(args)
    findings = check(trace)
    failures = _capture_failures(trace, result)
    if args.json:
        print(json.dumps({"source": source,
                          "config": result.config.to_dict() if result else None,
                          "outcome": result.outcome if result else None,        # what the replays did
                          "verdict": verdict(result.outcome, findings) if result else None,  # the text's word
                          "capture_failures": failures,
                          "findings": [f.to_dict() for f in findings]}, indent=1, sort_keys=True))
    else:
        print(source)
        for failure in failures:
            print(f"CAPTURE FAILED: {failure}")
        print()
        print(format_report(findings))
    sys.stdout.flush()            # a closed pipe fails here, inside main(), not at exit
    failed = bool(failures) or any(f.severity == ERROR for f in findings)
    return int(failed or (args.strict and bool(findings)))


def _export(args: argparse.Namespace) -> int:
    trace, source, result = _load(args)
    try:
        path = write_chrome_trace(trace, args.out)
    except OSError as exc:
        args.parser.error(f"cannot write --out {args.out}: {exc.strerror or exc}")
    print(f"{source}\nwrote {path}; open it in https://ui.perfetto.dev or chrome://tracing")
    for failure in _capture_failures(trace, result):
        print(f"note: the capture failed, so the trace ends there: {failure}")
    return 0


def _headline(args: argparse.Namespace) -> int:
    try:
        print(write_headline(args.out, gpu_results=args.gpu_results))
    except OSError as exc:
        args.parser.error(f"cannot write --out {args.out}: {exc.strerror or exc}")
    return 0


# --------------------------------------------------------------------------- input
def _load(args: argparse.Namespace) -> tuple[Trace, str, ScenarioResult | None]:
    """The trace to work on, a one-line description of it, and the scenario result if simulated."""
    error: Callable[[str], NoReturn] = args.parser.error
    given = {name: getattr(args, name) for name in _SCENARIO_FIELDS if getattr(args, name) is not None}
    if args.trace is not None:
        if args.scenario is not None or given:
            flags = ["--scenario"] if args.scenario is not None else []
            flags += [_flag(name) for name in given]
            error(f"--trace reads a saved trace, so {', '.join(flags)} cannot apply to it; "
                  "drop them, or drop --trace to simulate a scenario")
        return _read_trace(args.trace, error), f"trace {args.trace}", None
    try:
        config = _DEFAULTS.with_(**given)
    except ValueError as exc:
        error(str(exc))
    result = scenarios.run(config)
    failed = result.outcome.startswith(CAPTURE_ERROR_PREFIX)
    said = words(result.outcome) + (", so there is no graph" if failed else "")
    judged = result.verdict()
    if judged != result.outcome:   # replays came out one way, but the graph leaves a race
        said = f"{words(judged)} (its replays: {said}, but the graph leaves a race; see below)"
    return result.trace, f"scenario moe {config.name}, simulated outcome: {said}", result


def _read_trace(path: Path, error: Callable[[str], NoReturn]) -> Trace:
    try:
        text = path.read_text()
    except OSError as exc:
        error(f"cannot read --trace {path}: {exc.strerror or exc}")
    how = "write one with Trace.to_json() or gpu_demo's recorder"
    try:
        data = json.loads(text)
    except ValueError as exc:
        error(f"--trace {path} is not a simlib trace (not JSON: {exc}); {how}")
    if isinstance(data, list) or (isinstance(data, dict) and "traceEvents" in data):
        shape = "a Chrome/Perfetto trace" if isinstance(data, dict) else "a JSON list"
        error(f"--trace {path} is {shape}, not a simlib trace: Chrome/Perfetto traces are for "
              f"viewing (https://ui.perfetto.dev), and `python -m simlib export` makes them from a "
              f"simlib trace, not the other way round. Give --trace the simlib trace itself: a JSON "
              f"object with 'version' and 'records' ({how}).")
    if not isinstance(data, dict):
        error(f"--trace {path} holds a JSON {type(data).__name__}, not a simlib trace (a JSON "
              f"object with 'version' and 'records'); {how}")
    try:
        return Trace.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        error(f"--trace {path} is not a simlib trace ({exc}); {how}")


def _flag(name: str) -> str:
    return next(o[0] for o in (*_SCENARIO_OPTIONS, *_SCENARIO_FLAGS) if o[1] == name)


def _capture_failures(trace: Trace, result: ScenarioResult | None) -> list[str]:
    """Why capture failed, in the program's words when the simulator has them."""
    if result is not None and result.outcome.startswith(CAPTURE_ERROR_PREFIX):
        return [str(result.error)]
    return [f"capture of graph {r.graph} ended with {r.error}"
            for r in trace.of(Capture) if r.op == "end" and r.error]


if __name__ == "__main__":
    raise SystemExit(main())
