"""How long one ``check_capture`` takes: a fresh child per check, and a warm worker (``warm_checks``).

    python benchmarks/guard_check_time.py --out $OUT/guard-check-time-h200.json

For each tiny model (a factory in this file; timm's resnet18 and a 2-layer Hugging Face
Llama when those packages are installed): one check in a fresh child (what a check costs
without a worker), then, in one ``warm_checks()`` session, the first check (it starts the
worker: imports torch and the model's packages, initialises CUDA) and ``--warm`` more
(median reported). Every check's answer is in the JSON, so a time is never reported
for a check that did not pass. Needs CUDA; the target is < 5 s per warm check.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from gpu_demo import check_capture, warm_checks
from gpu_demo.lab.measure.provenance import provenance


def mlp(device: torch.device, dtype: torch.dtype):
    layer = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    return layer.to(device, dtype), (torch.randn(16, 256, device=device, dtype=dtype),)


def encoder_layer(device: torch.device, dtype: torch.dtype):
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True).eval()
    return layer.to(device, dtype), (torch.randn(2, 16, 128, device=device, dtype=dtype),)


def dropout_mlp(device: torch.device, dtype: torch.dtype):
    layer = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Dropout(0.1)).train()
    return layer.to(device, dtype), (torch.randn(16, 256, device=device, dtype=dtype),)


def resnet18(device: torch.device, dtype: torch.dtype):
    import timm

    model = timm.create_model("resnet18", pretrained=False).eval()
    return model.to(device, dtype), (torch.randn(1, 3, 64, 64, device=device, dtype=dtype),)


def llama(device: torch.device, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval().to(device, dtype)

    def logits(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, use_cache=False).logits
    return logits, (torch.randint(0, 256, (1, 16), device=device),)


OPTIONAL = {"resnet18": "timm", "llama": "transformers"}
MODELS = ("mlp", "llama", "resnet18", "dropout_mlp", "encoder_layer")   # most telling first, for --budget-s


def _available(name: str) -> bool:
    needs = OPTIONAL.get(name)
    if needs is None:
        return True
    try:
        __import__(needs)
    except ImportError:
        return False
    return True


def _timed(target: str, dtype: torch.dtype) -> dict:
    start = time.perf_counter()
    report = check_capture(target, dtype=dtype)
    return {"seconds": round(time.perf_counter() - start, 3), "answer": report.answer, "verdict": report.verdict}


def measure(name: str, warm: int, dtype: torch.dtype) -> dict:
    target = f"{Path(__file__).stem}:{name}"
    fresh = _timed(target, dtype)
    with warm_checks() as worker:
        first = _timed(target, dtype)
        later = [_timed(target, dtype) for _ in range(warm)]
    return {"fresh_child": fresh, "warm_first": first, "warm": later, "workers_started": worker.started,
            "warm_median_s": statistics.median(c["seconds"] for c in later),
            "all_passed": all(c["answer"] == "passed" for c in [fresh, first, *later])}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    parser.add_argument("--warm", type=int, default=3, help="warm checks per model after the first")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no further model after this many seconds (the rest say so in the JSON)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("guard_check_time: needs a CUDA device (the check times are of real captures)", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    start, results = time.perf_counter(), {}
    for name in MODELS:
        if not _available(name):
            results[name] = {"skipped": f"{OPTIONAL[name]} missing"}
        elif args.budget_s is not None and time.perf_counter() - start > args.budget_s:
            results[name] = {"skipped": f"time budget of {args.budget_s:g} s spent"}
        else:
            results[name] = measure(name, args.warm, dtype)
    for name, r in results.items():
        if "skipped" in r:
            print(f"{name:14s} skipped: {r['skipped']}")
        else:
            print(f"{name:14s} fresh child {r['fresh_child']['seconds']:6.2f} s   warm first "
                  f"{r['warm_first']['seconds']:6.2f} s   warm median {r['warm_median_s']:6.2f} s   "
                  f"all passed: {r['all_passed']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    where = provenance(argv)
    where["command"] = shlex.join(["python", "benchmarks/guard_check_time.py", *argv])
    args.out.write_text(json.dumps({"provenance": where, "dtype": args.dtype, "target_warm_s": 5.0,
                                    "models": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
