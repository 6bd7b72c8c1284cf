#!/usr/bin/env bash
# Batch-1 decode of a random dense Llama on tputool and on llama.cpp's
# kernels (ollama), same weights, side by side, in rounds that interleave
# the two. Each round runs, for each pair of PAIRS, one tputool bench
# (--repeat 3, median) and three ollama generations (median). Every line
# carries the load average.
#
# The model: Llama shape, hidden HIDDEN (768), LAYERS (12) layers, HEADS
# (12) heads, intermediate INTER (2048), vocab 32000, untied head, bf16
# (the 110M of docs/cpu-engine.md at the defaults), with a byte-level BPE
# tokenizer padded with plain tokens to the vocabulary (BOS and EOS the last,
# which a random model rarely picks, so that ollama decodes GEN tokens). ollama imports the
# folder itself (`ollama create`, its convert_llama.go) and quantises it
# with --quantize (v0.24.0 offers q8_0, q4_K_S and q4_K_M, no q4_0).
#
# DTYPE=F16 writes the checkpoint in float16 instead (ollama keeps a
# float16 folder as F16, a bfloat16 one as BF16: llama.cpp's F16 products
# widen to f32, its BF16 ones use the CPU's bf16 dot product).
#
# PAIRS lists tputool --quantize values and ollama quantisations, as
# TPUTOOL:OLLAMA (none = the checkpoint's bf16 or f16; a +a8 suffix adds
# --activations int8, a +a16 suffix --activations bf16; a gptq/ prefix
# runs tputool on a GPTQ copy of the same weights, 4-bit in groups of 128
# with the head bf16, written by scripts/int4-checkpoint into DIR/gptq;
# default "none:none int8:q8_0 int4:q4_K_S int4:q4_K_M int4+a8:q4_K_S
# int4+a8:q4_K_M").
#
#   OLLAMA=/path/to/ollama scripts/bench-dense-vs-llamacpp.sh
#
# Build ollama v0.24.0 with CGO_CFLAGS="-O3 -march=native"
# CGO_CXXFLAGS="-O3 -march=native" go build (without them its ggml is
# built for baseline x86-64, 4x slower). DIR (default
# /tmp/tputool-dense-bench-HIDDEN-LAYERS, -f16 after it for DTYPE=F16)
# keeps the model between runs.
# Env: ROUNDS (3), GEN (64 decode tokens), PORT (11501).
#
# CONFIG=FILE writes a random model of that config.json instead of the
# Llama shape (its vocab_size, BOS and EOS set to the padded tokenizer's
# 32000 and 31999; DIR defaults to /tmp/tputool-dense-bench- and the
# file's name), and ollama then imports
# the GGUF scripts/export-gguf writes from it, for the architectures its
# importer does not read (GPT-2, StarCoder, BLOOM).
#
# MODE=serve runs both servers (tputool serve with SERVE_ARGS, e.g.
# "--activations bf16"; ollama with OLLAMA_NUM_PARALLEL the largest level)
# and, per round and level of LEVELS (default 1,8,32) concurrent greedy
# streams of GEN tokens, scripts/servebench against tputool then against
# ollama: aggregate tok/s, and tputool's compiles and recompiles in the
# measured phase. The tokenizer's end token is the vocabulary's last
# (<|pad_31999|>, tokenizer_config.json), which a random model rarely
# picks.
#
# MODE=prefill times prompt processing instead: tputool bench with
# --prompt-len PROMPT (default 512) and one generated token, against
# ollama's prompt_eval rate on a prompt of about as many tokens, each
# ollama call made distinct at its start so that its prompt cache cannot
# serve it.
#
# ollama samples (temperature 1, top-k 40, a fixed seed) where tputool
# bench decodes greedily: greedy decoding of a random model soon repeats
# one token, and ollama aborts a generation after 30 repeats. Sampling 40
# of 32000 logits costs a few microseconds of a step of milliseconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
HIDDEN="${HIDDEN:-768}"
LAYERS="${LAYERS:-12}"
HEADS="${HEADS:-12}"
INTER="${INTER:-2048}"
DTYPE="${DTYPE:-BF16}"
case "$DTYPE" in
  BF16) torch_dtype=bfloat16 suffix="" ;;
  F16) torch_dtype=float16 suffix="-f16" ;;
  *) echo "DTYPE: BF16 or F16, not $DTYPE" >&2; exit 2 ;;
esac
CONFIG="${CONFIG:-}"
if [ -n "$CONFIG" ]; then
  DIR="${DIR:-/tmp/tputool-dense-bench-$(basename "$CONFIG" .json)$suffix}"
else
  DIR="${DIR:-/tmp/tputool-dense-bench-$HIDDEN-$LAYERS$suffix}"
fi
ROUNDS="${ROUNDS:-3}"
GEN="${GEN:-64}"
PORT="${PORT:-11501}"
PAIRS="${PAIRS:-none:none int8:q8_0 int4:q4_K_S int4:q4_K_M int4+a8:q4_K_S int4+a8:q4_K_M}"
MODE="${MODE:-decode}"
PROMPT_LEN="${PROMPT:-512}"
LEVELS="${LEVELS:-1,8,32}"
SERVE_ARGS="${SERVE_ARGS:-}"
CTX=512
[ "$MODE" = prefill ] && CTX=2048
parallel=1
[ "$MODE" = serve ] && parallel=$(tr , '\n' <<< "$LEVELS" | sort -n | tail -1)
mkdir -p "$DIR/hf"
if [ ! -f "$DIR/hf/config.json" ] && [ -n "$CONFIG" ]; then
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.update(torch_dtype=sys.argv[2], vocab_size=32000, bos_token_id=31999, eos_token_id=31999); json.dump(c, open(sys.argv[3], "w"))' \
    "$CONFIG" "$torch_dtype" "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype "$DTYPE" -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32000
fi
if [ ! -f "$DIR/hf/config.json" ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
 "hidden_size": $HIDDEN, "num_hidden_layers": $LAYERS, "num_attention_heads": $HEADS,
 "num_key_value_heads": $HEADS, "intermediate_size": $INTER,
 "vocab_size": 32000, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "bos_token_id": 31999, "eos_token_id": 31999,
 "torch_dtype": "$torch_dtype"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype "$DTYPE" -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32000 # the model's vocabulary
fi
if [[ " $PAIRS" == *" gptq/"* ]] && [ ! -f "$DIR/gptq/config.json" ]; then
  go run ./scripts/int4-checkpoint -m "$DIR/hf" -o "$DIR/gptq"
fi
# serve needs an end token in the vocabulary (the last one, BOS and EOS).
printf '{"eos_token": "<|pad_31999|>", "add_bos_token": false, "add_eos_token": false}\n' > "$DIR/hf/tokenizer_config.json"
go build -o "$DIR/tputool" .
FROM="$DIR/hf"
if [ -n "$CONFIG" ]; then
  [ -f "$DIR/model.gguf" ] || go run ./scripts/export-gguf -m "$DIR/hf" -o "$DIR/model.gguf"
  FROM="$DIR/model.gguf"
fi

export OLLAMA_MODELS="$DIR/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_NUM_PARALLEL=$parallel OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=$CTX
"$OLLAMA" serve > "$DIR/ollama.log" 2>&1 &
SERVER=$!
TSERVER=""
trap 'kill $SERVER $TSERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
for p in $PAIRS; do
  q="${p#*:}"
  if ! "$OLLAMA" show "dense-$q" > /dev/null 2>&1; then
    if [ "$q" = none ]; then
      "$OLLAMA" create "dense-$q" -f <(printf 'FROM %s\n' "$FROM") > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
    else
      "$OLLAMA" create "dense-$q" --quantize "$q" -f <(printf 'FROM %s\n' "$FROM") > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
    fi
  fi
done
PROMPT="The quick brown fox jumps over the lazy dog while the cat sleeps"

ollama_tok_s() { # median decode (or prompt) tok/s of 3 generations
  for _ in 1 2 3; do
    if [ "$MODE" = prefill ]; then
      prompt="$RANDOM$RANDOM $(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * $REPS))")"
      npred=1
    else
      prompt="$PROMPT"
      npred=$GEN
    fi
    curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"$1\",\"prompt\":\"$prompt\",\"raw\":true,\"stream\":false,
      \"options\":{\"num_predict\":$npred,\"temperature\":1,\"top_k\":40,\"seed\":1,\"num_thread\":$(nproc),\"num_ctx\":$CTX}}" |
      MODE="$MODE" python3 -c 'import json,os,sys; r=json.load(sys.stdin); k="prompt_eval" if os.environ["MODE"]=="prefill" else "eval"; print(r[k+"_count"]/r[k+"_duration"]*1e9) if k+"_count" in r else sys.exit("ollama: %s" % r)'
  done | sort -g | sed -n 2p
}
tputool_tok_s() { # median decode (or prefill) tok/s of --repeat 3
  local q=() model="$DIR/hf" spec="$1"
  if [[ "$spec" == gptq/* ]]; then
    model="$DIR/gptq" spec="${spec#gptq/}"
    cp "$DIR/hf/tokenizer"*.json "$model/"
  fi
  set -- "$spec"
  case "$1" in
    none) ;;
    *+a8) q=(--quantize "${1%+a8}" --activations int8) ;;
    none+a16) q=(--activations bf16) ;;
    *+a16) q=(--quantize "${1%+a16}" --activations bf16) ;;
    *) q=(--quantize "$1") ;;
  esac
  if [ "$MODE" = prefill ]; then
    "$DIR/tputool" bench --model "$model" --batch 1 --prompt-len "$PROMPT_LEN" --gen-len 1 --repeat 3 --warmup 1 \
      --mode compiled "${q[@]}" -o json |
      python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["rows"][0]["prefill_tok_s"]["median"])'
  else
    "$DIR/tputool" bench --model "$model" --batch 1 --prompt-len 16 --gen-len "$GEN" --repeat 3 --warmup 1 \
      --mode compiled "${q[@]}" -o json |
      python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["rows"][0]["decode_tok_s"]["median"])'
  fi
}
if [ "$MODE" = serve ]; then
  # shellcheck source=scripts/serve-vs-ollama.sh
  . scripts/serve-vs-ollama.sh
  q="${PAIRS%% *}"
  # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
  serve_vs_ollama "dense-${q#*:}" --model "$DIR/hf" --port 0 --max-batch "$parallel" --max-context "$CTX" $SERVE_ARGS
  exit
fi
REPS=$((PROMPT_LEN / 9))
if [ "$MODE" = prefill ]; then
  # The phrase's repetitions that make about PROMPT_LEN of ollama's tokens
  # (its byte-level tokenizer splits the words finely).
  first="${PAIRS%% *}"
  probe=$(curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"dense-${first#*:}\",\"prompt\":\"$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 8))")\",\"raw\":true,\"stream\":false,\"options\":{\"num_predict\":1,\"num_ctx\":$CTX}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt_eval_count"])')
  REPS=$(( (PROMPT_LEN * 8 + probe / 2) / probe ))
  echo "ollama: 8 repetitions are $probe tokens; prompts of $REPS repetitions (about $PROMPT_LEN tokens)" >&2
fi
for p in $PAIRS; do ollama_tok_s "dense-${p#*:}" > /dev/null; done # load and warm
echo "round  tputool  ollama  tputool_tok_s  ollama_tok_s  ratio  load_avg"
for r in $(seq "$ROUNDS"); do
  for p in $PAIRS; do
    t=$(tputool_tok_s "${p%%:*}")
    o=$(ollama_tok_s "dense-${p#*:}")
    printf '%s  %s  %s  %.1f  %.1f  %.2f  %s\n' "$r" "${p%%:*}" "${p#*:}" "$t" "$o" "$(python3 -c "print($t/$o)")" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
