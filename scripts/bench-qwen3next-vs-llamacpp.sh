#!/usr/bin/env bash
# A random Qwen3-Next on tputool and on llama.cpp's kernels (ollama), same
# weights, side by side, in rounds that interleave the two: batch-1
# decode, each round one tputool bench run (--repeat 3, median) and three
# ollama generations (median). Every line carries the load average.
#
# The model is Qwen3-Next-80B-A3B's layer (hidden 2048; gated attention
# of 16 heads, 2 KV heads of 256; Gated DeltaNet of 16 key and 32 value
# heads of 128, three to one; experts of 512, top 10, a shared expert of
# 512; vocabulary 151936, untied head) in LAYERS layers (default 8) with
# EXPERTS experts (default 32) a layer instead of 48 and 512, bf16, random
# values, the experts one tensor per expert as the release stores them
# (scripts/gen-llm-checkpoint -experts-apart; 3.7 GB at the defaults).
# The tokenizer is a byte-level BPE padded with plain tokens to the
# vocabulary (scripts/pad-tokenizer.py). ollama imports the Hugging Face
# folder itself (`ollama create`, its convert_qwen3next.go, which splits
# in_proj_qkvz into its q/k/v and gate matrices). Q8=1 also runs tputool
# with --quantize int8 against ollama's q8_0 of the same import, and Q4=1
# --quantize int4 against its q4_K_M. ollama samples (temperature 1,
# top-k 40, a fixed seed): greedy decoding of a random model can repeat
# one token, and ollama ends a generation after 30 repeats.
#
#   OLLAMA=/path/to/ollama scripts/bench-qwen3next-vs-llamacpp.sh
#
# Build ollama v0.24.0 with CGO_CFLAGS="-O3 -march=native"
# CGO_CXXFLAGS="-O3 -march=native" go build. DIR (default
# /tmp/tputool-qwen3next-bench) keeps the model between runs. Env: ROUNDS
# (3), GEN (32 decode tokens), LAYERS (8), EXPERTS (32).
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
DIR="${DIR:-/tmp/tputool-qwen3next-bench}"
ROUNDS="${ROUNDS:-3}"
GEN="${GEN:-32}"
LAYERS="${LAYERS:-8}"
EXPERTS="${EXPERTS:-32}"
PORT="${PORT:-11512}"
mkdir -p "$DIR/hf"
if [ ! -f "$DIR/hf/model.safetensors" ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
 "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5120,
 "num_hidden_layers": $LAYERS, "full_attention_interval": 4,
 "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
 "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
 "linear_num_key_heads": 16, "linear_num_value_heads": 32,
 "num_experts": $EXPERTS, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
 "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
 "norm_topk_prob": true, "partial_rotary_factor": 0.25, "rope_theta": 10000000,
 "rms_norm_eps": 1e-06, "max_position_embeddings": 4096, "tie_word_embeddings": false,
 "hidden_act": "silu", "attention_bias": false, "bos_token_id": 270, "eos_token_id": 270,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 151936
fi
go build -o "$DIR/tputool" .

export OLLAMA_MODELS="$DIR/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_NUM_PARALLEL=1 OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=512
"$OLLAMA" serve > "$DIR/ollama.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
if ! "$OLLAMA" list | grep -q '^qwen3next-bf16'; then
  printf 'FROM %s\n' "$DIR/hf" > "$DIR/Modelfile"
  "$OLLAMA" create qwen3next-bf16 -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
fi
if [ "${Q8:-0}" = 1 ] && ! "$OLLAMA" list | grep -q '^qwen3next-q8'; then
  "$OLLAMA" create qwen3next-q8 --quantize q8_0 -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
fi
if [ "${Q4:-0}" = 1 ] && ! "$OLLAMA" list | grep -q '^qwen3next-q4'; then
  "$OLLAMA" create qwen3next-q4 --quantize q4_K_M -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
fi
name() {
  case "$1" in
  int8) echo qwen3next-q8 ;;
  int4) echo qwen3next-q4 ;;
  *) echo qwen3next-bf16 ;;
  esac
}
PROMPT="The quick brown fox jumps over the lazy dog while the cat sleeps"

ollama_tok_s() { # median decode tok/s of 3 generations of model $1
  for _ in 1 2 3; do
    curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"$1\",\"prompt\":\"$PROMPT\",\"raw\":true,\"stream\":false,
      \"options\":{\"num_predict\":$GEN,\"temperature\":1,\"top_k\":40,\"seed\":7,\"num_thread\":$(nproc),\"num_ctx\":512}}" |
      python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["eval_count"]/r["eval_duration"]*1e9)'
  done | sort -g | sed -n 2p
}
tputool_tok_s() { # median decode tok/s of --repeat 3
  "$DIR/tputool" bench --model "$DIR/hf" --batch 1 --prompt-len 16 --gen-len "$GEN" --repeat 3 --warmup 1 \
    --mode compiled ${1:+--quantize $1} -o json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["rows"][0]["decode_tok_s"]["median"])'
}
quant=("")
[ "${Q8:-0}" = 1 ] && quant+=(int8)
[ "${Q4:-0}" = 1 ] && quant+=(int4)
for q in "${quant[@]}"; do ollama_tok_s "$(name "$q")" > /dev/null; done # load and warm
echo "round  weights  tputool_tok_s  ollama_tok_s  ratio  load_avg"
for r in $(seq "$ROUNDS"); do
  for q in "${quant[@]}"; do
    t=$(tputool_tok_s "$q")
    o=$(ollama_tok_s "$(name "$q")")
    printf '%s  %s  %.2f  %.2f  %.2f  %s\n' "$r" "${q:-bf16}" "$t" "$o" "$(python3 -c "print($t/$o)")" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
