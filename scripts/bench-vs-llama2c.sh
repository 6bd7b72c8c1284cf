#!/usr/bin/env bash
# Decode speed of tputool's CPU engine (--device cpu) against llama2.c's
# run.c on the same weights: a ~110M-parameter Llama shape (dim 768, 12
# layers, 12 heads, intermediate 2048, vocab 32000, tied embeddings, f32,
# random weights) written by scripts/gen-llm-checkpoint and converted to
# run.c's .bin by scripts/export-llama2c (wq/wk rows permuted to run.c's
# RoPE pairing; a placeholder tokenizer.bin). The run is documented in
# docs/cpu-engine.md, "Against llama2.c run.c".
#
# run.c is not part of this repository: fetch llama2.c yourself and build it
#
#   gcc -O3 -march=native -fopenmp -o /tmp/llama2c/run /tmp/llama2c/run.c -lm
#
#   LLAMA2C_RUN=/tmp/llama2c/run scripts/bench-vs-llama2c.sh
#   LLAMA2C_RUN=... TPUTOOL_BENCH_MODEL=/tmp/llama-110m ROUNDS=5 scripts/bench-vs-llama2c.sh
#
# run.c first runs once untimed (tputool's own warmup is --warmup 1). Each
# of $ROUNDS rounds (default 5) then runs, one after the other: run.c
# greedy (-t 0) with OMP_NUM_THREADS=$THREADS (default 2) for 129 steps
# from a 3-token prompt (BOS, " ", "x"), which times 128 forward passes
# and prints "achieved tok/s"; tputool --device cpu bench, batch 1, prompt 1, 128 generated
# tokens, compiled, decode tok/s from the JSON row; and tputool --device
# cpu:go (GoMLX's go backend) the same way, for context. Medians over the
# rounds, the ratio ours/run.c and the load average come last. Wrap the
# whole script in `flock /tmp/bench.lock` on a shared machine.
#
# Measured 2026-12-03 on 2 shared cores (load average 1.6-2.1 throughout),
# run.c built with gcc -O3 -march=native -fopenmp, 5 rounds: run.c 21.56
# tok/s, tputool --device cpu 39.19 tok/s (1.82x), --device cpu:go 12.76.
set -euo pipefail
cd "$(dirname "$0")/.."

run_c="${LLAMA2C_RUN:-/tmp/llama2c/run}"
rounds="${ROUNDS:-5}"
threads="${THREADS:-2}"
[ -x "$run_c" ] || { echo "bench-vs-llama2c: no run.c binary at $run_c (set LLAMA2C_RUN)" >&2; exit 2; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tputool-l2c-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

model="${TPUTOOL_BENCH_MODEL:-}"
if [ -z "$model" ]; then
	model="$tmp/llama-110m"
	echo "writing the model to $model" >&2
	go run ./scripts/gen-llm-checkpoint -o "$model" -hidden 768 -layers 12 -heads 12 -intermediate 2048 -vocab 32000
fi
go run ./scripts/export-llama2c -m "$model" -o "$tmp/model.bin" -tokenizer "$tmp/tokenizer.bin" -seq-len 512
go build -o "$tmp/tputool" .

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.4f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ours() { # $1: device
	"$tmp/tputool" --device "$1" bench -m "$model" --task generate --batch 1 --prompt-len 1 --gen-len 128 \
		--repeat 1 --warmup 1 --mode compiled -o json 2>/dev/null | jq -r '.rows[0].decode_tok_s.median'
}

: >"$tmp/runc" && : >"$tmp/cpu" && : >"$tmp/go"
echo "load before: $(uptime)"
runc() {
	OMP_NUM_THREADS="$threads" "$run_c" "$tmp/model.bin" -z "$tmp/tokenizer.bin" -t 0 -n 129 -i x 2>&1 >/dev/null |
		sed -n 's/^achieved tok\/s: //p'
}
runc >/dev/null # warmup: the mapping's pages and the CPU's state
for r in $(seq 1 "$rounds"); do
	c=$(runc)
	o=$(ours cpu)
	g=$(ours cpu:go)
	echo "$c" >>"$tmp/runc" && echo "$o" >>"$tmp/cpu" && echo "$g" >>"$tmp/go"
	printf 'round %d: run.c %.2f tok/s, tputool cpu %.2f tok/s, tputool cpu:go %.2f tok/s; load %s\n' \
		"$r" "$c" "$o" "$g" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
mc=$(median <"$tmp/runc")
mo=$(median <"$tmp/cpu")
mg=$(median <"$tmp/go")
printf 'median of %d: run.c %.2f tok/s, tputool --device cpu %.2f tok/s, tputool --device cpu:go %.2f tok/s\n' "$rounds" "$mc" "$mo" "$mg"
awk -v o="$mo" -v c="$mc" -v g="$mg" 'BEGIN {printf "ours/run.c: cpu %.2fx, cpu:go %.2fx\n", o/c, g/c}'
echo "load after: $(uptime)"
