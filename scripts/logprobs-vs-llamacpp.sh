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
# (tputool's --dtype, f32), STEPS (4), KEEP (keep the work folder).
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
HF="${HF:?set HF to a Hugging Face model folder}"
PROMPT="${PROMPT:-Once upon a time there was a little girl who lived in a village near the forest}"
PORT="${PORT:-11600}"
DTYPE="${DTYPE:-f32}"
STEPS="${STEPS:-4}"
work=$(mktemp -d)
FROM="${FROM:-}"
if [ -z "$FROM" ]; then
  FROM="$work/model.gguf"
  go run ./scripts/export-gguf -m "$HF" -o "$FROM"
fi
go build -o "$work/tputool" .
export OLLAMA_MODELS="$work/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=512
"$OLLAMA" serve > "$work/ollama.log" 2>&1 &
server=$!
tserver=""
trap 'kill $server $tserver 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
printf 'FROM %s\n' "$FROM" > "$work/Modelfile"
"$OLLAMA" create xcheck -f "$work/Modelfile" > /dev/null 2> "$work/create.log" || { tail -c 2000 "$work/create.log" >&2; exit 1; }
# num_predict at least 4: ollama's llama.cpp runner sends a token's
# log-probabilities with the next text it emits, so a first token that
# decodes to nothing (a padding token of a random model) would come back
# without them.
req=$(python3 -c 'import json,sys; print(json.dumps({"model": "xcheck", "prompt": sys.argv[1], "raw": True, "stream": False,
  "logprobs": True, "top_logprobs": 5, "options": {"num_predict": max(4, int(sys.argv[3])), "temperature": 0, "repeat_penalty": 1,
  "num_ctx": 512, "num_batch": int(sys.argv[2])}}))' "$PROMPT" "${NUM_BATCH:-512}" "$STEPS")
curl -sf "http://$OLLAMA_HOST/api/generate" -d "$req" > "$work/ollama.json"
"$work/tputool" serve -m "$HF" --port 0 --json --dtype "$DTYPE" > "$work/serve.out" 2> "$work/serve.err" &
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
steps = int(sys.argv[3])
otop = {e["token"]: e["logprob"] for e in o["logprobs"][0]["top_logprobs"]}
# ollama holds back a token whose text is not yet valid UTF-8 (shown as
# U+FFFD) and reports no log-probabilities for it: compare its first entry
# with tputool's first token that is whole text.
lp = t["choices"][0]["logprobs"]
pos = next((i for i, tok in enumerate(lp["tokens"]) if "\ufffd" not in tok), 0)
if pos:
    print("tputool's first %d token(s) %r are partial UTF-8, which ollama reports no log-probabilities for: comparing position %d" % (pos, lp["tokens"][:pos], pos))
ttop = lp["top_logprobs"][pos]
print("prompt tokens: ollama %d, tputool %d" % (o.get("prompt_eval_count", -1), t["usage"]["prompt_tokens"]))
print("%-20s %12s %12s" % ("token", "tputool", "llama.cpp"))
for tok in sorted(set(otop) | set(ttop), key=lambda k: -max(otop.get(k, -1e9), ttop.get(k, -1e9))):
    print("%-20r %12s %12s" % (tok, "%.4f" % ttop[tok] if tok in ttop else "-", "%.4f" % otop[tok] if tok in otop else "-"))
common = set(otop) & set(ttop)
order = lambda d: [k for k, _ in sorted(d.items(), key=lambda kv: -kv[1])]
print("same tokens: %s, same order: %s, max |difference| over the %d in both: %.4f" % (
    set(otop) == set(ttop), order(otop) == order(ttop), len(common), max((abs(otop[k] - ttop[k]) for k in common), default=float("nan"))))
# The decode steps after it, while both chose the same whole-text tokens
# (ollama's entry i is tputool's position pos+i until a partial token).
worst = max((abs(otop[k] - ttop[k]) for k in common), default=float("nan"))
for i in range(1, steps):
    if i >= len(o["logprobs"]) or pos + i >= len(lp["tokens"]):
        print("step %d: no log-probabilities from both (ollama %d, tputool %d)" % (i, len(o["logprobs"]), len(lp["tokens"]) - pos))
        break
    prev_o, prev_t = o["logprobs"][i - 1]["token"], lp["tokens"][pos + i - 1]
    if prev_o != prev_t or "\ufffd" in lp["tokens"][pos + i]:
        print("step %d: not compared (step %d chose %r in tputool, %r in llama.cpp; or a partial token)" % (i, i - 1, prev_t, prev_o))
        break
    a = {e["token"]: e["logprob"] for e in o["logprobs"][i]["top_logprobs"]}
    b = lp["top_logprobs"][pos + i]
    both = set(a) & set(b)
    d = max((abs(a[k] - b[k]) for k in both), default=float("nan"))
    worst = max(worst, d)
    print("step %d (after %r): same tokens: %s, same order: %s, max |difference| over the %d in both: %.4f" % (
        i, prev_t, set(a) == set(b), order(a) == order(b), len(both), d))
print("max |difference| over the steps compared: %.4f" % worst)
PY
