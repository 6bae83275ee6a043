"""What the whole-process check costs eager Hugging Face ``generate`` after a server's start-up (issue 34).

    PYTHONPATH=. python benchmarks/generate_overhead.py --out $OUT/generate-overhead.json

A process checked whole (``CAPTURE_ORDER_CHECK=1``) runs eager code too. Each
run, in a fresh process: a small start-up (``serving_overhead.start_up``: the
graphs of a 2-layer stack for 4 batch sizes captured into one pool, then each
replayed once, as a server does at start); a tiny Llama with random weights
(``LlamaConfig`` below, nothing downloaded); one untimed ``generate``; then
``--generates`` timed calls of ``model.generate(ids, max_new_tokens=32,
do_sample=False)`` on one 16-token prompt, the device synchronized around
each. Modes ``plain`` and ``checked`` (``check_process`` started first,
before the start-up, its warnings silenced), interleaved in each repeat.
``ratio``: the median over repeats of checked over plain, each run's median
``generate``. Issue 34's target, reported, not asserted: under 2x.
``--time-limit`` as in ``serving_overhead.py``. Writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from serving_overhead import fresh_run, median, paired, start_up, timed_repeats  # its neighbour: a script's folder is on the path
from transformers import LlamaConfig, LlamaForCausalLM

from gpu_demo.guard.process import check_process
from gpu_demo.lab.measure.overhead import collector_time
from gpu_demo.lab.measure.provenance import provenance

MODES = ("plain", "checked")
TARGET = 2.0
NEW_TOKENS, PROMPT_TOKENS = 32, 16
STARTUP_LAYERS, STARTUP_SIZES = 2, (1, 2, 4, 8)
CONFIG = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=1000)


def tiny_llama(device: torch.device) -> tuple[LlamaForCausalLM, torch.Tensor]:
    """The model, with the same random weights in every run, and its prompt."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(device).eval()
    ids = torch.randint(3, CONFIG["vocab_size"], (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    return model, ids.to(device)


def generate_once(model: LlamaForCausalLM, ids: torch.Tensor) -> tuple[float, int]:
    """Seconds of one greedy ``generate``, and the tokens it made."""
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False)
    sync()
    return time.perf_counter() - start, out.shape[1] - ids.shape[1]


def child(mode: str, generates: int) -> dict[str, Any]:
    torch.cuda.init()
    checker = check_process("warn") if mode == "checked" else None
    with collector_time() as gc_s, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        server = start_up(STARTUP_LAYERS, STARTUP_SIZES)
        for graph in server.graphs.values():
            graph.replay()
        torch.cuda.synchronize()
        startup_s = time.perf_counter() - start
        model, ids = tiny_llama(torch.device("cuda"))
        generate_once(model, ids)                       # untimed: the first call's lazy set-up
        timed = [generate_once(model, ids) for _ in range(generates)]
    out = {"mode": mode, "startup_s": startup_s, "generate_s": [s for s, _ in timed],
           "median_s": statistics.median(s for s, _ in timed), "new_tokens": sorted({n for _, n in timed}),
           "gc_s": gc_s[0]}
    if checker is not None:
        out.update(findings=len(checker.summary()["findings"]), check_s=checker.check_s,
                   records_kept=len(checker.recorder.trace.records) + checker.checker.kept())
    return out


def summarize(runs: list[dict[str, dict]]) -> dict[str, Any]:
    """Per mode the runs' medians; the ratio checked over plain, paired within each repeat."""
    ratio = paired(runs, "checked", "plain", lambda r: r.get("median_s"))
    modes = {mode: {"median_s": median([r[mode]["median_s"] for r in runs if "median_s" in r[mode]]),
                    "runs_median_s": [r[mode].get("median_s") for r in runs],
                    "startup_s": [r[mode].get("startup_s") for r in runs],
                    "new_tokens": sorted({n for r in runs for n in r[mode].get("new_tokens", ())}),
                    "failed": [r[mode]["failed"] for r in runs if "failed" in r[mode]]} for mode in MODES}
    return {"modes": modes, "ratio": ratio, "target": TARGET, "within_target": ratio is not None and ratio < TARGET}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--generates", type=int, default=5, help="timed generate calls per run")
    parser.add_argument("--time-limit", type=float, default=540.0, help="seconds for all repeats")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.repeats, args.generates) < 1:
        parser.error("--repeats and --generates must be positive")
    if args.child:
        print(json.dumps(child(args.child, args.generates)))
        return 0
    if not torch.cuda.is_available():
        print("generate_overhead: needs CUDA (its start-up captures real graphs)", file=sys.stderr)
        return 2

    def result(runs: list[dict], progress: dict[str, Any]) -> dict[str, Any]:
        return {"provenance": {**provenance(argv), "command": shlex.join(["python", "benchmarks/generate_overhead.py",
                                                                          *argv])},
                "config": CONFIG, "new_tokens": NEW_TOKENS, "prompt_tokens": PROMPT_TOKENS, "generates": args.generates,
                **progress, **summarize(runs), "runs": runs}

    final = timed_repeats(lambda: {mode: fresh_run(__file__, mode, "--generates", str(args.generates)) for mode in MODES},
                          args.repeats, args.time_limit, "generate_overhead", result, args.out)
    return 1 if any("failed" in run[mode] for run in final["runs"] for mode in MODES) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
