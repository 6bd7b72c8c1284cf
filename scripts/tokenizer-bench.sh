#!/usr/bin/env bash
# Encode throughput of loader/tokenizer against the JS reference
# (@lenml/tokenizers) on the same 10 MB of mixed text, one core each.
#
#   scripts/tokenizer-bench.sh            # needs /tmp/tokref (see tokenizer-gen-vectors.js)
#
# Run it with the machine quiet; it uses nice and GOMAXPROCS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
text=$(mktemp /tmp/tokbench.XXXXXX.txt)
trap 'rm -f "$text"' EXIT
TPUTOOL_TOKENIZER_BENCH_TEXT="$text" go test ./loader/tokenizer/ -run TestWriteBenchText -count=1 >/dev/null
echo "Go (GOMAXPROCS=1):"
GOMAXPROCS=1 nice go test ./loader/tokenizer/ -run XXX -bench 'Encode(Qwen3|Llama3)$' -benchtime 3x -cpu 1 | grep Benchmark
echo "JS reference:"
NODE_PATH="${NODE_PATH:-/tmp/tokref/node_modules}" nice node scripts/tokenizer-bench.js "$text"
