#!/usr/bin/env bash
# The incident family's GPU results (issue 23), run on the device from the repo root, each step
# timed (about 5 minutes each at most): the corpus in both modes with the two sanitizer anchors
# (gpu_demo/lab/results/corpus-h200.json), the whole-process check's cost on a server start-up
# ($OUT/process-startup-overhead.json, and a profile of one more checked start-up in
# $OUT/process-startup-profile.txt), the model zoo under both checks ($OUT/zoo-h200.json), and
# the GPU tests of the recorder, the whole-process check and the corpus. JSON files carry their
# provenance; copies land in $OUT. About 8 minutes in all; the seat's whole test command
# (python3 scripts/check_gpu_install.py --out "$OUT/seat-h200.json", about 4 minutes) is a run of its own, and
# so is where the start-up's cost goes (PYTHONPATH=. python3 benchmarks/process_startup_layers.py --out
# "$OUT/process-startup-layers.json", 5 layers by 5 repeats in fresh processes, about 4 minutes).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
mkdir -p "$OUT"
time python3 -m gpu_demo corpus --anchors --jobs 16 --timeout 150
echo "corpus exit: $?"
cp gpu_demo/lab/results/corpus-h200.json "$OUT/"
python3 -m gpu_demo corpus --summary > "$OUT/corpus-summary.md"
time timeout 300 python3 benchmarks/process_startup_overhead.py --repeats 5 --out "$OUT/process-startup-overhead.json" \
    --profile "$OUT/process-startup-profile.txt"
echo "process-startup-overhead exit: $?"
time timeout 300 python3 -m gpu_demo.lab.zoo.runner --out "$OUT/zoo-h200.json" --jobs 4
echo "zoo exit: $?"
time timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu \
    tests/gpu_demo/lab/test_corpus.py tests/gpu_demo/guard/test_process_incident_family.py tests/gpu_demo/guard/test_autocheck.py \
    tests/gpu_demo/guard/record --junitxml="$OUT/family-gpu-tests.xml" 2>&1 | tail -30
echo "gpu tests exit: ${PIPESTATUS[0]}"
