#!/usr/bin/env bash
# A random GPT-OSS on tputool and on llama.cpp's kernels (ollama), same
# weights, side by side, in rounds that interleave the two: batch-1
# decode, each round one tputool bench run (--repeat 3, median) and three
# ollama generations (median). Every line carries the load average.
#
# The model has gpt-oss-20b's real config (testdata/configs/gpt_oss_20b)
# cut to LAYERS layers (default 6; 24 is the whole model, whose import
# ollama v0.24.0 cannot do on a 24 GiB machine: its converter holds the
# tensors in memory and is OOM-killed at 24 GB), its experts in MXFP4 as
# the release stores them, everything else bf16, random values
# (scripts/gen-llm-checkpoint). The tokenizer is a byte-level BPE padded
# with plain tokens to the 201088 ids, with the ids ollama's converter
# names as special (<|startoftext|>, <|endoftext|>, <|return|>, <|call|>).
# ollama imports the Hugging Face folder itself (`ollama create`, its
# convert_gptoss.go): the MXFP4 blocks stay MXFP4 in its GGUF.
# Q8=1 also runs tputool with --quantize int8 (the non-expert matrices
# int8; the experts stay MXFP4) against the same ollama model.
#
#   OLLAMA=/path/to/ollama scripts/bench-gptoss-vs-llamacpp.sh
#
# Build ollama v0.24.0 with CGO_CFLAGS="-O3 -march=native"
# CGO_CXXFLAGS="-O3 -march=native" go build. DIR (default
# /tmp/tputool-gptoss-bench) keeps the model between runs. Env: ROUNDS
# (3), GEN (32 decode tokens), LAYERS (6).
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
DIR="${DIR:-/tmp/tputool-gptoss-bench}"
ROUNDS="${ROUNDS:-3}"
GEN="${GEN:-32}"
LAYERS="${LAYERS:-6}"
PORT="${PORT:-11511}"
mkdir -p "$DIR/hf"
if [ ! -f "$DIR/hf/model.safetensors" ]; then
  python3 - "$LAYERS" "$DIR/config.json" <<'PY'
import json, sys
c = json.load(open("testdata/configs/gpt_oss_20b/config.json"))
n = int(sys.argv[1])
c["num_hidden_layers"], c["layer_types"] = n, c["layer_types"][:n]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 201088 \
    '199998=<|startoftext|>' '199999=<|endoftext|>' '200002=<|return|>' '200012=<|call|>'
fi
go build -o "$DIR/tputool" .

export OLLAMA_MODELS="$DIR/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_NUM_PARALLEL=1 OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=512
"$OLLAMA" serve > "$DIR/ollama.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
if ! "$OLLAMA" list | grep -q '^gptoss-mx'; then
  printf 'FROM %s\n' "$DIR/hf" > "$DIR/Modelfile"
  "$OLLAMA" create gptoss-mx -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
fi
PROMPT="The quick brown fox jumps over the lazy dog while the cat sleeps"

ollama_tok_s() { # median decode tok/s of 3 generations
  for _ in 1 2 3; do
    curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"gptoss-mx\",\"prompt\":\"$PROMPT\",\"raw\":true,\"stream\":false,
      \"options\":{\"num_predict\":$GEN,\"temperature\":0,\"num_thread\":$(nproc),\"num_ctx\":512}}" |
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
ollama_tok_s > /dev/null # load and warm
echo "round  tputool  tputool_tok_s  ollama_tok_s  ratio  load_avg"
for r in $(seq "$ROUNDS"); do
  for q in "${quant[@]}"; do
    t=$(tputool_tok_s "$q")
    o=$(ollama_tok_s)
    printf '%s  %s  %.2f  %.2f  %.2f  %s\n' "$r" "${q:-mxfp4+bf16}" "$t" "$o" "$(python3 -c "print($t/$o)")" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
