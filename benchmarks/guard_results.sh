#!/usr/bin/env bash
# The guard's GPU results in one pass (run on the device, from the repo root): the corpus
# (GPU truth and the guard's verdict per program), the recorder overhead of a 61-layer capture,
# and the guard's GPU tests. JSON files land in gpu_demo/lab/results/ and are copied to $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
mkdir -p "$OUT"
python3 -m gpu_demo corpus --jobs 4
echo "corpus exit: $?"
python3 -m gpu_demo recorder-overhead --layers 61 --repeats 15
echo "recorder-overhead exit: $?"
cp gpu_demo/lab/results/corpus-h200.json gpu_demo/lab/results/recorder-overhead-h200.json "$OUT/"
python3 -m gpu_demo corpus --summary
python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/gpu_demo/guard/test_guard.py 2>&1 | tail -25
LAB_LAYER=gpu_demo.lab.exercise.my_layer_solution:make python3 -m pytest -q -p no:cacheprovider -o addopts= gpu_demo/lab/exercise/test_my_layer.py 2>&1 | tail -3
