#!/usr/bin/env bash
# Issue 34's GPU evidence, run on the device from the repo root, each part time-bounded (under 9 minutes
# in all, about 8 at most): the four serving programs' truth and whole-process verdicts
# ($OUT/corpus-serving.json; --out keeps the committed gpu_demo/lab/results/corpus-h200.json as it is), a
# server's life plain, checked and under CUDA's sanitizer ($OUT/serving-overhead.json: 3,000 steps in
# blocks of 1,000, 7 repeats as far as SERVING_LIMIT seconds allow), and eager generate after a start-up
# ($OUT/generate-overhead.json, 7 repeats as far as GENERATE_LIMIT allows). JSON files carry their
# provenance and say how many repeats ran (repeats_done). All three in one call may cut the repeats
# short of 7; name parts to run only those, a cut one alone with more time:
#     benchmarks/serving_results.sh corpus generate
#     SERVING_LIMIT=480 benchmarks/serving_results.sh serving
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out/results}
SERVING_LIMIT=${SERVING_LIMIT:-220}
GENERATE_LIMIT=${GENERATE_LIMIT:-110}
PARTS=${*:-corpus serving generate}
mkdir -p "$OUT"
for part in $PARTS; do
    case $part in
    corpus)
        time timeout 120 python3 -m gpu_demo corpus --jobs 4 --timeout 100 --out "$OUT/corpus-serving.json" \
            --only serve_vllm_buckets serve_sglang_buckets serve_output_read_after_other_bucket serve_static_input_rebuilt
        echo "corpus exit: $?" ;;
    serving)
        time timeout $((SERVING_LIMIT + 50)) python3 benchmarks/serving_overhead.py --steps 3000 --block 1000 \
            --repeats 7 --time-limit "$SERVING_LIMIT" --out "$OUT/serving-overhead.json"
        echo "serving-overhead exit: $?" ;;
    generate)
        time timeout $((GENERATE_LIMIT + 30)) python3 benchmarks/generate_overhead.py --repeats 7 \
            --time-limit "$GENERATE_LIMIT" --out "$OUT/generate-overhead.json"
        echo "generate-overhead exit: $?" ;;
    *)
        echo "serving_results.sh: unknown part $part (the parts: corpus serving generate)" >&2
        exit 2 ;;
    esac
done
