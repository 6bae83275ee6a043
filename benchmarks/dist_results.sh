#!/usr/bin/env bash
# The tensor-parallel MoE and the guard under torchrun, on TP GPUs of one host (run from the repo
# root on the device): TP=1 (one H200, NCCL world size 1) or TP=2 (two H200s). Writes
# $OUT/tp-h200x$TP.json (outcomes per order per rank, guard verdicts, replay latency with and
# without the all-reduce, provenance; it belongs in gpu_demo/lab/results/), the whole-job check's
# reports (the divergent program is captured but never replayed: its replay would hang) and,
# with TP=1, the GPU tests' log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
TP=${TP:-1}
mkdir -p "$OUT"
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node "$TP" -m gpu_demo.distributed run --tp "$TP" \
    --out "$OUT/tp-h200x$TP.json" 2>&1 | grep -v "^W[0-9]" | tail -20
echo "run exit: ${PIPESTATUS[0]}"
CAPTURE_ORDER_REPORT="$OUT/tp-h200x$TP-job-safe.txt" timeout 45 python3 -m torch.distributed.run --standalone --nproc-per-node "$TP" \
    -m gpu_demo.distributed check -m gpu_demo.lab.distributed.example > "$OUT/tp-h200x$TP-job-safe.log" 2>&1
echo "whole-job check, safe program exit: $?"
if [ "$TP" -ge 2 ]; then
    for variant in fix divergent; do
        flags="--shards last_empty"
        [ "$variant" = divergent ] && flags="$flags --replays 0 --skip-empty-shard"
        CAPTURE_ORDER_REPORT="$OUT/tp-h200x$TP-job-$variant.txt" timeout 45 python3 -m torch.distributed.run --standalone \
            --nproc-per-node "$TP" -m gpu_demo.distributed check -m gpu_demo.lab.distributed.example $flags \
            > "$OUT/tp-h200x$TP-job-$variant.log" 2>&1
        echo "whole-job check, $variant program exit: $?"
    done
else
    timeout 75 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/gpu_demo/lab/distributed \
        > "$OUT/tp-h200x1-gpu-tests.log" 2>&1
    echo "gpu tests exit: $?"; tail -3 "$OUT/tp-h200x1-gpu-tests.log"
fi
head -c 2000 "$OUT"/tp-h200x$TP-job-*.txt
