#!/usr/bin/env bash
# Speculative decoding with a draft model (generate --draft-model) on a
# generated ~110M-parameter Llama-shape model (random weights, f32, the
# stories tokenizer), against plain decoding and prompt lookup, the run
# whose table is in docs/generation.md. No trained pair of a model and its
# draft can be downloaded here, so the pairs are built to bound what a
# draft model gives:
#
#   layer    the first layer of the model with its head (scripts/draft-pair
#            -layers 1 -scale 0: the model's later layers write nothing,
#            so the draft agrees with it always): the gain where every
#            draft is confirmed, for a draft a fifth of the model's cost;
#   int4     the model itself with int4 weights (--draft-quantize int4);
#   wrong    a random one-layer model with its own head, which proposes
#            other tokens than the model's: the cost where none is
#            confirmed, with --draft-p-min at its default (its drafts are
#            unsure, so it drafts little) and at 0 (it drafts in full).
#
# Each variant runs ROUNDS times (default 3), the variants interleaved in
# each round; the eval rate (tokens a second, compilation excluded) of each
# run, the median and its ratio to plain decoding's median, and the drafts
# confirmed are printed, with the load average. The greedy text of every
# variant must equal plain decoding's (it exits 1 otherwise).
#
#   scripts/bench-draft.sh                    # N=128 new tokens, ROUNDS=3
#   ROUNDS=5 N=256 scripts/bench-draft.sh
#
# TPUTOOL_BENCH_MODEL may name the model's directory (a Llama-shape
# checkpoint with a tokenizer); the pairs are written to a temporary
# directory, removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
n=${N:-128}
prompt=${PROMPT:-"The quick brown fox jumps over the lazy dog near the river bank"}
tmp="$(mktemp -d "${TMPDIR:-/tmp}/tputool-draft-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/tputool" .
src="${TPUTOOL_BENCH_MODEL:-}"
if [ -z "$src" ]; then
	src="$tmp/llama-110m"
	echo "writing the model to $src" >&2
	go run ./scripts/gen-llm-checkpoint -o "$src" -hidden 768 -layers 12 -heads 12 -intermediate 2048 -vocab 32000
	cp testdata/stories260K-hf/tokenizer.json testdata/stories260K-hf/tokenizer_config.json "$src/"
fi
go run ./scripts/draft-pair -m "$src" -layers 1 -scale 0 -o "$tmp/pair"
model="$tmp/pair/model"
cat >"$tmp/wrong.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768, "intermediate_size": 2048,
 "num_hidden_layers": 1, "num_attention_heads": 12, "num_key_value_heads": 12, "head_dim": 64, "vocab_size": 32000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
go run ./scripts/gen-llm-checkpoint -config "$tmp/wrong.json" -o "$tmp/wrong"
cp "$model"/tokenizer*.json "$tmp/wrong/"

names=(plain layer int4 wrong wrong-pmin0 lookup)
declare -A args=(
	[plain]=""
	[layer]="--draft-model $tmp/pair/draft"
	[int4]="--draft-model $model --draft-quantize int4"
	[wrong]="--draft-model $tmp/wrong"
	[wrong-pmin0]="--draft-model $tmp/wrong --draft-p-min 0"
	[lookup]="--speculate 8"
)
declare -A rates drafts
fail=0
for r in $(seq 1 "$rounds"); do
	for v in "${names[@]}"; do
		# shellcheck disable=SC2086 # the variant's flags
		out=$(nice -n 10 "$tmp/tputool" -v generate -m "$model" -p "$prompt" -n "$n" --temperature 0 ${args[$v]} 2>"$tmp/err" | md5sum)
		rate=$(sed -n 's/^eval rate: *\([0-9.]*\).*/\1/p' "$tmp/err")
		rates[$v]="${rates[$v]:-} $rate"
		drafts[$v]=$(sed -n 's/^draft tokens: *//p' "$tmp/err")
		if [ "$v" = plain ]; then
			want=$out
		elif [ "$out" != "$want" ]; then
			echo "bench-draft: $v: the text differs from plain decoding's" >&2
			fail=1
		fi
		echo "round $r $v: $rate tok/s ${drafts[$v]}" >&2
	done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
base=$(echo "${rates[plain]}" | median)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $n tokens, $rounds rounds, $(nproc) cores"
echo
echo "| variant | eval tok/s | median | vs plain | drafts confirmed (last round) |"
echo "|---|---|---:|---:|---|"
for v in "${names[@]}"; do
	m=$(echo "${rates[$v]}" | median)
	printf '| %s | %s | %.1f | %.2fx | %s |\n' "$v" "$(echo "${rates[$v]}" | sed 's/^ //; s/ /, /g')" "$m" "$(echo "$m / $base" | bc -l)" "${drafts[$v]:--}"
done
exit $fail
