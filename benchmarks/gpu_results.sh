#!/usr/bin/env bash
# The recorded GPU results of gpu_demo/lab/results/, in one pass (run on the device, from the repo root):
# the conformance matrix, the benchmark and calibration, the decode proxy, the GPU tests and two
# real-capture recordings. JSON files land in gpu_demo/lab/results/ and are copied to $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
mkdir -p "$OUT"
# Each command replaces a committed file only when --out names it (without, it refuses).
R=gpu_demo/lab/results
python3 -m gpu_demo run --matrix --jobs 4 --out "$R/matrix-h200.json"
python3 -m gpu_demo bench --out "$R/bench-h200.json" --calibration-out "$R/calibration-h200.json"
python3 -m gpu_demo bench --host-costs --out "$R/host-costs-h200.json"
python3 -m gpu_demo decode --layers 4 --steps 32 --jobs 3 --out "$R/decode-h200.json"
cp gpu_demo/lab/results/*-h200.json "$OUT/"
python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/gpu_demo/lab/moe/test_moe_gpu.py
for order in shared_first routed_first; do
  python3 -m gpu_demo record --order "$order" --trace-out "$OUT/trace-$order.json"
  echo "record --order $order exit: $?"
done
