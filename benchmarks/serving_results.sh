#!/usr/bin/env bash
# Issue 34's acceptance set, run on the device from the repo root, each part time-bounded. On the H200 at 6275c53
# (2026-12-04) the start-up part took 76 s, generate 189 s and long 337 s: a device call is at most 10 minutes, so
# run long in a call of its own (`benchmarks/serving_results.sh long`). What it writes, under $OUT (default
# out/results):
#   corpus-serving.json    the four serving programs' truth and whole-process verdicts (--out keeps the
#                          committed gpu_demo/lab/results/corpus-h200.json as it is)
#   corpus.json, zoo.json, (verdicts, not in the default set) every corpus program's and zoo model's verdicts, and
#   stateful.json          the stateful decode steps' (about 4 minutes on an H100); `python -m gpu_demo compare
#                          $OUT/corpus.json` (and zoo.json) sets them beside the committed H200 results
#   startup-overhead.json  the start-up benchmark (61 layers, 8 batch sizes), STARTUP_REPEATS (11) repeats,
#                          checked over unchecked
#   generate-overhead.json eager generate after a start-up, 7 repeats as far as GENERATE_LIMIT (s) allows
#   serving-overhead.json  a server's life, plain and checked: 7 repeats of SERVING_STEPS steps in blocks of 1,000
#   serving-100k.json      7 repeats of 100,000 steps in blocks of 5,000, plain and checked (the last block
#                          over the first, over plain, memory growth)
#   serving-csan.json      plain, checked and CUDA's sanitizer side by side: 3 repeats of 1,000 steps (the
#                          sanitizer costs ~12x; a shorter run)
#   startup.tape,          named only (not in the default set): the checker's calls in one checked start-up
#   serving.tape           and in a server's 5,000 steps, to replay off the device (check_replay.py replay)
# JSON files carry their provenance and say how many repeats ran (repeats_done). Name parts to run only those:
#     benchmarks/serving_results.sh corpus generate
#     SERVING_STEPS=10000 benchmarks/serving_results.sh serving
# Issue 34's acceptance in three device calls of 10 minutes: `startup generate` (about 6.5 minutes: generate's 7
# repeats took 34 s each on an H100 at 1a3cbec, and a GENERATE_LIMIT of 250 ran 6 of them at c7493be), `verdicts`
# (about 5 minutes: the whole corpus took 96 s on a quiet H100 host, over 120 s on a slow one), then `long`.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
SERVING_STEPS=${SERVING_STEPS:-5000}
GENERATE_LIMIT=${GENERATE_LIMIT:-300}
STARTUP_REPEATS=${STARTUP_REPEATS:-11}
PARTS=${*:-corpus startup generate serving long csan}
mkdir -p "$OUT"
for part in $PARTS; do
    case $part in
    corpus)
        time timeout 100 python3 -m gpu_demo corpus --jobs 4 --timeout 100 --out "$OUT/corpus-serving.json" \
            --only serve_vllm_buckets serve_sglang_buckets serve_output_read_after_other_bucket serve_static_input_rebuilt
        echo "corpus exit: $?" ;;
    verdicts)
        time timeout 240 python3 -m gpu_demo corpus --jobs 8 --timeout 100 --out "$OUT/corpus.json"
        echo "corpus (all programs) exit: $?"
        timeout 240 python3 -m gpu_demo.lab.zoo.stateful --out "$OUT/stateful.json" > "$OUT/stateful.log" 2>&1 &
        stateful=$!
        time timeout 240 python3 -m gpu_demo.lab.zoo.runner --out "$OUT/zoo.json" --jobs 4
        echo "zoo exit: $?"
        wait $stateful; echo "stateful exit: $? (its output: $OUT/stateful.log)" ;;
    startup)
        time timeout $((STARTUP_REPEATS * 20 + 20)) python3 benchmarks/process_startup_overhead.py \
            --repeats "$STARTUP_REPEATS" --out "$OUT/startup-overhead.json"
        echo "startup-overhead exit: $?" ;;
    generate)
        time timeout $((GENERATE_LIMIT + 25)) python3 benchmarks/generate_overhead.py --repeats 7 \
            --time-limit "$GENERATE_LIMIT" --out "$OUT/generate-overhead.json"
        echo "generate-overhead exit: $?" ;;
    serving)
        time timeout 130 python3 benchmarks/serving_overhead.py --steps "$SERVING_STEPS" --block 1000 --repeats 7 \
            --modes plain checked --time-limit 110 --out "$OUT/serving-overhead.json"
        echo "serving-overhead exit: $?" ;;
    long)
        time timeout 560 python3 benchmarks/serving_overhead.py --steps 100000 --block 5000 --repeats 7 \
            --modes plain checked --time-limit 480 --out "$OUT/serving-100k.json"   # about 48 s a repeat (6275c53)
        echo "serving-100k exit: $?" ;;
    csan)
        time timeout 90 python3 benchmarks/serving_overhead.py --steps 1000 --block 500 --repeats 3 \
            --modes plain checked csan --time-limit 70 --out "$OUT/serving-csan.json"
        echo "serving-csan exit: $?" ;;
    tape)
        time timeout 120 python3 benchmarks/check_replay.py tape --out "$OUT/startup.tape"
        echo "tape startup exit: $?"
        time timeout 120 python3 benchmarks/check_replay.py tape --serving 5000 --out "$OUT/serving.tape"
        echo "tape serving exit: $?" ;;
    *)
        echo "serving_results.sh: unknown part $part (the parts: corpus verdicts startup generate serving long csan tape)" >&2
        exit 2 ;;
    esac
done
