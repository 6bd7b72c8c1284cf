#!/usr/bin/env bash
# Speculative decoding with the model's multi-token-prediction head
# (generate --mtp) on a generated ~120M-parameter Qwen3.5 (random weights,
# f32 compute, the stories tokenizer, a head of one layer as every release
# has), against plain decoding and prompt lookup: the run whose table is
# in docs/generation.md. No trained Qwen3.5 can be downloaded here, so the
# head's gain is bounded from both ends with built checkpoints:
#
#   echo     every layer's output zeroed (scripts/draft-pair -layers 0
#            -scale 0) and the head made to predict that model's picks
#            (-mtp-echo): every draft confirmed, at the full model's cost
#            a step. Its text repeats, so prompt lookup is at its best too.
#   random   the random checkpoint as written: its head proposes other
#            tokens than the model's, the cost where none is confirmed,
#            with --draft-p-min at its default and at 0 (drafts in full).
#
# Each variant runs ROUNDS times (default 3), the variants interleaved in
# each round; the eval rate (tokens a second, compilation excluded) of each
# run, the median and its ratio to its model's plain decoding, and the
# drafts confirmed are printed, with the load average. The greedy text of
# every variant must equal its model's plain decoding's (it exits 1
# otherwise).
#
#   scripts/bench-mtp.sh                    # N=128 new tokens, ROUNDS=3
#   ROUNDS=5 N=256 scripts/bench-mtp.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
n=${N:-128}
prompt=${PROMPT:-"The quick brown fox jumps over the lazy dog near the river bank"}
tmp="$(mktemp -d "${TMPDIR:-/tmp}/tputool-mtp-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/tputool" .
cat >"$tmp/config.json" <<'JSON'
{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "attention_bias": false, "attn_output_gate": true,
 "full_attention_interval": 4, "head_dim": 128, "hidden_act": "silu", "hidden_size": 768, "intermediate_size": 2048,
 "linear_conv_kernel_dim": 4, "linear_key_head_dim": 64, "linear_num_key_heads": 8, "linear_num_value_heads": 16,
 "linear_value_head_dim": 64, "max_position_embeddings": 4096, "num_attention_heads": 8, "num_hidden_layers": 12,
 "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "vocab_size": 32000, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
 "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
 "mtp_num_hidden_layers": 1}
JSON
go run ./scripts/gen-llm-checkpoint -config "$tmp/config.json" -o "$tmp/random"
cp testdata/stories260K-hf/tokenizer.json testdata/stories260K-hf/tokenizer_config.json "$tmp/random/"
go run ./scripts/draft-pair -m "$tmp/random" -layers 0 -scale 0 -mtp-echo -o "$tmp/echo"

names=(echo-plain echo-mtp echo-mtp4 echo-lookup random-plain random-mtp random-mtp-pmin0)
declare -A model=(
	[echo-plain]="$tmp/echo/model" [echo-mtp]="$tmp/echo/model" [echo-mtp4]="$tmp/echo/model" [echo-lookup]="$tmp/echo/model"
	[random-plain]="$tmp/random" [random-mtp]="$tmp/random" [random-mtp-pmin0]="$tmp/random"
)
declare -A args=(
	[echo-plain]="" [echo-mtp]="--mtp" [echo-mtp4]="--mtp --speculate 4" [echo-lookup]="--speculate 8"
	[random-plain]="" [random-mtp]="--mtp" [random-mtp-pmin0]="--mtp --draft-p-min 0"
)
declare -A rates drafts want
fail=0
for r in $(seq 1 "$rounds"); do
	for v in "${names[@]}"; do
		# shellcheck disable=SC2086 # the variant's flags
		out=$(nice -n 10 "$tmp/tputool" -v generate -m "${model[$v]}" -p "$prompt" -n "$n" --temperature 0 ${args[$v]} 2>"$tmp/err" | md5sum)
		rate=$(sed -n 's/^eval rate: *\([0-9.]*\).*/\1/p' "$tmp/err")
		rates[$v]="${rates[$v]:-} $rate"
		drafts[$v]=$(sed -n 's/^draft tokens: *//p' "$tmp/err")
		base=${v%%-*}
		if [ "$v" = "$base-plain" ]; then
			want[$base]=$out
		elif [ "$out" != "${want[$base]}" ]; then
			echo "bench-mtp: $v: the text differs from plain decoding's" >&2
			fail=1
		fi
		echo "round $r $v: $rate tok/s ${drafts[$v]}" >&2
	done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $n tokens, $rounds rounds, $(nproc) cores"
echo
echo "| variant | eval tok/s | median | vs plain | drafts confirmed (last round) |"
echo "|---|---|---:|---:|---|"
for v in "${names[@]}"; do
	m=$(echo "${rates[$v]}" | median)
	base=$(echo "${rates[${v%%-*}-plain]}" | median)
	printf '| %s | %s | %.1f | %.2fx | %s |\n' "$v" "$(echo "${rates[$v]}" | sed 's/^ //; s/ /, /g')" "$m" "$(echo "$m / $base" | bc -l)" "${drafts[$v]:--}"
done
exit $fail
