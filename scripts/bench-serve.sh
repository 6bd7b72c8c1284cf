#!/usr/bin/env bash
# `tputool serve` under load: starts the server on a free port, runs
# scripts/servebench at 1, 8 and 32 concurrent streams (greedy, ignore_eos,
# fixed lengths; one warm-up round per level), prints its table, and stops
# the server with SIGTERM (it drains, then exits 0).
#
#   scripts/bench-serve.sh                      # the shipped stories260K model
#   scripts/bench-serve.sh 110m                 # a generated ~110M Llama (random weights,
#                                               # about 440 MB, written to a temporary directory)
#   scripts/bench-serve.sh /path/to/model       # any model directory with a tokenizer
#   LEVELS=1,8 BENCH_ARGS="-max-tokens 128 -json" scripts/bench-serve.sh 110m
#   LEVELS=1,8,1,8,1,8 scripts/bench-serve.sh 110m   # levels interleaved: pairs for a ratio on a noisy machine
#   SERVE_ARGS="--device cpu --max-batch 16" scripts/bench-serve.sh
#
# The 110m model is scripts/gen-llm-checkpoint's benchmark shape (dim 768,
# 12 layers, vocab 32000) with the stories tokenizer copied in; its text is
# gibberish, which does not matter with ignore_eos. TPUTOOL_BENCH_MODEL
# names a directory that already holds it. The server's log (access lines
# included) is kept in $TMPDIR and named at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

levels="${LEVELS:-1,8,32}"
serve_args="${SERVE_ARGS:---max-batch 32}"
bench_args="${BENCH_ARGS:--max-tokens 64 -requests 2}"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tputool-bench-serve-XXXXXX")"
log="${TMPDIR:-/tmp}/tputool-bench-serve.log"
server=""
cleanup() {
	if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
		kill -TERM "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

model="${1:-testdata/stories260K-hf}"
if [ "$model" = "110m" ]; then
	model="${TPUTOOL_BENCH_MODEL:-}"
	if [ -z "$model" ]; then
		model="$tmp/llama-110m"
		echo "writing the model to $model" >&2
		go run ./scripts/gen-llm-checkpoint -o "$model" -hidden 768 -layers 12 -heads 12 -intermediate 2048 -vocab 32000
	fi
	for f in tokenizer.json tokenizer_config.json; do
		[ -e "$model/$f" ] || cp "testdata/stories260K-hf/$f" "$model/$f"
	done
fi

go build -o "$tmp/tputool" .
go build -o "$tmp/servebench" ./scripts/servebench

# shellcheck disable=SC2086 # serve_args is a list of flags
echo "+ tputool --json serve --model $model --port 0 $serve_args" >&2
# shellcheck disable=SC2086
"$tmp/tputool" --json serve --model "$model" --port 0 $serve_args >"$tmp/out" 2>"$log" &
server=$!

# The first stdout line is {"type":"listening","address":...}.
addr=""
for _ in $(seq 1 1200); do
	if ! kill -0 "$server" 2>/dev/null; then
		echo "tputool serve exited; its log ($log):" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	addr="$(sed -n 's/.*"type":"listening".*"address":"\([^"]*\)".*/\1/p; s/.*"address":"\([^"]*\)".*"type":"listening".*/\1/p' "$tmp/out" | head -1)"
	[ -n "$addr" ] && break
	sleep 0.5
done
if [ -z "$addr" ]; then
	echo "tputool serve did not listen within 10 minutes; its log: $log" >&2
	exit 1
fi
echo "serving on $addr" >&2

# shellcheck disable=SC2086 # bench_args is a list of flags
echo "+ servebench -url http://$addr -c $levels $bench_args" >&2
# shellcheck disable=SC2086
"$tmp/servebench" -url "http://$addr" -c "$levels" $bench_args

kill -TERM "$server"
code=0
wait "$server" || code=$?
server=""
echo "server stopped (exit $code); its log: $log" >&2
exit "$code"
