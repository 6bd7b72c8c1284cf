#!/usr/bin/env bash
# Compares the next-token log-probabilities of one model in tputool and in
# llama.cpp's engine (through ollama): the top 5 after PROMPT, greedy, from
# `tputool serve` (/v1/completions, logprobs 5) and from ollama
# (/api/generate, raw, top_logprobs 5, repeat_penalty 1), at the first
# generated token (the prompt's prefill) in a table, then at each of the
# next STEPS-1 (decode steps: a recurrent model's state carried token by
# token) while both pick the same tokens. It checks an architecture
# against an implementation written apart from transformers' (tputool's
# own tests compare against float64 references written from
# transformers' code).
#
#   OLLAMA=/path/to/ollama HF=/tmp/m/hf scripts/logprobs-vs-llamacpp.sh
#
# HF is a Hugging Face folder tputool runs (a tiny random one from
# scripts/gen-llm-checkpoint -config, with its tokenizer). FROM is what
# ollama imports: by default a GGUF that scripts/export-gguf writes from HF
# (Qwen3-MoE, Mixtral, GLM-4.5); FROM=$HF lets ollama import the folder
# itself (DeepSeek-V3, Llama 4: its importer stores matrices in f16, so
# write the folder in F16 for both to read the same weights, and give it
# a tokenizer_config.json with "add_bos_token": false beside a
# "bos_token" the tokenizer holds, or ollama's Llama 4 prepends a BOS
# tputool does not). Env: PROMPT, PORT (ollama's, 11600), DTYPE
# (tputool's --dtype, f32), TPUTOOL_ARGS (more flags for tputool serve,
# such as --kv-cache-dtype bf16), KV_CACHE_TYPE (the llama.cpp runner's
# KV cache type: "" is f16, its default; ollama v0.24.0 reads q8_0 and
# q4_0 besides; "f32" needs a runner built with that case added to
# llama/llama.go's kvCacheTypeFromStr), STEPS (4), KEEP (keep the work
# folder).
#
# ollama's server runs an architecture it has ported to its own engine
# (fs/ggml's OllamaEngineRequired: llama4, qwen3moe, nemotron_h,
# nemotron_h_moe, ...) on that engine, a Go graph on the same ggml kernels,
# not on llama.cpp's graph builder. RUNNER=llamacpp checks llama.cpp's own
# graph instead: ollama's llama.cpp runner (`$OLLAMA runner --model GGUF`,
# which the server starts without --ollama-engine for the others) is run
# on the GGUF directly, loaded and asked for the same greedy completion
# over its HTTP API (a GGUF FROM only).
#
# ollama sends no log-probabilities for the tokens whose text it holds
# back (a partial UTF-8 character, what joins it while the text stays
# invalid, a NUL), which a random model picks often: its entries are
# matched to tputool's positions by token, skipping those positions.
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
HF="${HF:?set HF to a Hugging Face model folder}"
PROMPT="${PROMPT:-Once upon a time there was a little girl who lived in a village near the forest}"
PORT="${PORT:-11600}"
DTYPE="${DTYPE:-f32}"
STEPS="${STEPS:-4}"
RUNNER="${RUNNER:-ollama}"
case "$RUNNER" in
ollama | llamacpp) ;;
*) echo "RUNNER must be ollama or llamacpp" >&2; exit 2 ;;
esac
work=$(mktemp -d)
server=""
tserver=""
trap 'kill $server $tserver 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
FROM="${FROM:-}"
if [ -z "$FROM" ]; then
  FROM="$work/model.gguf"
  go run ./scripts/export-gguf -m "$HF" -o "$FROM"
fi
go build -o "$work/tputool" .
# num_predict at least 4: ollama's llama.cpp runner sends a token's
# log-probabilities with the next text it emits, so a first token that
# decodes to nothing (a padding token of a random model) would come back
# without them.
if [ "$RUNNER" = llamacpp ]; then
  [ -f "$FROM" ] || { echo "RUNNER=llamacpp runs a GGUF file, not $FROM" >&2; exit 2; }
  "$OLLAMA" runner --model "$FROM" --port "$PORT" > "$work/ollama.log" 2>&1 &
  server=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.2; done
  # Operation 2 is llm.LoadOperationCommit; FlashAttention 0 disabled.
  curl -sf "http://127.0.0.1:$PORT/load" -d "{\"Operation\": 2, \"BatchSize\": ${NUM_BATCH:-512}, \"KvSize\": 512,
    \"Parallel\": 1, \"NumThreads\": $(nproc), \"FlashAttention\": 0, \"KvCacheType\": \"${KV_CACHE_TYPE:-}\"}" > /dev/null
  for _ in $(seq 300); do # status 0: llm.ServerStatusReady
    curl -sf "http://127.0.0.1:$PORT/health" | grep -q '"status":0' && break
    sleep 0.2
  done
  # The options the server would fill in (api.DefaultOptions) where they
  # matter: a zero typical_p or top_p would pick other than the argmax.
  req=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "logprobs": True, "TopLogprobs": 5,
    "options": {"num_predict": max(4, int(sys.argv[2])), "temperature": 0, "top_k": 40, "top_p": 1, "typical_p": 1, "min_p": 0,
    "repeat_penalty": 1, "repeat_last_n": 64, "num_ctx": 512}}))' "$PROMPT" "$STEPS")
  curl -sf "http://127.0.0.1:$PORT/completion" -d "$req" | python3 -c 'import json,sys
out = {"response": "", "logprobs": []}
for l in sys.stdin:
    m = json.loads(l)
    out["response"] += m.get("content", "")
    out["logprobs"] += m.get("logprobs") or []
    if m.get("done"):
        out["prompt_eval_count"], out["eval_count"] = m["prompt_eval_count"], m["eval_count"]
json.dump(out, sys.stdout)' > "$work/ollama.json"
  echo "ran: $OLLAMA runner --model $FROM (llama.cpp's graph)"
else
  export OLLAMA_MODELS="$work/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=512
  "$OLLAMA" serve > "$work/ollama.log" 2>&1 &
  server=$!
  for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
  printf 'FROM %s\n' "$FROM" > "$work/Modelfile"
  "$OLLAMA" create xcheck -f "$work/Modelfile" > /dev/null 2> "$work/create.log" || { tail -c 2000 "$work/create.log" >&2; exit 1; }
  req=$(python3 -c 'import json,sys; print(json.dumps({"model": "xcheck", "prompt": sys.argv[1], "raw": True, "stream": False,
    "logprobs": True, "top_logprobs": 5, "options": {"num_predict": max(4, int(sys.argv[3])), "temperature": 0, "repeat_penalty": 1,
    "num_ctx": 512, "num_batch": int(sys.argv[2])}}))' "$PROMPT" "${NUM_BATCH:-512}" "$STEPS")
  curl -sf "http://$OLLAMA_HOST/api/generate" -d "$req" > "$work/ollama.json"
  sed -n 's/.*msg="starting runner" cmd="\([^"]*--model[^"]*\)".*/ollama ran: \1/p' "$work/ollama.log" | head -1
fi
# shellcheck disable=SC2086 # TPUTOOL_ARGS is words
"$work/tputool" serve -m "$HF" --port 0 --json --dtype "$DTYPE" ${TPUTOOL_ARGS:-} > "$work/serve.out" 2> "$work/serve.err" &
tserver=$!
addr=""
for _ in $(seq 300); do
  addr=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("type") == "listening": print(m["address"]); break' "$work/serve.out" 2>/dev/null || true)
  [ -n "$addr" ] && break
  sleep 0.2
done
[ -n "$addr" ] || { cat "$work/serve.err" >&2; exit 1; }
req=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[2], "prompt": sys.argv[1], "max_tokens": max(4, int(sys.argv[3])), "temperature": 0, "logprobs": 5}))' "$PROMPT" "$HF" "$STEPS")
curl -sf "http://$addr/v1/completions" -H 'content-type: application/json' -d "$req" > "$work/tputool.json"
python3 - "$work/ollama.json" "$work/tputool.json" "$STEPS" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
if not o["logprobs"]:
    sys.exit("llama.cpp reported no log-probabilities (every generated token held back?): %r" % o.get("response"))
otop = {e["token"]: e["logprob"] for e in o["logprobs"][0]["top_logprobs"]}
lp = t["choices"][0]["logprobs"]
toks = lp["tokens"]
# ollama reports no log-probabilities for a token whose text it holds
# back: one not yet valid UTF-8 (shown as U+FFFD), what joins it while the
# text stays invalid, and a NUL. The position after j that holds ollama's
# next entry, a token want, is the first after such tokens (and, after a
# partial one, after any token but want).
def place(j, want):
    k, run = j + 1, False
    while k < len(toks) and ("\ufffd" in toks[k] or "\x00" in toks[k] or (run and toks[k] != want)):
        run = run or "\ufffd" in toks[k]
        k += 1
    return k
pos = place(-1, o["logprobs"][0]["token"])
if pos >= len(toks):
    sys.exit("tputool chose no %r after its partial UTF-8 tokens %r" % (o["logprobs"][0]["token"], toks))
if pos:
    print("tputool's first %d token(s) %r are held back by ollama (partial UTF-8, NUL), which reports no log-probabilities for them: comparing position %d" % (pos, toks[:pos], pos))
ttop = lp["top_logprobs"][pos]
print("prompt tokens: ollama %d, tputool %d" % (o.get("prompt_eval_count", -1), t["usage"]["prompt_tokens"]))
print("%-20s %12s %12s" % ("token", "tputool", "llama.cpp"))
for tok in sorted(set(otop) | set(ttop), key=lambda k: -max(otop.get(k, -1e9), ttop.get(k, -1e9))):
    print("%-20r %12s %12s" % (tok, "%.4f" % ttop[tok] if tok in ttop else "-", "%.4f" % otop[tok] if tok in otop else "-"))
common = set(otop) & set(ttop)
order = lambda d: [k for k, _ in sorted(d.items(), key=lambda kv: -kv[1])]
print("same tokens: %s, same order: %s, max |difference| over the %d in both: %.4f" % (
    set(otop) == set(ttop), order(otop) == order(ttop), len(common), max((abs(otop[k] - ttop[k]) for k in common), default=float("nan"))))
# The decode steps after it, while both chose the same tokens: ollama's
# entry i at tputool's position place(j) after entry i-1's j.
# The largest difference over the steps, NaN (no token in common) skipped:
# Python's max keeps a NaN it starts from.
diffs = [abs(otop[k] - ttop[k]) for k in common]
j, compared = pos, 1
for i in range(1, len(o["logprobs"])):
    if o["logprobs"][i - 1]["token"] != toks[j]:
        print("step %d: not compared (the previous step chose %r in tputool, %r in llama.cpp)" % (i, toks[j], o["logprobs"][i - 1]["token"]))
        break
    want = o["logprobs"][i]["token"]
    k = place(j, want)
    if k >= len(toks):
        print("step %d: tputool has no position for llama.cpp's %r" % (i, want))
        break
    a = {e["token"]: e["logprob"] for e in o["logprobs"][i]["top_logprobs"]}
    b = lp["top_logprobs"][k]
    both = set(a) & set(b)
    d = max((abs(a[x] - b[x]) for x in both), default=float("nan"))
    diffs += [abs(a[x] - b[x]) for x in both]
    skipped = " (tputool position %d: %d held-back token(s) %r skipped)" % (k, k - j - 1, toks[j + 1:k]) if k > j + 1 else ""
    print("step %d (after %r)%s: same tokens: %s, same order: %s, max |difference| over the %d in both: %.4f" % (
        i, toks[j], skipped, set(a) == set(b), order(a) == order(b), len(both), d))
    j, compared = k, compared + 1
print("generated: ollama %s tokens (%d with log-probabilities), tputool %d; positions compared: %d" % (
    o.get("eval_count", "?"), len(o["logprobs"]), len(toks), compared))
worst = max(diffs, default=float("nan"))
print("max |difference| over the steps compared: %.4f (%.1e)" % (worst, worst))
PY
