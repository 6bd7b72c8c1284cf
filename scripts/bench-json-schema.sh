#!/usr/bin/env bash
# Decode with and without constrained decoding, interleaved: `tputool
# generate` of GEN tokens (default 128) with and without --json-schema,
# ROUNDS rounds (default 3), printing each run's eval tok/s, the first
# characters of its text, and the load average.
#
#   scripts/bench-json-schema.sh MODEL_DIR [TEMPERATURE]
#
# TEMPERATURE 1 (the default) samples, so the mask is applied at every
# step; 0 is greedy, where a step whose argmax the grammar allows costs
# one check. The schema (a title, a list of tags, a score) is written to a
# temporary file.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: $0 MODEL_DIR [TEMPERATURE]}"
temp="${2:-1}"
gen="${GEN:-128}"
rounds="${ROUNDS:-3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/tputool" .
printf '%s' '{"type":"object","properties":{"title":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},"required":["title","tags","score"]}' > "$tmp/schema.json"
echo "round  mode    eval_tok_s  tokens  text  load_avg"
for r in $(seq "$rounds"); do
  for mode in plain schema; do
    extra=()
    [ "$mode" = schema ] && extra=(--json-schema "$tmp/schema.json")
    "$tmp/tputool" generate --model "$model" -p "Write a JSON record of a book." -n "$gen" --temperature "$temp" --seed 1 --json "${extra[@]}" 2>/dev/null |
      python3 -c "
import json, sys
r = json.load(sys.stdin)[0]
m = r['metrics']
print('$r  $mode ', round(m['eval_count'] / (m['eval_duration'] / 1e9), 1), m['eval_count'], repr(r['text'][:40]), open('/proc/loadavg').read().split()[0])"
  done
done
