#!/usr/bin/env bash
# Decode and prefill throughput of a generated ~110M-parameter Llama-shape
# model (dim 768, 12 layers, 12 heads, intermediate 2048, vocab 32000, f32,
# tied embeddings) on the pure-Go backend, at batch 1 and 8, compiled and
# eager, with the machine's memcpy bandwidth and the fraction of the
# memory-bandwidth roofline reached (weight bytes per decode step / step
# time, over memcpy GB/s).
#
# The model is generated into a temporary directory (about 440 MB, removed
# afterwards) unless TPUTOOL_BENCH_MODEL names an existing one, e.g. one
# written by `go run ./scripts/gen-llm-checkpoint -o DIR`. Runs under nice.
#
#   scripts/bench-llm.sh                      # everything, 5 s per benchmark
#   BENCHTIME=20x scripts/bench-llm.sh 'LLM/decode/compiled'
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-LLM}"
benchtime="${BENCHTIME:-5s}"
exec nice -n 10 go test ./compile -run '^$' -bench "$filter" -benchtime "$benchtime" -timeout 60m -v
