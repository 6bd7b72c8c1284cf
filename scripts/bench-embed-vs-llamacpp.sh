#!/usr/bin/env bash
# Embedding throughput of a random BERT on tputool serve and on llama.cpp's
# kernels (ollama), same weights, side by side: one POST /api/embed with
# N inputs (20 to 120 words each, a fixed sequence) to each server per
# round, the order alternating between rounds, after one unmeasured
# request each (tputool compiles its shapes then). Prints each round's
# seconds with the load average, the medians, their ratio and the cosine
# of the two servers' vectors for the first inputs (1 up to the
# rounding of ollama's F16 weights).
#
# The model (scripts/gen-bert-checkpoint): BertModel of HIDDEN (384),
# LAYERS (6), HEADS (12), INTER (1536), vocab 30522, f32, mean pooling
# and Normalize: all-MiniLM-L6-v2's shape. ollama imports the folder
# itself (`ollama create`, its convert_bert.go), holding the weights as
# F16 (its converter's choice for an f32 folder); tputool holds them as
# stored, f32. ollama v0.24.0's create does not carry the 1_Pooling
# folder (its converter then fails to open 1_Pooling/config.json), so
# its copy, DIR/ollama, names the pooling module "." and sets
# pooling_mode_mean_tokens in its config.json, where the converter then
# reads it.
#
#   OLLAMA=/path/to/ollama scripts/bench-embed-vs-llamacpp.sh
#
# Build ollama v0.24.0 with CGO_CFLAGS="-O3 -march=native"
# CGO_CXXFLAGS="-O3 -march=native" go build (without them its ggml is
# built for baseline x86-64). DIR (default /tmp/tputool-embed-bench-
# HIDDEN-LAYERS) keeps the models between runs.
# Env: ROUNDS (5), N (256 inputs), PORT (11502 for ollama, +1 tputool),
# SERVE_ARGS (extra tputool serve flags), OLLAMA_PARALLEL (ollama's
# OLLAMA_NUM_PARALLEL; unset: its default; 8 ran this request as fast).
set -euo pipefail
cd "$(dirname "$0")/.."

OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary built with -march=native}"
HIDDEN="${HIDDEN:-384}" LAYERS="${LAYERS:-6}" HEADS="${HEADS:-12}" INTER="${INTER:-1536}"
ROUNDS="${ROUNDS:-5}" N="${N:-256}" PORT="${PORT:-11502}"
DIR="${DIR:-/tmp/tputool-embed-bench-$HIDDEN-$LAYERS}"
TPORT=$((PORT + 1))

mkdir -p "$DIR"
if [ ! -e "$DIR/hf/model.safetensors" ]; then
	go run ./scripts/gen-bert-checkpoint -o "$DIR/hf" -hidden "$HIDDEN" -layers "$LAYERS" -heads "$HEADS" -intermediate "$INTER"
fi
if [ ! -e "$DIR/ollama/model.safetensors" ]; then
	mkdir -p "$DIR/ollama"
	cp "$DIR/hf/model.safetensors" "$DIR/hf/tokenizer.json" "$DIR/hf/tokenizer_config.json" "$DIR/hf/sentence_bert_config.json" "$DIR/ollama/"
	python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/hf/config.json"))
c["pooling_mode_mean_tokens"] = True
json.dump(c, open(f"{d}/ollama/config.json", "w"), indent=1)
m = json.load(open(f"{d}/hf/modules.json"))
for x in m:
    if x["type"].endswith("Pooling"):
        x["path"] = "."
json.dump(m, open(f"{d}/ollama/modules.json", "w"))
PY
fi
go build -o "$DIR/tputool" .

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

export OLLAMA_MODELS="$DIR/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_KEEP_ALIVE=1h
if [ -n "${OLLAMA_PARALLEL:-}" ]; then export OLLAMA_NUM_PARALLEL="$OLLAMA_PARALLEL"; fi
"$OLLAMA" serve >"$DIR/ollama.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do "$OLLAMA" list >/dev/null 2>&1 && break; sleep 0.2; done
printf 'FROM %s\n' "$DIR/ollama" >"$DIR/Modelfile"
"$OLLAMA" create bert-bench -f "$DIR/Modelfile" >"$DIR/create.log" 2>&1 || { cat "$DIR/create.log" >&2; exit 1; }

# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
"$DIR/tputool" --json serve --model "$DIR/hf" --port "$TPORT" ${SERVE_ARGS:-} >"$DIR/tputool.out" 2>"$DIR/tputool.log" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$DIR/tputool.out" 2>/dev/null && break; sleep 0.2; done

python3 - "$PORT" "$TPORT" "$DIR/hf" "$ROUNDS" "$N" <<'PY'
import json, math, os, random, sys, time, urllib.request
oport, tport, model, rounds, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(1)
words = "the a tpu is matrix processor what hello world run model embed".split() + [chr(c) for c in range(97, 123)]
texts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 120))) for _ in range(n)]
servers = {"tputool": (f"http://127.0.0.1:{tport}", model), "llama.cpp": (f"http://127.0.0.1:{oport}", "bert-bench")}
def embed(name, inputs):
    url, m = servers[name]
    req = urllib.request.Request(url + "/api/embed", data=json.dumps({"model": m, "input": inputs}).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    r = json.load(urllib.request.urlopen(req, timeout=3600))
    return time.time() - t, r
for name in servers:
    embed(name, texts)  # warm-up: loads the model, compiles the shapes
a, b = embed("tputool", texts[:4])[1]["embeddings"], embed("llama.cpp", texts[:4])[1]["embeddings"]
cos = [sum(x * y for x, y in zip(u, v)) for u, v in zip(a, b)]
print(f"cosine of the two servers' vectors, first 4 inputs: {', '.join(f'{c:.7f}' for c in cos)}")
times = {k: [] for k in servers}
for r in range(rounds):
    order = ["tputool", "llama.cpp"] if r % 2 == 0 else ["llama.cpp", "tputool"]
    line = []
    for name in order:
        dt, res = embed(name, texts)
        times[name].append(dt)
        line.append(f"{name} {dt:.3f} s ({res.get('prompt_eval_count')} tokens)")
    print(f"round {r + 1}: " + ", ".join(line) + f"; load {os.getloadavg()[0]:.2f}", flush=True)
med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
ratios = sorted(o / t for o, t in zip(times["llama.cpp"], times["tputool"]))
print(f"median: tputool {med['tputool']:.3f} s, llama.cpp {med['llama.cpp']:.3f} s; "
      f"tputool is {med['llama.cpp'] / med['tputool']:.2f}x llama.cpp's rate (per round {', '.join(f'{x:.2f}' for x in ratios)})")
PY
