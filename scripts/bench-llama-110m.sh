#!/usr/bin/env bash
# `tputool bench` on a generated ~110M-parameter Llama-shape model (dim 768,
# 12 layers, 12 heads, intermediate 2048, vocab 32000, tied embeddings, f32;
# random weights, about 440 MB), eager and compiled, the run whose table is
# in docs/benchmarks.md.
#
# The model is written into a temporary directory (removed afterwards) by
# scripts/gen-llm-checkpoint, unless TPUTOOL_BENCH_MODEL names a directory
# that already holds it. The weights are never committed.
#
#   scripts/bench-llama-110m.sh                       # the documented run, markdown
#   scripts/bench-llama-110m.sh -o json > run.json    # extra flags go to tputool bench
#   BENCH_ARGS="--batch 1 --prompt-len 512 --gen-len 128 --repeat 5" scripts/bench-llama-110m.sh
#
# It keeps every core busy for a long time on a CPU, so it runs under nice.
# The 1-minute load average is recorded in the report's header.
set -euo pipefail
cd "$(dirname "$0")/.."

args="${BENCH_ARGS:---batch 1,8 --prompt-len 128 --gen-len 32 --repeat 3 --warmup 1}"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tputool-bench-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

model="${TPUTOOL_BENCH_MODEL:-}"
if [ -z "$model" ]; then
	model="$tmp/llama-110m"
	echo "writing the model to $model" >&2
	go run ./scripts/gen-llm-checkpoint -o "$model" -hidden 768 -layers 12 -heads 12 -intermediate 2048 -vocab 32000
fi

go build -o "$tmp/tputool" .
# shellcheck disable=SC2086 # args is a list of flags
exec_cmd=(nice -n 10 "$tmp/tputool" bench --model "$model" $args "$@")
echo "+ tputool bench --model $model $args $*" >&2
"${exec_cmd[@]}"
