#!/usr/bin/env bash
# device-check.sh: check tputool on an XLA/PJRT device against the pure-Go
# CPU backend, and benchmark it next to Hugging Face transformers.
#
# On a machine with a PJRT plugin (a GPU machine whose Python has
# jax[cuda12], or a TPU VM with libtpu) it runs, in about 8 minutes on an
# H200 with prebuilt binaries (sections 1-4 took 343 s there, the MoE
# section about 2 minutes more):
#
#   1. generate: stories260K (testdata), two prompts as one batch, greedy,
#      32 tokens, float32, on --device cpu and on the device, each in
#      compiled and eager mode: every token id must equal the CPU compiled
#      run's. Then the device's default dtype (bf16), reported only.
#   1b. serve: the same two prompts as concurrent greedy completions of
#      `tputool serve` on the device (float32): each text must equal the
#      CPU generate's.
#   1c. embed: two inputs' embeddings (last-token and mean pooling) on the
#      device, compiled and eager, float32: within 1e-3 of the CPU's.
#   1d. likelihoods and speculation: `tputool perplexity` and an echoed
#      prompt's log-probabilities with alternatives from `serve`, float32,
#      within 1e-3 of the CPU's; `generate --speculate 4`'s (stories260K
#      and a tiny Qwen3.5), `--draft-model`'s and the tiny Qwen3.5's
#      `--mtp`'s (its MTP head; plain decoding on a device) greedy tokens
#      equal the CPU's plain ones.
#   2. diffuse: a generated tiny SD pipeline, 64x64, 4 steps, seed 1, on
#      both devices in both modes: each image must be within -max/-mean of
#      the CPU compiled image (scripts/imgdiff).
#   3. bench: a generated ~110M-parameter Llama-shape model (random weights),
#      prompt 128, 32 new tokens: the CPU (compiled, batch 1) and the device
#      (eager and compiled, batch 1 and 8), then the device again, compiled,
#      to see the compile time with a warm XLA cache, under --cpuprofile
#      (bench-dev.cpuprof: the host side of the device's decode steps),
#      and compiled with --host-argmax (each step's logits read back, as
#      before the device argmax).
#   4. transformers (scripts/hf-compare.py), when python has torch with
#      CUDA and transformers: greedy tokens of stories260K against tputool's,
#      and decode tok/s of the same 110M checkpoint, eager and torch.compile.
#   5. mixture of experts (scripts/device-check-moe.sh): a tiny Qwen3-MoE's
#      greedy tokens with every --experts formulation on the device equal
#      the CPU's, and the in-graph formulation decodes a larger one at batch
#      1 and 8 without compiling after its first run (about 2 minutes).
#
# Every result is a file in $OUT (default ./device-check-out): JSON of each
# run, the images, log.txt, and summary.md (tables for docs). The exit
# status is 0 when every check passed, 1 when one failed (summary.md and
# the last lines say which), 2 on bad usage.
#
# Usage:
#   scripts/device-check.sh                    # find the plugin (jax's CUDA plugin, else libtpu)
#   scripts/device-check.sh --device xla:/path/to/xla_cuda_plugin.so
#   scripts/device-check.sh --device tpu
#   scripts/device-check.sh --dry-run          # no plugin: the "device" is the CPU engine too,
#                                              # small bench model, no transformers; checks the script
#   scripts/device-check.sh --build DIR        # only build the binaries into DIR and exit
#
# Binaries: tputool is built with cgo (go-xla needs it) unless
# $TPUTOOL_BIN_DIR holds prebuilt ones (tputool, gen-llm-checkpoint,
# gen-tiny-sd, imgdiff, and fp8-checkpoint and bitnet-checkpoint for
# device-check-moe.sh's FP8 and BitNet families): a device machine
# without Go or the module cache runs what `--build DIR` made elsewhere.
#
# Environment: OUT, TPUTOOL_BIN_DIR, PYTHON (default python3),
# IMG_MAX/IMG_MEAN (image tolerances, default 16 and 1.0 of 255),
# HF_TIMEOUT (seconds for transformers, default 300), HF_BENCH=0 to skip
# transformers' bench (its greedy-token check still runs), MOE_BENCH=0 to
# skip section 5's bench (scripts/device-check-moe.sh).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)

device=""
dry_run=0
build_only=""
while [ $# -gt 0 ]; do
	case "$1" in
	--device) device="${2:?--device needs a value}"; shift 2 ;;
	--device=*) device="${1#--device=}"; shift ;;
	--dry-run) dry_run=1; shift ;;
	--build) build_only="${2:?--build needs a directory}"; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
	*) echo "device-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

PYTHON=${PYTHON:-python3}
IMG_MAX=${IMG_MAX:-16}
IMG_MEAN=${IMG_MEAN:-1.0}
HF_TIMEOUT=${HF_TIMEOUT:-300}
HF_BENCH=${HF_BENCH:-1}

# ---- binaries

build() { # build DIR
	mkdir -p "$1"
	echo "building tputool (cgo) and the generators into $1" >&2
	CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$1/tputool" .
	for tool in gen-llm-checkpoint gen-tiny-sd imgdiff fp8-checkpoint bitnet-checkpoint; do
		go build -trimpath -ldflags "-s -w" -o "$1/$tool" "./scripts/$tool"
	done
}

if [ -n "$build_only" ]; then
	build "$build_only"
	exit 0
fi

OUT=${OUT:-$repo/device-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log="$OUT/log.txt"
: >"$log"
work=$(mktemp -d "${TMPDIR:-/tmp}/tputool-device-check-XXXXXX")
trap 'rm -rf "$work"' EXIT

prog=device-check
# shellcheck source=scripts/device-check-common.sh
. scripts/device-check-common.sh

if [ -n "${TPUTOOL_BIN_DIR:-}" ]; then
	bin=$(cd "$TPUTOOL_BIN_DIR" && pwd)
else
	bin="$work/bin"
	build "$bin" 2>>"$log"
fi
for tool in tputool gen-llm-checkpoint gen-tiny-sd imgdiff; do
	[ -x "$bin/$tool" ] || { echo "device-check: $bin/$tool is missing" >&2; exit 2; }
done
command -v "$PYTHON" >/dev/null || { echo "device-check: $PYTHON not found (it compares the JSON outputs)" >&2; exit 2; }
tputool="$bin/tputool"

# ---- the device

# find_plugin prints jax's CUDA PJRT plugin, looked up through python's own
# module path first, then by globbing the usual site-packages.
find_plugin() {
	"$PYTHON" - <<'EOF' 2>/dev/null && return 0
import glob, os, site, sys
found = []
try:
    import jax_plugins
    for p in jax_plugins.__path__:
        found += sorted(glob.glob(os.path.join(p, "xla_cuda*", "xla_cuda_plugin.so")))
except Exception:
    pass
dirs = []
try:
    dirs = site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
for d in dirs + sys.path:
    found += sorted(glob.glob(os.path.join(d, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so")))
if not found:
    sys.exit(1)
print(found[0])
EOF
	return 1
}

if [ "$dry_run" = 1 ]; then
	device=cpu
	say "dry run: the device side runs on the CPU engine too"
elif [ -z "$device" ]; then
	if plugin=$(find_plugin); then
		device="xla:$plugin"
	elif "$tputool" --device tpu devices --json >/dev/null 2>&1; then
		device=tpu
	else
		echo "device-check: no PJRT plugin found (no jax_plugins/xla_cuda*/xla_cuda_plugin.so for $PYTHON, no libtpu); give --device xla:/path/plugin.so, or --dry-run" >&2
		exit 2
	fi
fi
say "device: $device"
"$tputool" version --json >"$OUT/version.json" 2>>"$log" || true
rc=0
"$tputool" --device "$device" devices --json >"$OUT/devices.json" 2>>"$log" || rc=$?
if [ "$rc" != 0 ]; then
	fail "tputool --device $device devices: the device does not open (exit $rc; see log.txt)"
	tail -3 "$log" >&2
	exit 1
fi

# For the float32 comparison, keep the device's float32 matmuls in float32.
set_f32_env

# ---- 1. generate: token ids

stories=testdata/stories260K-hf
gen_args=(generate -m "$stories" -p "Once upon a time" -p "The little dog" -n 32 --temperature 0 --json)
for mode in compiled eager; do
	run "generate-cpu-$mode.json" "$tputool" --device cpu "${gen_args[@]}" --mode "$mode" --dtype f32 || true
	run "generate-dev-$mode.json" "${f32_env[@]}" "$tputool" --device "$device" "${gen_args[@]}" --mode "$mode" --dtype f32 || true
done
run "generate-dev-default-dtype.json" "$tputool" --device "$device" "${gen_args[@]}" --mode compiled || true

tok_ref="$OUT/generate-cpu-compiled.json"
tokens_ok=no
if [ -s "$tok_ref" ]; then
	if compare_tokens "$tok_ref" "$OUT/generate-cpu-eager.json" "$OUT/generate-dev-compiled.json" "$OUT/generate-dev-eager.json" >"$OUT/tokens-compare.txt" 2>&1; then
		tokens_ok=yes
		say "tokens: the device's float32 runs (compiled, eager) equal the CPU's"
	else
		fail "tokens differ: $(head -3 "$OUT/tokens-compare.txt" | tr '\n' ' ')"
	fi
fi

# ---- 1a. quantised weights: --quantize int8 and int4 hold the weights
# compact and the graph dequantises them (the cpu engine fuses that; XLA
# computes it as written): the device's float32 tokens must equal the
# CPU's for the same quantised weights.

for q in int8 int4; do
	run "generate-cpu-$q.json" "$tputool" --device cpu "${gen_args[@]}" --mode compiled --dtype f32 --quantize "$q" || true
	run "generate-dev-$q.json" "${f32_env[@]}" "$tputool" --device "$device" "${gen_args[@]}" --mode compiled --dtype f32 --quantize "$q" || true
	if [ -s "$OUT/generate-cpu-$q.json" ]; then
		if compare_tokens "$OUT/generate-cpu-$q.json" "$OUT/generate-dev-$q.json" >"$OUT/tokens-compare-$q.txt" 2>&1; then
			say "tokens, --quantize $q: the device's equal the CPU's"
		else
			fail "tokens, --quantize $q, differ: $(head -3 "$OUT/tokens-compare-$q.txt" | tr '\n' ' ')"
		fi
	fi
done

# ---- 1a'. KV caches in bf16 or int8 under f32 compute (--kv-cache-dtype):
# the device converts (bf16) or quantises per slot and head (int8, with
# the scales as state of their own) the new keys and values as it writes
# them, and the caches back as attention reads them; its tokens must
# equal the CPU's with the same caches.

for kv in bf16 int8; do
	run "generate-cpu-kv$kv.json" "$tputool" --device cpu "${gen_args[@]}" --mode compiled --dtype f32 --kv-cache-dtype "$kv" || true
	run "generate-dev-kv$kv.json" "${f32_env[@]}" "$tputool" --device "$device" "${gen_args[@]}" --mode compiled --dtype f32 --kv-cache-dtype "$kv" || true
	if [ -s "$OUT/generate-cpu-kv$kv.json" ]; then
		if compare_tokens "$OUT/generate-cpu-kv$kv.json" "$OUT/generate-dev-kv$kv.json" >"$OUT/tokens-compare-kv$kv.txt" 2>&1; then
			say "tokens, --kv-cache-dtype $kv: the device's equal the CPU's"
		else
			fail "tokens, --kv-cache-dtype $kv, differ: $(head -3 "$OUT/tokens-compare-kv$kv.txt" | tr '\n' ' ')"
		fi
	fi
done

# ---- 1b. serve: the same prompts through the server's continuous batching

# start_serve DEVICE LISTEN_JSON MAX_BATCH: starts tputool serve of the
# stories model on DEVICE (float32) in the background and waits for it to
# listen; sets srv_pid, and srv_addr (empty when it did not listen).
start_serve() {
	local i
	"${f32_env[@]}" "$tputool" --json --device "$1" serve -m "$stories" --dtype f32 --port 0 \
		--max-batch "$3" --max-context 128 >"$2" 2>>"$log" &
	srv_pid=$! srv_addr=""
	for i in $(seq 1 600); do
		srv_addr=$(sed -n 's/.*"address":"\([^"]*\)".*/\1/p' "$2" | head -1)
		[ -n "$srv_addr" ] && break
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 0.5
	done
}

# serve_check: tputool serve on the device (float32), the two prompts as
# concurrent greedy completions: each text must equal the CPU generate's.
serve_check() {
	start_serve "$device" "$OUT/serve-listen.json" 4
	local addr=$srv_addr pid=$srv_pid
	if [ -z "$addr" ]; then
		fail "serve: did not listen on the device (log.txt)"
		kill -TERM "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return
	fi
	say "+ serve on $device at $addr: two concurrent greedy completions"
	local k=0 curls=()
	for prompt in "Once upon a time" "The little dog"; do
		curl -s "http://$addr/v1/completions" -d "{\"prompt\":\"$prompt\",\"max_tokens\":32,\"temperature\":0}" \
			>"$OUT/serve-$k.json" 2>>"$log" &
		curls+=($!)
		k=$((k + 1))
	done
	wait "${curls[@]}" || true
	kill -TERM "$pid" 2>/dev/null
	wait "$pid" || fail "serve: exit $? after SIGTERM, want 0"
	if "$PYTHON" - "$tok_ref" "$OUT/serve-0.json" "$OUT/serve-1.json" >"$OUT/serve-compare.txt" 2>&1 <<'PY'; then
import json, sys
ref = [r["text"] for r in json.load(open(sys.argv[1]))]
bad = 0
for i, p in enumerate(sys.argv[2:]):
    got = json.load(open(p))["choices"][0]["text"]
    if got != ref[i]:
        print(f"prompt {i}: served {got!r} != generate {ref[i]!r}"); bad += 1
sys.exit(1 if bad else 0)
PY
		serve_ok=yes
		say "serve: the device's served completions equal the CPU's generate"
	else
		fail "serve: $(head -2 "$OUT/serve-compare.txt" | tr '\n' ' ')"
	fi
}
serve_ok=no
if [ -s "$tok_ref" ]; then
	serve_check
fi

# ---- 1c. embed: the final hidden states (the program that outputs every
# position's, in place of the logits), pooled by the last token and by the
# mean, float32: the device's unit vectors must be within 1e-3 of the CPU
# compiled run's, value by value.

embed_args=(--json embed -m "$stories" -p "Once upon a time" -p "The little dog ran to the park" --dtype f32)
embed_ok=yes
for pool in last mean; do
	run "embed-cpu-$pool.json" "$tputool" --device cpu "${embed_args[@]}" --pooling "$pool" --mode compiled || true
	for mode in compiled eager; do
		run "embed-dev-$pool-$mode.json" "${f32_env[@]}" "$tputool" --device "$device" "${embed_args[@]}" --pooling "$pool" --mode "$mode" || true
		if ! "$PYTHON" - "$OUT/embed-cpu-$pool.json" "$OUT/embed-dev-$pool-$mode.json" >>"$OUT/embed-compare.txt" 2>&1 <<'PY'; then
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
worst = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra["embedding"], rb["embedding"]))
ok = len(a) == len(b) == 2 and all(len(ra["embedding"]) == len(rb["embedding"]) for ra, rb in zip(a, b)) and worst <= 1e-3
print(f"{sys.argv[2]}: max |difference| {worst:.2e}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
			embed_ok=no
			fail "embed --pooling $pool --mode $mode: the device's vectors differ from the CPU's (embed-compare.txt)"
		fi
	done
done
[ "$embed_ok" = yes ] && say "embed: the device's vectors (last and mean pooling, both modes) within 1e-3 of the CPU's"

# ---- 1d. likelihoods and speculation: `tputool perplexity` (the scoring
# head over a window's positions) and prompt log-probabilities with three
# alternatives from `serve` (an echoed completion of no new tokens: the
# alternatives are picked in the graph on a device, on the host on the
# CPU), float32: within 1e-3 of the CPU's, the same alternatives. Then
# `generate --speculate 4` on a prompt that repeats itself (several tokens
# a step, the cache taken back where a draft fails) on stories260K and on
# a tiny Qwen3.5 (which falls back to plain decoding on a device), and
# `--draft-model` (the model drafting for itself, a second model on the
# device): their greedy tokens must equal the CPU's plain ones.

likelihood_ok=yes
ppl_args=(--json perplexity -m "$stories" --dtype f32 --context 16 --stride 8
	--text "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends.")
run "perplexity-cpu.json" "$tputool" --device cpu "${ppl_args[@]}" || likelihood_ok=no
run "perplexity-dev.json" "${f32_env[@]}" "$tputool" --device "$device" "${ppl_args[@]}" || likelihood_ok=no

# echo_logprobs DEVICE NAME: a server on DEVICE scores the prompt's tokens
# into $OUT/NAME.
echo_logprobs() {
	local dev=$1 name=$2
	start_serve "$dev" "$OUT/$2-listen.json" 2
	local addr=$srv_addr pid=$srv_pid
	if [ -n "$addr" ]; then
		say "+ serve on $dev at $addr: an echoed prompt's log-probabilities"
		curl -s "http://$addr/v1/completions" \
			-d '{"prompt":"Once upon a time there was a little girl named Lily","max_tokens":0,"echo":true,"logprobs":3}' \
			>"$OUT/$name" 2>>"$log" || true
	fi
	kill -TERM "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
	[ -s "$OUT/$name" ]
}
echo_logprobs cpu echo-cpu.json || likelihood_ok=no
echo_logprobs "$device" echo-dev.json || likelihood_ok=no
if [ "$likelihood_ok" = yes ] && "$PYTHON" - "$OUT" >"$OUT/likelihood-compare.txt" 2>&1 <<'PY'; then
import json, os, sys
out = sys.argv[1]
load = lambda n: json.load(open(os.path.join(out, n)))
bad = 0
a, b = load("perplexity-cpu.json"), load("perplexity-dev.json")
d = abs(a["nll"] - b["nll"])
print(f"perplexity: cpu {a['perplexity']:.6f} device {b['perplexity']:.6f}, |nll difference| {d:.2e}")
bad += d > 1e-3 or a["scored"] != b["scored"]
a, b = (load(n)["choices"][0]["logprobs"] for n in ("echo-cpu.json", "echo-dev.json"))
if a["tokens"] != b["tokens"] or len(a["token_logprobs"]) < 2:
    print(f"echo: tokens differ: {a['tokens']} != {b['tokens']}"); bad += 1
else:
    worst = max(abs(x - y) for x, y in zip(a["token_logprobs"][1:], b["token_logprobs"][1:]))
    print(f"echo: {len(a['tokens'])} tokens, max |log-probability difference| {worst:.2e}")
    bad += worst > 1e-3
    for i, (ta, tb) in enumerate(zip(a["top_logprobs"][1:], b["top_logprobs"][1:])):
        if set(ta) != set(tb) or any(abs(ta[k] - tb[k]) > 1e-3 for k in ta):
            print(f"echo: token {i+1}: alternatives {tb} != the CPU's {ta}"); bad += 1
sys.exit(1 if bad else 0)
PY
	say "likelihoods: the device's perplexity and echoed log-probabilities (with alternatives) within 1e-3 of the CPU's"
else
	likelihood_ok=no
	fail "likelihoods: the device's differ from the CPU's, or did not run (likelihood-compare.txt)"
fi

spec_args=(generate -m "$stories" -p "Lily saw a big red ball in the park. She wanted to play with the ball. Lily saw a big" -n 48 --temperature 0 --json --dtype f32 --mode compiled)
speculate_ok=no
run "speculate-cpu.json" "$tputool" --device cpu "${spec_args[@]}" || true
run "speculate-dev.json" "${f32_env[@]}" "$tputool" --device "$device" "${spec_args[@]}" --speculate 4 || true
run "speculate-dev-draft.json" "${f32_env[@]}" "$tputool" --device "$device" "${spec_args[@]}" --draft-model "$stories" --draft-p-min 0 || true
# A tiny Qwen3.5 (recurrent linear attention), float32: on the CPU engine
# it speculates (its state copied before a step, restored and the kept
# tokens replayed); on a device it does not yet (the copy would go
# through the host) and must warn and decode plainly, with the same
# tokens. Its checkpoint has a multi-token-prediction head (mtp.*): `--mtp`
# drafts with it on the CPU engine and, on the device, warns and decodes
# plainly, the same tokens both.
q35="$work/qwen35-tiny"
cat >"$work/qwen35-tiny.json" <<'JSON'
{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "attn_output_gate": true, "full_attention_interval": 2,
 "head_dim": 16, "hidden_size": 64, "intermediate_size": 96, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
 "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_value_head_dim": 16, "max_position_embeddings": 512,
 "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "vocab_size": 512,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
 "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
 "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.25}, "mtp_num_hidden_layers": 1}
JSON
"$bin/gen-llm-checkpoint" -config "$work/qwen35-tiny.json" -o "$q35" >>"$log" 2>&1 &&
	cp "$stories"/tokenizer.json "$stories"/tokenizer_config.json "$q35/"
q35_args=(generate -m "$q35" -p "Lily saw a big red ball. Lily saw a big red ball. Lily saw" -n 48 --temperature 0 --json --dtype f32 --mode compiled)
run "speculate-qwen35-cpu.json" "$tputool" --device cpu "${q35_args[@]}" || true
run "speculate-qwen35-dev.json" "${f32_env[@]}" "$tputool" --device "$device" "${q35_args[@]}" --speculate 4 || true
run "speculate-qwen35-cpu-mtp.json" "$tputool" --device cpu "${q35_args[@]}" --mtp --draft-p-min 0 || true
run "speculate-qwen35-dev-mtp.json" "${f32_env[@]}" "$tputool" --device "$device" "${q35_args[@]}" --mtp || true
q35_ok=no
if [ -s "$OUT/speculate-qwen35-cpu.json" ]; then
	if compare_tokens "$OUT/speculate-qwen35-cpu.json" "$OUT/speculate-qwen35-dev.json" "$OUT/speculate-qwen35-cpu-mtp.json" "$OUT/speculate-qwen35-dev-mtp.json" >"$OUT/tokens-compare-speculate-qwen35.txt" 2>&1; then
		q35_ok=yes
	else
		fail "speculation, Qwen3.5, on the device differs: $(head -3 "$OUT/tokens-compare-speculate-qwen35.txt" | tr '\n' ' ')"
	fi
fi
if [ -s "$OUT/speculate-cpu.json" ] && [ "$q35_ok" = yes ]; then
	if compare_tokens "$OUT/speculate-cpu.json" "$OUT/speculate-dev.json" "$OUT/speculate-dev-draft.json" >"$OUT/tokens-compare-speculate.txt" 2>&1; then
		speculate_ok=yes
		say "speculation: the device's greedy tokens with --speculate 4 (stories, Qwen3.5), --draft-model and a tiny Qwen3.5's --mtp equal the CPU's plain ones"
	else
		fail "speculation on the device differs: $(head -3 "$OUT/tokens-compare-speculate.txt" | tr '\n' ' ')"
	fi
fi

# ---- 2. diffuse: images

sd="$work/tiny-sd"
"$bin/gen-tiny-sd" -preset tiny-sd -o "$sd" >>"$log" 2>&1
diff_args=(diffuse -m "$sd" -p "a red fox in the snow" --size 64 --steps 4 --seed 1 --json)
for mode in compiled eager; do
	run "diffuse-cpu-$mode.json" "$tputool" --device cpu "${diff_args[@]}" --mode "$mode" -o "$OUT/diffuse-cpu-$mode.png" || true
	run "diffuse-dev-$mode.json" "${f32_env[@]}" "$tputool" --device "$device" "${diff_args[@]}" --mode "$mode" -o "$OUT/diffuse-dev-$mode.png" || true
done
images_ok=yes
: >"$OUT/images-compare.jsonl"
for other in cpu-eager dev-compiled dev-eager; do
	a="$OUT/diffuse-cpu-compiled.png" b="$OUT/diffuse-$other.png"
	if [ ! -s "$a" ] || [ ! -s "$b" ]; then
		images_ok=no
		continue
	fi
	if ! "$bin/imgdiff" -max "$IMG_MAX" -mean "$IMG_MEAN" "$a" "$b" >>"$OUT/images-compare.jsonl" 2>>"$log"; then
		images_ok=no
		fail "image $other differs from cpu-compiled beyond max $IMG_MAX / mean $IMG_MEAN: $(tail -1 "$OUT/images-compare.jsonl")"
	fi
done
[ "$images_ok" = yes ] && say "images: within max $IMG_MAX, mean $IMG_MEAN of the CPU's"

# ---- 3. bench

llm="$work/llama-110m"
if [ "$dry_run" = 1 ]; then
	"$bin/gen-llm-checkpoint" -o "$llm" -hidden 256 -layers 4 -heads 4 -intermediate 688 -vocab 4096 >>"$log" 2>&1
	bench_cpu=(--batch 1 --prompt-len 16 --gen-len 4 --repeat 1 --warmup 0 --mode compiled)
	bench_dev=(--batch '1,2' --prompt-len 16 --gen-len 4 --repeat 1 --warmup 0)
else
	"$bin/gen-llm-checkpoint" -o "$llm" -hidden 768 -layers 12 -heads 12 -intermediate 2048 -vocab 32000 >>"$log" 2>&1
	bench_cpu=(--batch 1 --prompt-len 128 --gen-len 32 --repeat 2 --warmup 0 --mode compiled)
	bench_dev=(--batch '1,8' --prompt-len 128 --gen-len 32 --repeat 3 --warmup 1)
fi
run bench-cpu.json "$tputool" --device cpu bench -m "$llm" "${bench_cpu[@]}" -o json || true
run bench-dev.json "$tputool" --device "$device" bench -m "$llm" "${bench_dev[@]}" -o json || true
# The same compiled executables again: a warm XLA cache shows as a shorter compile_s;
# with a Go CPU profile of the host side (go tool pprof -top bench-dev.cpuprof):
# where a decode step's time goes outside the device.
run bench-dev-warm.json "$tputool" --cpuprofile "$OUT/bench-dev.cpuprof" --device "$device" bench -m "$llm" "${bench_dev[@]}" --mode compiled --repeat 1 --warmup 0 -o json || true
# bench-dev.json's compiled rows again with each decode step's logits read
# back and their argmax taken on the host (--host-argmax), where bench
# otherwise takes it on the device and reads back the ids alone: the
# difference is what the logits' transfer costs a step.
run bench-dev-hostargmax.json "$tputool" --device "$device" bench -m "$llm" "${bench_dev[@]}" --mode compiled --host-argmax -o json || true

# ---- 4. transformers

hf_status="skipped"
if [ "$dry_run" = 1 ]; then
	hf_status="skipped (dry run)"
elif ! "$PYTHON" -c 'import torch, transformers; assert torch.cuda.is_available()' >>"$log" 2>&1; then
	hf_status="skipped: $PYTHON has no torch with CUDA or no transformers (see log.txt)"
	say "transformers: $hf_status"
else
	if timeout "$HF_TIMEOUT" "$PYTHON" scripts/hf-compare.py tokens --model "$stories" --tputool-json "$tok_ref" \
		--out "$OUT/hf-tokens.json" >>"$log" 2>&1; then
		say "transformers: greedy tokens of stories260K equal tputool's"
	else
		fail "transformers tokens differ from tputool's, or the run failed (see hf-tokens.json, log.txt)"
	fi
	if [ "$HF_BENCH" = 0 ]; then
		hf_status="tokens only (HF_BENCH=0)"
	elif timeout "$HF_TIMEOUT" "$PYTHON" scripts/hf-compare.py bench --model "$llm" --batch 1,8 --prompt-len 128 --gen-len 32 \
		--repeat 3 --modes eager,compile --out "$OUT/hf-bench.json" >>"$log" 2>&1; then
		hf_status="ran"
	else
		hf_status="failed or timed out after $HF_TIMEOUT s (see log.txt)"
		fail "transformers bench: $hf_status"
	fi
fi

# ---- 5. mixture of experts

moe_status="no"
moe_env=(env OUT="$OUT" TPUTOOL_BIN_DIR="$bin" PYTHON="$PYTHON")
[ "$dry_run" = 1 ] && moe_env+=(MOE_BENCH=0)
[ "${MOE_BENCH:-1}" = 0 ] && moe_env+=(MOE_BENCH=0)
if "${moe_env[@]}" scripts/device-check-moe.sh --device "$device" 2>>"$log"; then
	moe_status="yes"
	say "moe: every experts formulation on the device equals the CPU's tokens"
else
	fail "moe: scripts/device-check-moe.sh failed (moe-summary.md, moe-log.txt)"
fi

# ---- summary

"$PYTHON" - "$OUT" "$device" "$tokens_ok" "$images_ok" "$hf_status" "$serve_ok" "$moe_status" "$embed_ok" "$likelihood_ok" "$speculate_ok" >"$OUT/summary.md" <<'EOF' || fail "summary.md could not be written"
import json, os, sys
out, device, tokens_ok, images_ok, hf_status, serve_ok, moe_status, embed_ok, likelihood_ok, speculate_ok = sys.argv[1:11]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:
        return None
def med(s):
    return "-" if not s else f"{s['median']:.1f}"
print(f"# tputool device check\n\ndevice: `{device}`\n")
v = load("version.json") or {}
print(f"tputool {v.get('version','?')} {v.get('commit','')[:12]} (gomlx {v.get('gomlx','?')}, go-xla {v.get('go_xla','?')}, cgo {str(v.get('cgo','?')).lower()})\n")
d = load("devices.json") or {}
sel = d.get("selected") or d.get("device") or {}
if sel:
    print(f"opened: {sel.get('kind')} {sel.get('platform')} x{sel.get('num_devices')}, {', '.join(sel.get('device_descriptions') or [])}; "
          f"XLA cache: {(sel.get('xla_cache') or {}).get('dir', 'none')}\n")
print(f"- greedy token ids (float32, compiled and eager) equal the CPU's: **{tokens_ok}**")
print(f"- `tputool serve` on the device: concurrent greedy completions equal the CPU's generate: **{serve_ok}**")
print(f"- `tputool embed` on the device (last and mean pooling, compiled and eager): vectors within 1e-3 of the CPU's: **{embed_ok}**")
print(f"- `tputool perplexity` and an echoed prompt's log-probabilities (with alternatives) from `serve` within 1e-3 of the CPU's: **{likelihood_ok}**")
sp = load("speculate-dev.json")
m = (sp[0].get("metrics") or {}) if sp else {}
spd = load("speculate-dev-draft.json")
md = (spd[0].get("metrics") or {}) if spd else {}
print(f"- `generate --speculate 4` ({m.get('draft_accepted', 0)} of {m.get('draft_tokens', 0)} draft tokens confirmed) and `--draft-model` "
      f"({md.get('draft_accepted', 0)} of {md.get('draft_tokens', 0)}) on the device, and a tiny Qwen3.5's `--speculate 4` (plain decoding on a device): "
      f"greedy tokens equal the CPU's plain ones: **{speculate_ok}**")
print(f"- images within tolerance of the CPU's: **{images_ok}**")
try:
    with open(os.path.join(out, "images-compare.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            print(f"  - {os.path.basename(r['B'])}: max {r['max_abs']}, mean {r['mean_abs']:.3f}, PSNR {r['psnr_db']:.1f} dB")
except Exception:
    pass
dd = load("generate-dev-default-dtype.json")
ref = load("generate-cpu-compiled.json")
if dd and ref:
    same = sum(1 for a, b in zip(ref, dd) for x, y in zip(a["token_ids"], b["token_ids"]) if x == y)
    total = sum(len(a["token_ids"]) for a in ref)
    print(f"- default dtype on the device: {same}/{total} greedy tokens equal the float32 CPU run's (informational)")
print(f"- transformers: {hf_status}")
print(f"- mixture of experts (moe-summary.md): **{moe_status}**\n")
rows = ((load("bench-dev.json") or load("bench-cpu.json") or {}).get("rows") or [{}])
print(f"## Decode, generated Llama-shape model (random weights), prompt {rows[0].get('prompt_len', '?')}, "
      f"{rows[0].get('gen_len', '?')} new tokens\n")
print("| engine | device | mode | batch | compile s | prefill tok/s | decode tok/s | ITL ms |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for name, label in (("bench-cpu.json", "cpu"), ("bench-dev.json", device), ("bench-dev-warm.json", device + " (warm cache)"),
                    ("bench-dev-hostargmax.json", device + " (--host-argmax)")):
    r = load(name)
    if not r:
        continue
    for row in r.get("rows", []):
        print(f"| tputool | {label} | {row['mode']} | {row['batch']} | {row.get('compile_s', 0):.2f} | "
              f"{med(row.get('prefill_tok_s'))} | {med(row.get('decode_tok_s'))} | {med(row.get('itl_ms'))} |")
h = load("hf-bench.json")
if h:
    for row in h.get("rows", []):
        print(f"| transformers {h.get('transformers','')} | {h.get('gpu','cuda')} | {row['mode']} | {row['batch']} | "
              f"{row.get('warmup_s', 0):.2f} | {row.get('prefill_tok_s', 0):.1f} | {row['decode_tok_s']:.1f} | {row.get('itl_ms', 0):.2f} |")
print("\ncompile s: tputool's compile time of the row's executables; for transformers, the warm-up runs (torch.compile's compilation).")
EOF

if [ ${#failures[@]} -gt 0 ]; then
	{
		echo
		echo "## Failures"
		echo
		for f in "${failures[@]}"; do echo "- $f"; done
	} >>"$OUT/summary.md"
	say "${#failures[@]} check(s) failed; see $OUT/summary.md"
	exit 1
fi
say "all checks passed; results in $OUT (summary.md)"
