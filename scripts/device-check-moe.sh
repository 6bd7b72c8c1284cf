#!/usr/bin/env bash
# device-check-moe.sh: check the mixture-of-experts formulations of a
# Qwen3-MoE on an XLA/PJRT device against the CPU, and time them there.
# scripts/device-check.sh runs it as its section 5; it also runs alone.
#
#   1. tokens: a generated tiny Qwen3-MoE (hidden 64, 2 layers, 8 experts
#      of 32, top 2, stories260K's tokenizer, random weights), the two
#      device-check prompts as one batch, greedy, 24 tokens, float32: on the
#      CPU with --experts graph (the reference), host and dense; on the
#      device with graph (compiled and eager), host and dense. Every token id
#      must equal the reference's. Then with --quantize int4 (the expert
#      stacks int4, decoded in the graph on the device, read in place by the
#      CPU engine's grouped kernel): the device's tokens must equal the
#      CPU's.
#   2. new families: a tiny GPT-OSS (experts in MXFP4, attention sinks,
#      YaRN, sliding layers), two tiny Gemma 4 (per-layer embeddings and
#      KV sharing; the 26B's routed experts with k = v), a tiny
#      Qwen3-Next (fused DeltaNet projections, a dense layer among sparse
#      ones), a tiny Mixtral (a sliding window of 8 on every layer, the
#      experts one tensor each as the Hub holds them) and a tiny
#      DeepSeek-V3 (MLA with kv_b_proj absorbed, q LoRA, interleaved YaRN
#      rope, grouped sigmoid routing, a dense first layer), and the
#      others listed where their configs are written below (through a
#      tiny Phi-3.5-MoE and a tiny Phi-4-mini whose answers cross
#      LongRoPE's switch, a tiny AFMoE, a tiny SmolLM3, a tiny OLMo 3, a
#      tiny Ministral 3 and its per-tensor FP8 copy, a tiny EXAONE 4.0, a
#      tiny GLM-4-0414, a tiny Cohere 2, a tiny Apertus, a tiny OLMo 1,
#      a tiny GraniteMoeShared, a tiny FlexOlmo, a tiny BitNet b1.58
#      from scripts/bitnet-checkpoint, a tiny HunYuan-MoE, a tiny
#      Falcon-H1, a tiny FalconMamba, a tiny Jamba, a tiny Bamba, a tiny
#      Gemma 3n, a tiny Zamba2, a tiny Ling 2.0, a tiny SmallThinker, a
#      tiny Pythia, a tiny GPT-J, a tiny GPT-2, a tiny GPT-Neo, a tiny
#      EXAONE 3.5, a tiny InternLM 2.5, a tiny Baichuan 2, a tiny MiniCPM4, a tiny Qwen 1, a tiny OPT-350M, a tiny Mamba-2, a tiny StarCoder, a tiny
#      BLOOM, a tiny OPT, a tiny Falcon-40B, a tiny Falcon-RW, a tiny
#      DBRX, a
#      tiny DeepSeek MoE, a tiny Arctic, a tiny Kimi Linear, a tiny
#      DeepSeek-V3.2, a tiny MiniMax-Text-01, a tiny LongCat-Flash, a
#      tiny A.X K1, a tiny K-EXAONE, a tiny ERNIE 4.5 VL and a tiny
#      Solar Open),
#      the same prompts, 16
#      tokens, float32: on the device compiled and eager against the CPU.
#   3. bench: a generated Qwen3-MoE of scripts/bench-moe.sh's shape (hidden
#      512, 4 layers, 64 experts of 256, top 8), prompt 64, 32 new tokens,
#      compiled: --experts graph on the device at batch 1 and 8, which must
#      compile nothing after its first run (recompiles 0, whatever the
#      routing), dense on the device at batch 1 (its compile alone takes
#      about 45 s on an H200), graph on the CPU at batch 1.
#
# Usage:
#   TPUTOOL_BIN_DIR=DIR scripts/device-check-moe.sh --device xla:/path/plugin.so
#   scripts/device-check-moe.sh --device cpu     # dry run: the device is the CPU too
#
# Results go to $OUT (default ./device-check-out): moe-*.json, moe-log.txt
# and moe-summary.md. Exit 0 when the checks pass, 1 when one fails,
# 2 on bad usage. Environment: OUT, TPUTOOL_BIN_DIR (else built with cgo),
# PYTHON (default python3), MOE_BENCH=0 to skip the bench.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)

device=""
while [ $# -gt 0 ]; do
	case "$1" in
	--device) device="${2:?--device needs a value}"; shift 2 ;;
	--device=*) device="${1#--device=}"; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; /^set -euo/d'; exit 0 ;;
	*) echo "device-check-moe: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[ -n "$device" ] || { echo "device-check-moe: --device is required (see --help)" >&2; exit 2; }

PYTHON=${PYTHON:-python3}
MOE_BENCH=${MOE_BENCH:-1}
OUT=${OUT:-$repo/device-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log="$OUT/moe-log.txt"
: >"$log"
work=$(mktemp -d "${TMPDIR:-/tmp}/tputool-device-check-moe-XXXXXX")
trap 'rm -rf "$work"' EXIT

prog=device-check-moe
# shellcheck source=scripts/device-check-common.sh
. scripts/device-check-common.sh

if [ -n "${TPUTOOL_BIN_DIR:-}" ]; then
	bin=$(cd "$TPUTOOL_BIN_DIR" && pwd)
else
	bin="$work/bin"
	mkdir -p "$bin"
	CGO_ENABLED=1 go build -trimpath -o "$bin/tputool" . 2>>"$log"
	go build -trimpath -o "$bin/gen-llm-checkpoint" ./scripts/gen-llm-checkpoint 2>>"$log"
	go build -trimpath -o "$bin/fp8-checkpoint" ./scripts/fp8-checkpoint 2>>"$log"
	go build -trimpath -o "$bin/bitnet-checkpoint" ./scripts/bitnet-checkpoint 2>>"$log"
fi
for tool in tputool gen-llm-checkpoint; do
	[ -x "$bin/$tool" ] || { echo "device-check-moe: $bin/$tool is missing" >&2; exit 2; }
done
tputool="$bin/tputool"

set_f32_env # float32 stays float32 on an NVIDIA device

# moe_config HIDDEN LAYERS HEADS KV HEAD_DIM EXPERTS EXPERT_SIZE TOPK VOCAB
moe_config() {
	cat <<EOF
{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
 "hidden_size": $1, "num_hidden_layers": $2, "num_attention_heads": $3,
 "num_key_value_heads": $4, "head_dim": $5, "num_experts": $6,
 "moe_intermediate_size": $7, "num_experts_per_tok": $8, "vocab_size": $9,
 "intermediate_size": $(($7 * 4)), "norm_topk_prob": true, "decoder_sparse_step": 1,
 "mlp_only_layers": [], "hidden_act": "silu", "rms_norm_eps": 1e-06,
 "rope_theta": 1000000.0, "rope_scaling": null, "max_position_embeddings": 512,
 "attention_bias": false, "tie_word_embeddings": false, "use_sliding_window": false,
 "sliding_window": null, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
EOF
}

# ---- 1. tokens

tiny="$work/moe-tiny"
mkdir -p "$tiny"
moe_config 64 2 4 2 16 8 32 2 512 >"$work/moe-tiny.json"
"$bin/gen-llm-checkpoint" -config "$work/moe-tiny.json" -o "$tiny" >>"$log" 2>&1
cp testdata/stories260K-hf/tokenizer.json testdata/stories260K-hf/tokenizer_config.json \
	testdata/stories260K-hf/special_tokens_map.json "$tiny/"
gen=(generate -m "$tiny" -p "Once upon a time" -p "The little dog" -n 24 --temperature 0 --dtype f32 --json)
run moe-cpu-graph.json "$tputool" --device cpu "${gen[@]}" --experts graph || true
for e in host dense; do
	run "moe-cpu-$e.json" "$tputool" --device cpu "${gen[@]}" --experts "$e" || true
done
for e in graph host dense; do
	run "moe-dev-$e.json" "${f32_env[@]}" "$tputool" --device "$device" "${gen[@]}" --experts "$e" || true
done
run moe-dev-graph-eager.json "${f32_env[@]}" "$tputool" --device "$device" "${gen[@]}" --experts graph --mode eager || true

run moe-cpu-int4.json "$tputool" --device cpu "${gen[@]}" --experts graph --quantize int4 || true
run moe-dev-int4.json "${f32_env[@]}" "$tputool" --device "$device" "${gen[@]}" --experts graph --quantize int4 || true
if [ -s "$OUT/moe-cpu-int4.json" ]; then
	if compare_tokens "$OUT"/moe-cpu-int4.json "$OUT"/moe-dev-int4.json >"$OUT/moe-int4-compare.txt" 2>&1; then
		say "tokens: int4 expert stacks on the device equal the CPU engine's"
	else
		fail "MoE int4 tokens differ: $(head -3 "$OUT/moe-int4-compare.txt" | tr '\n' ' ')"
	fi
fi

tokens_ok=no
if [ -s "$OUT/moe-cpu-graph.json" ]; then
	if compare_tokens "$OUT"/moe-cpu-graph.json "$OUT"/moe-cpu-host.json "$OUT"/moe-cpu-dense.json \
		"$OUT"/moe-dev-graph.json "$OUT"/moe-dev-host.json "$OUT"/moe-dev-dense.json \
		"$OUT"/moe-dev-graph-eager.json >"$OUT/moe-tokens-compare.txt" 2>&1; then
		tokens_ok=yes
		say "tokens: every experts formulation on the device (and on the CPU) equals the CPU's graph run"
	else
		fail "MoE tokens differ: $(head -3 "$OUT/moe-tokens-compare.txt" | tr '\n' ' ')"
	fi
fi

# ---- 2. new families

g4text() { # a tiny Gemma 4 text_config: KV_SHARED PLE MOE(true|false) K_EQ_V(true|false)
	cat <<EOF
{"model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "global_head_dim": 32, "num_global_key_value_heads": 1, "hidden_activation": "gelu_pytorch_tanh",
 "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "sliding_window": 8,
 "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"],
 "final_logit_softcapping": 30.0, "num_kv_shared_layers": $1, "use_double_wide_mlp": true,
 "hidden_size_per_layer_input": $2, "vocab_size_per_layer_input": 512, "enable_moe_block": $3,
 "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 32, "attention_k_eq_v": $4,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2,
 "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
  "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}}
EOF
}
families=()
cat >"$work/gptoss.json" <<'EOF'
{"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 8,
 "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-05, "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
 "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 64, "truncate": false},
 "swiglu_limit": 7.0, "attention_bias": true, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
 "quantization_config": {"quant_method": "mxfp4"}}
EOF
# A tiny Qwen3-Next: fused DeltaNet projections, layer 0 dense
# (mlp_only_layers), the router's top k unnormalised, 3 value heads a key
# head.
cat >"$work/qwen3next.json" <<'EOF'
{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 4, "full_attention_interval": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
 "linear_value_head_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 6, "num_experts": 8,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
 "decoder_sparse_step": 1, "mlp_only_layers": [0], "norm_topk_prob": false, "partial_rotary_factor": 0.25,
 "rope_theta": 10000000, "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Mixtral: every layer sparse, a window shorter than the text.
cat >"$work/mixtral.json" <<'EOF'
{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 8, "rope_theta": 1000000.0,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny DeepSeek-V3: MLA, 8 experts in 4 groups, a shared expert.
cat >"$work/deepseek.json" <<'EOF'
{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
 "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 4,
 "topk_group": 2, "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_theta": 10000, "rope_interleave": true,
 "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 128, "beta_fast": 32,
  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
 "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny DeepSeek-V3.2: the same with the lightning indexer keeping
# each query's best 8 keys (the long prompt makes it choose).
cat >"$work/deepseekv32.json" <<'EOF'
{"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
 "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 4,
 "topk_group": 2, "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_theta": 10000,
 "index_n_heads": 8, "index_head_dim": 16, "index_topk": 8,
 "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny DeepSeek-V2: MLA without q LoRA, softmax routing limited to 2 of
# 4 groups (each ranked by its best expert), two shared experts.
cat >"$work/deepseek2.json" <<'EOF'
{"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 4, "q_lora_rank": null, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
 "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 2, "n_group": 4,
 "topk_group": 2, "topk_method": "group_limited_greedy", "first_k_dense_replace": 1, "norm_topk_prob": false,
 "routed_scaling_factor": 1.5, "scoring_func": "softmax", "rope_theta": 10000,
 "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 128, "beta_fast": 32,
  "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
 "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny ERNIE 4.5 MoE: rotary on adjacent pairs, softmax routing with the
# correction bias ([1, experts]), a shared expert, a dense first layer,
# a tied head.
cat >"$work/ernie.json" <<'EOF'
{"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": 32, "moe_num_shared_experts": 1, "moe_layer_start_index": 1,
 "use_bias": false, "rope_theta": 500000, "rms_norm_eps": 1e-05, "max_position_embeddings": 512,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny dots.llm1: Qwen3's attention (per-head q/k norms) with sliding
# layers, DeepSeek-V3's router with a shared expert and a dense first
# layer.
cat >"$work/dots.json" <<'EOF'
{"architectures": ["Dots1ForCausalLM"], "model_type": "dots1", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
 "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "sliding_window": 8,
 "max_window_layers": 1, "rope_theta": 10000, "rms_norm_eps": 1e-06, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GraniteMoe: Granite's four multipliers around Qwen3-MoE's router
# and stacks.
cat >"$work/granitemoe.json" <<'EOF'
{"architectures": ["GraniteMoeForCausalLM"], "model_type": "granitemoe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 8, "num_experts_per_tok": 2, "embedding_multiplier": 12.0, "attention_multiplier": 0.0625,
 "residual_multiplier": 0.22, "logits_scaling": 6.0, "rope_theta": 10000, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 512, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GraniteMoeShared: GraniteMoe's layer with a shared MLP beside
# the experts, on GraniteMoeHybrid's decoder (every layer attention).
cat >"$work/granitemoeshared.json" <<'EOF'
{"architectures": ["GraniteMoeSharedForCausalLM"], "model_type": "granitemoeshared", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "shared_intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 8, "num_experts_per_tok": 2, "embedding_multiplier": 12.0, "attention_multiplier": 0.0625,
 "residual_multiplier": 0.22, "logits_scaling": 0.5, "rope_theta": 10000, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Llama 4: adjacent-pair rotary with llama3 scaling, q/k L2 norms,
# attention in chunks of 8 (a masked Rem of positions), a NoPE layer whose
# queries the temperature scales (a Log1p of a Floor), dense and sparse
# layers alternating, the top 2 of 8 experts weighing their inputs.
cat >"$work/llama4.json" <<'EOF'
{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": false,
 "text_config": {"model_type": "llama4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 32,
 "intermediate_size_mlp": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "num_local_experts": 8, "num_experts_per_tok": 2, "interleave_moe_layer_step": 2, "use_qk_norm": true,
 "attention_chunk_size": 8, "attn_temperature_tuning": true, "floor_scale": 4, "attn_scale": 0.1, "rope_theta": 500000,
 "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
 "original_max_position_embeddings": 16}, "rms_norm_eps": 1e-05, "max_position_embeddings": 512,
 "bos_token_id": 1, "eos_token_id": 2}}
EOF
# A tiny GraniteMoeHybrid (Granite 4.0-H): Mamba-2 layers (a causal
# convolution, the chunked state space recurrence in several-token steps
# and the token-by-token one in decode, the gated norm) around an attention
# layer without a positional embedding, 8 experts beside a shared MLP.
cat >"$work/granitehybrid.json" <<'EOF'
{"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "vocab_size": 512,
 "hidden_size": 64, "intermediate_size": 32, "shared_intermediate_size": 48, "num_hidden_layers": 3,
 "layer_types": ["mamba", "attention", "mamba"], "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 8, "num_experts_per_tok": 2, "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_n_groups": 1,
 "mamba_d_conv": 4, "mamba_expand": 2, "position_embedding_type": "nope", "embedding_multiplier": 12.0,
 "attention_multiplier": 0.0625, "residual_multiplier": 0.22, "logits_scaling": 6.0, "rms_norm_eps": 1e-05,
 "max_position_embeddings": 512, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny NemotronH (Nemotron 3 Nano): Mamba-2 blocks whose gated norm
# runs per group, a NoPE attention block, MoE blocks of relu² experts
# without a gate (DeepSeek-V3's router: sigmoid, correction bias, two
# groups, top 2 of one) beside a shared expert, and a relu² MLP block;
# the MoE and MLP blocks keep no state.
cat >"$work/nemotronh.json" <<'EOF'
{"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 512, "hidden_size": 64,
 "hybrid_override_pattern": "ME*-ME", "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "intermediate_size": 96, "mlp_hidden_act": "relu2", "mamba_num_heads": 8, "mamba_head_dim": 16,
 "ssm_state_size": 16, "n_groups": 4, "conv_kernel": 4, "use_conv_bias": true, "n_routed_experts": 8,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "n_group": 2,
 "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "layer_norm_epsilon": 1e-05,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny LFM2-MoE (LFM2-8B-A1B): gated short convolutions (in_proj's
# thirds, B·x convolved over the last 3 inputs, gated by C) around an
# attention layer with q/k norms, a dense first layer, then 8 experts
# chosen by sigmoid scores plus an expert bias.
cat >"$work/lfm2moe.json" <<'EOF'
{"architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 4,
 "layer_types": ["conv", "full_attention", "conv", "conv"], "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_dense_layers": 1, "num_experts": 8, "num_experts_per_tok": 2, "use_expert_bias": true, "norm_topk_prob": true,
 "routed_scaling_factor": 1.0, "conv_L_cache": 3, "conv_bias": false, "norm_eps": 1e-05, "rope_theta": 1000000.0,
 "max_position_embeddings": 512, "tie_embedding": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Qwen3-VL-MoE, text only: Qwen3-MoE's decoder under text_config
# with the multimodal rope_scaling (the plain rotary embedding on text),
# the expert stacks stored transposed ([E, hidden, 2I], [E, I, hidden])
# as the releases store them.
cat >"$work/qwen3vlmoe.json" <<'EOF'
{"architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe", "tie_word_embeddings": false,
 "text_config": {"model_type": "qwen3_vl_moe_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1, "mlp_only_layers": [0],
 "norm_topk_prob": true, "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "rope_theta": 5000000,
 "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": true},
 "bos_token_id": 1, "eos_token_id": 2}}
EOF
# A tiny Phi-3.5-MoE: LayerNorms with biases, q/k/v/o and lm_head
# biases, sparsemixer routing over 8 experts, and LongRoPE over 8
# original positions: the prompts start short and their answers cross
# the switch while decoding, where generate prefills the whole sequence
# again at the long frequencies.
cat >"$work/phimoe.json" <<'EOF'
{"architectures": ["PhiMoEForCausalLM"], "model_type": "phimoe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 8, "num_experts_per_tok": 2, "router_jitter_noise": 0.2, "attention_bias": true,
 "lm_head_bias": true, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 512,
 "original_max_position_embeddings": 8, "sliding_window": null, "tie_word_embeddings": false,
 "rope_scaling": {"type": "longrope", "short_factor": [1, 1.2, 1.5, 2, 2.5, 3, 4, 5],
 "long_factor": [2, 3, 4, 6, 8, 12, 16, 24], "short_mscale": 1.1, "long_mscale": 1.3,
 "original_max_position_embeddings": 8}, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Phi-4-mini (Phi3ForCausalLM, dense): fused qkv_proj and
# gate_up_proj, a rotary on 12 of 16 dims, LongRoPE over 8 original
# positions, tied embeddings.
cat >"$work/phi3.json" <<'EOF'
{"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 512,
 "original_max_position_embeddings": 8, "sliding_window": null, "tie_word_embeddings": true,
 "rope_scaling": {"type": "longrope", "short_factor": [1, 1.5, 2, 3, 4, 6], "long_factor": [3, 4, 6, 9, 12, 18]},
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny AFMoE (Arcee's Trinity): sandwich norms scaled in float32, q/k
# norms, the attention's sigmoid gate, three layers within a window of 8
# turning by the rotary and a fourth attending in full without it, a dense
# first layer, then 8 experts by sigmoid with the expert bias, times the
# route scale, and a shared MLP; mup scaling.
cat >"$work/afmoe.json" <<'EOF'
{"architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_dense_layers": 1,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
 "num_shared_experts": 1, "route_scale": 2.5, "global_attn_every_n_layers": 4, "sliding_window": 8,
 "mup_enabled": true, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny SmolLM3 (dense): every second layer NoPE, the last within a
# window of 8, tied embeddings; layer 1 is NoPE and full attention like
# the rotating layers 0 and 2, one kind, which eager mode must not run
# alike.
cat >"$work/smollm3.json" <<'EOF'
{"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
 "no_rope_layer_interval": 2, "use_sliding_window": true, "sliding_window": 8, "rms_norm_eps": 1e-06,
 "layer_types": ["full_attention", "full_attention", "full_attention", "sliding_attention"],
 "rope_theta": 5000000.0, "max_position_embeddings": 512, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny OLMo 3 (dense): post norms only, q/k norms over whole
# projections, three layers within a window of 8 turning by the plain
# rotary, a fourth attending in full with YaRN.
cat >"$work/olmo3.json" <<'EOF'
{"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
 "sliding_window": 8, "rms_norm_eps": 1e-06, "rope_theta": 500000, "max_position_embeddings": 2048,
 "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, "attention_factor": 1.2},
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Ministral 3 (dense): YaRN over 8 original positions, and every
# layer's queries scaled by 1 + 0.5·log(1 + floor(position / 8)), which
# the prompts cross.
cat >"$work/ministral3.json" <<'EOF'
{"architectures": ["Ministral3ForCausalLM"], "model_type": "ministral3", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "sliding_window": null, "tie_word_embeddings": true,
 "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 64.0, "original_max_position_embeddings": 8,
  "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5},
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny EXAONE 4.0 (dense): post norms only, q/k norms per head, three
# layers within a window of 8 turning by the rotary, a fourth attending
# in full without it.
cat >"$work/exaone4.json" <<'EOF'
{"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
 "sliding_window": 8, "sliding_window_pattern": 4, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
 "max_position_embeddings": 512, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GLM-4-0414 (dense): q/k/v biases, the rotary over half of each
# head turning adjacent pairs, four norms a layer, the gate and up
# projections in one matrix.
cat >"$work/glm4.json" <<'EOF'
{"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "attention_bias": true, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Cohere 2 (dense): one LayerNorm without bias feeding the
# attention and the MLP side by side, the rotary over adjacent pairs on
# three layers within a window of 8, a fourth in full without it, the
# logits scaled.
cat >"$work/cohere2.json" <<'EOF'
{"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
 "sliding_window": 8, "sliding_window_pattern": 4, "layer_norm_eps": 1e-05, "logit_scale": 0.25, "rope_theta": 50000.0,
 "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Apertus (dense): q/k norms per head, an ungated MLP whose xIELU
# reads four scalar weights a layer (two of them 0-dimensional).
cat >"$work/apertus.json" <<'EOF'
{"architectures": ["ApertusForCausalLM"], "model_type": "apertus", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "xielu",
 "rms_norm_eps": 1e-05, "rope_theta": 12000000.0, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny OLMo 1 (dense): LayerNorms without parameters, q, k and v
# clamped to ±0.05 (which the random projections cross).
cat >"$work/olmo1.json" <<'EOF'
{"architectures": ["OlmoForCausalLM"], "model_type": "olmo", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "clip_qkv": 0.05,
 "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GLM-4.5: grouped-query attention with q/k/v biases, q/k norms and
# half of each head rotated; 8 experts with the correction bias, a shared
# expert, a dense first layer.
cat >"$work/glm.json" <<'EOF'
{"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 32, "partial_rotary_factor": 0.5, "attention_bias": true, "use_qk_norm": true,
 "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
 "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0, "rope_theta": 1000000,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny MiniMax-M2: q/k norms over whole projections, a quarter of each
# head rotated, 8 experts with the block's correction bias on every layer.
cat >"$work/minimax.json" <<'EOF'
{"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "rotary_dim": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "scoring_func": "sigmoid", "use_routing_bias": true,
 "use_qk_norm": true, "qk_norm_type": "per_layer", "rope_theta": 5000000, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny OLMoE: q/k norms over whole projections, q, k and v clamped.
cat >"$work/olmoe.json" <<'EOF'
{"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": false, "clip_qkv": 1.5, "rope_theta": 10000.0,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny BitNet b1.58: sub norms before o_proj and down_proj, relu²;
# written in bf16, then as BitNet's packed ternary copy.
cat >"$work/bitnet.json" <<'EOF'
{"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "relu2",
 "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 512, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny FlexOlmo: OLMoE's attention and experts in OLMo 2's layer (post
# norms only), the experts in the layer's graph.
cat >"$work/flexolmo.json" <<'EOF'
{"architectures": ["FlexOlmoForCausalLM"], "model_type": "flex_olmo", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": false, "rope_theta": 500000.0,
 "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny HunYuan-MoE (Hunyuan-A13B's layout): q/k norms after the rotary,
# whose base the alpha raises, a float32 router over 8 experts beside a
# shared MLP, the per-layer lists its config writes.
cat >"$work/hunyuanmoe.json" <<'EOF'
{"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0},
 "num_experts": 8, "moe_topk": [2, 2], "moe_intermediate_size": [32, 32], "num_shared_expert": [1, 1],
 "use_mixed_mlp_moe": true, "use_qk_norm": true, "use_cla": false,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Falcon-H1: attention and a Mamba-2 mixer side by side in every
# layer (a KV cache and the mixer's state in one layer), every multiplier
# other than 1, the mixer's grouped norm after the gate.
cat >"$work/falconh1.json" <<'EOF'
{"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 16, "mamba_d_conv": 4,
 "mamba_chunk_size": 8, "mamba_rms_norm": true, "mamba_norm_before_gate": false, "rope_theta": 100000.0,
 "embedding_multiplier": 5.66, "lm_head_multiplier": 0.5, "key_multiplier": 0.39, "attention_in_multiplier": 1.1, "attention_out_multiplier": 0.94,
 "ssm_in_multiplier": 1.25, "ssm_out_multiplier": 0.24, "mlp_multipliers": [0.88, 0.59], "ssm_multipliers": [0.35, 0.25, 0.35, 0.5, 0.35],
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny FalconMamba: Mamba-1 layers alone (no attention, no KV cache),
# the selective scan's prefix scan over chunks of 16 in prefill, dt, B
# and C normed by their RMS.
cat >"$work/falconmamba.json" <<'EOF'
{"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "vocab_size": 512, "hidden_size": 64,
 "num_hidden_layers": 2, "state_size": 8, "expand": 2, "conv_kernel": 4, "time_step_rank": 4, "use_bias": false,
 "use_conv_bias": true, "hidden_act": "silu", "layer_norm_epsilon": 1e-05, "mixer_rms_eps": 1e-06,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Mamba-2 language model (Mamba-Codestral's class): the Mamba-2
# mixer on every layer, 4 heads in 2 groups, the gated norm over the whole
# width, a chunk of 16 that a long prompt crosses.
cat >"$work/mamba2.json" <<'EOF'
{"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
 "num_heads": 4, "head_dim": 32, "n_groups": 2, "state_size": 16, "expand": 2, "conv_kernel": 4, "chunk_size": 16,
 "use_bias": false, "use_conv_bias": true, "hidden_act": "silu", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Jamba: Mamba-1 layers with dt, B and C RMSNorms beside an
# unrotated attention layer, experts (softmax top 2, not renormalized)
# on every second layer.
cat >"$work/jamba.json" <<'EOF'
{"architectures": ["JambaForCausalLM"], "model_type": "jamba", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-06,
 "num_experts": 8, "num_experts_per_tok": 2, "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 4, "attn_layer_offset": 2,
 "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 4, "tie_word_embeddings": false,
 "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Bamba: Mamba-2 layers (the gated norm over the whole width)
# beside an attention layer that rotates half of each head.
cat >"$work/bamba.json" <<'EOF'
{"architectures": ["BambaForCausalLM"], "model_type": "bamba", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "attn_layer_indices": [1],
 "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_n_groups": 2, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
 "mamba_chunk_size": 8, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Gemma 3n: AltUp's four streams, LAuReL, the first two MLPs
# sparse, the last two layers sharing earlier caches, a per-layer
# vocabulary smaller than the model's.
cat >"$work/gemma3n.json" <<'EOF'
{"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text",
 "vocab_size": 512, "vocab_size_per_layer_input": 400, "hidden_size": 64, "hidden_size_per_layer_input": 8,
 "intermediate_size": [128, 128, 96, 128, 128, 128, 128], "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "sliding_window": 4, "num_kv_shared_layers": 2, "altup_num_inputs": 4, "laurel_rank": 8,
 "activation_sparsity_pattern": [0.95, 0.8, 0, 0, 0, 0, 0], "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
 "final_logit_softcapping": 30.0, "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}}
EOF
# A tiny Zamba2: two shared attention blocks taken in turn by three
# hybrid layers (their adapters, the original embeddings beside the
# stream), Mamba-2 layers between.
cat >"$work/zamba2.json" <<'EOF'
{"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 6, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "mamba", "hybrid"], "num_attention_heads": 4,
 "num_key_value_heads": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": 2, "n_mamba_heads": 4,
 "chunk_size": 8, "num_mem_blocks": 2, "use_shared_attention_adapter": true, "adapter_rank": 8, "use_mem_rope": true,
 "hidden_act": "gelu", "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Ling 2.0: the fused q/k/v with q/k norms rotating half of each
# head, a dense first layer, then the sigmoid router with its expert
# bias over 2 of 4 groups (the closed ones masked with −∞) and a shared
# expert.
cat >"$work/ling.json" <<'EOF'
{"architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe_v2", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "partial_rotary_factor": 0.5, "use_qkv_bias": false, "use_bias": false, "use_qk_norm": true,
 "num_experts": 8, "num_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
 "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "rope_theta": 600000, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny SmallThinker: the router on the layer's input, ReGLU experts,
# a NoPE layer and windowed ones.
cat >"$work/smallthinker.json" <<'EOF'
{"architectures": ["SmallThinkerForCausalLM"], "model_type": "smallthinker", "vocab_size": 512, "hidden_size": 64,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "moe_num_primary_experts": 8, "moe_num_active_primary_experts": 2, "moe_ffn_hidden_size": 32,
 "moe_primary_router_apply_softmax": false, "rope_layout": [0, 1, 1, 1], "sliding_window_layout": [0, 1, 1, 1],
 "sliding_window_size": 8, "rope_theta": 1500000, "rms_norm_eps": 1e-06, "max_position_embeddings": 512,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Pythia (GPT-NeoX): the fused q/k/v by head, two biased
# LayerNorms in parallel, a quarter of each head rotated.
cat >"$work/pythia.json" <<'EOF'
{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4, "rotary_pct": 0.25, "rotary_emb_base": 10000,
 "layer_norm_eps": 1e-05, "use_parallel_residual": true, "tie_word_embeddings": false, "hidden_act": "gelu",
 "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GPT-J: one biased LayerNorm before the attention and the MLP in
# parallel, the rotary on adjacent pairs of a quarter of each head, a
# biased head.
cat >"$work/gptj.json" <<'EOF'
{"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "vocab_size": 512, "n_embd": 64, "n_head": 4, "n_inner": null,
 "n_layer": 3, "n_positions": 512, "rotary_dim": 4, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GPT-2: learned absolute positions added by layer 0 (a table of
# 512), no rotary, the fused c_attn and every matrix stored as Conv1D's
# [in, out] (turned at load), biased LayerNorms, a tied head.
cat >"$work/gpt2.json" <<'EOF'
{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 512, "n_embd": 64, "n_head": 4, "n_inner": null,
 "n_layer": 3, "n_positions": 512, "n_ctx": 512, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny GPT-Neo: GPT-2's block with unscaled scores (computed in
# float32) and local layers of a window of 8 among global ones.
cat >"$work/gptneo.json" <<'EOF'
{"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "vocab_size": 512, "hidden_size": 64, "num_heads": 4,
 "num_layers": 4, "attention_types": [[["global", "local"], 2]], "window_size": 8, "max_position_embeddings": 512,
 "intermediate_size": null, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new", "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny EXAONE 3.5: Llama under GPT-2-style names, grouped KV heads,
# llama3 rope scaling, a tied head.
cat >"$work/exaone.json" <<'EOF'
{"architectures": ["ExaoneForCausalLM"], "model_type": "exaone", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_layers": 3, "intermediate_size": 160, "layer_norm_epsilon": 1e-05, "activation_function": "silu",
 "rope_theta": 1000000.0, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
 "original_max_position_embeddings": 128, "rope_type": "llama3"}, "max_position_embeddings": 512, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny InternLM 2.5: wqkv's rows by key/value group (2 groups of 2
# query heads), InternLM2Config's biases on wqkv and wo, dynamic rope
# scaling, an untied head.
cat >"$work/internlm2.json" <<'EOF'
{"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_hidden_layers": 3, "intermediate_size": 160, "rms_norm_eps": 1e-05, "hidden_act": "silu", "bias": true,
 "rope_theta": 1000000, "rope_scaling": {"type": "dynamic", "factor": 2.0}, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Baichuan 2 13B: W_pack, ALiBi over 6 heads (not 4096 wide), the
# head normalized as it loads (Baichuan 2's vocabulary of 125,696).
cat >"$work/baichuan2.json" <<'EOF'
{"architectures": ["BaichuanForCausalLM"], "model_type": "baichuan", "vocab_size": 125696, "hidden_size": 48, "num_attention_heads": 6,
 "num_hidden_layers": 3, "intermediate_size": 128, "rms_norm_eps": 1e-06, "hidden_act": "silu", "model_max_length": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny MiniCPM4: μP's scale_emb, scale_depth and dim_model_base,
# grouped KV heads, an untied head.
cat >"$work/minicpm.json" <<'EOF'
{"architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4,
 "num_key_value_heads": 2, "num_hidden_layers": 3, "intermediate_size": 160, "rms_norm_eps": 1e-06, "hidden_act": "silu",
 "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 16, "rope_theta": 10000.0, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Qwen 1: c_attn with its bias, w2 the gate, the MLP half of
# intermediate_size, rotary_pct 0.5, the context bounded at seq_length.
cat >"$work/qwen1.json" <<'EOF'
{"architectures": ["QWenLMHeadModel"], "model_type": "qwen", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4,
 "kv_channels": 16, "num_hidden_layers": 3, "intermediate_size": 320, "layer_norm_epsilon": 1e-06, "no_bias": true, "rotary_pct": 0.5,
 "rotary_emb_base": 10000, "use_dynamic_ntk": true, "use_logn_attn": true, "seq_length": 512, "max_position_embeddings": 1024,
 "scale_attn_weights": true, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny OPT-350M: LayerNorms after each residual add, no final
# LayerNorm, embeddings half the hidden size projected in and out.
cat >"$work/opt350m.json" <<'EOF'
{"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4,
 "num_hidden_layers": 3, "ffn_dim": 160, "do_layer_norm_before": false, "word_embed_proj_dim": 32, "activation_function": "relu",
 "max_position_embeddings": 512, "enable_bias": true, "bos_token_id": 2, "eos_token_id": 2}
EOF
# A tiny StarCoder (GPTBigCode): GPT-2's block with Linear matrices and
# one key and value head (multi_query).
cat >"$work/starcoder.json" <<'EOF'
{"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "vocab_size": 512, "n_embd": 64, "n_head": 4,
 "n_inner": 192, "n_layer": 3, "n_positions": 512, "multi_query": true, "layer_norm_epsilon": 1e-05,
 "activation_function": "gelu_pytorch_tanh", "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny BLOOM: attention with linear biases (6 heads: the slopes' extra
# odd powers), the embeddings' LayerNorm, q/k/v by head, a tied head.
cat >"$work/bloom.json" <<'EOF'
{"architectures": ["BloomForCausalLM"], "model_type": "bloom", "vocab_size": 512, "hidden_size": 48, "n_head": 6,
 "n_layer": 3, "layer_norm_epsilon": 1e-05, "apply_residual_connection_post_layernorm": false, "pretraining_tp": 1,
 "slow_but_exact": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny OPT: learned positions read two rows on, biased LayerNorms
# named by the layer, relu, a tied head.
cat >"$work/opt.json" <<'EOF'
{"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 512, "hidden_size": 64, "ffn_dim": 160,
 "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 512, "do_layer_norm_before": true,
 "word_embed_proj_dim": 64, "activation_function": "relu", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
EOF
# A tiny Falcon-40B: the new architecture's grouped q/k/v, two
# LayerNorms in parallel, a tied head.
cat >"$work/falcon.json" <<'EOF'
{"architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 3,
 "num_attention_heads": 8, "num_kv_heads": 2, "new_decoder_architecture": true, "num_ln_in_parallel_attn": 2,
 "parallel_attn": true, "bias": false, "alibi": false, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 512,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Falcon-RW: alibi (scaled with the scores) in place of the
# rotary, a key/value head per head, the sequential block, biases.
cat >"$work/falconrw.json" <<'EOF'
{"architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": 512, "hidden_size": 48, "num_hidden_layers": 3,
 "num_attention_heads": 6, "alibi": true, "multi_query": false, "new_decoder_architecture": false, "parallel_attn": false,
 "bias": true, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny DBRX, stored as its releases store it: the experts' w1, v1 and
# w2 three to a layer (split at load, w2 transposed), the fused q/k/v
# clamped, LayerNorms without a bias.
cat >"$work/dbrx.json" <<'EOF'
{"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "vocab_size": 512, "d_model": 64, "n_heads": 4, "n_layers": 3,
 "max_seq_len": 512, "attn_config": {"clip_qkv": 0.5, "kv_n_heads": 2, "rope_theta": 500000},
 "ffn_config": {"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 32, "moe_num_experts": 8, "moe_top_k": 2},
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny DeepSeek MoE (deepseek-moe-16b's layout): a dense first layer,
# the softmax's top 3 of 8 undivided, 2 shared experts.
cat >"$work/deepseekv1.json" <<'EOF'
{"architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 3,
 "moe_intermediate_size": 32, "n_shared_experts": 2, "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": false,
 "scoring_func": "softmax", "rms_norm_eps": 1e-06, "rope_theta": 10000, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Arctic: the experts beside the attention on the layer's normed
# input, the residual MLP after it.
cat >"$work/arctic.json" <<'EOF'
{"architectures": ["ArcticForCausalLM"], "model_type": "arctic", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 32,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
 "moe_layer_frequency": 1, "parallel_attn_mlp_res": true, "use_residual": true, "rms_norm_eps": 1e-05, "rope_theta": 10000,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Kimi Linear: Kimi Delta Attention (a decay a key channel) in
# three layers of four, MLA without rotary in the third, DeepSeek-V3's
# router with a shared expert after a dense first layer.
cat >"$work/kimilinear.json" <<'EOF'
{"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": null,
 "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": true,
 "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
 "moe_layer_freq": 1, "moe_renormalize": true, "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446,
 "num_expert_group": 1, "topk_group": 1, "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
 "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3], "head_dim": 16, "num_heads": 4, "short_conv_kernel_size": 4}}
EOF
# A tiny MiniMax-Text-01: lightning attention (linear attention with a
# fixed decay a head and layer) in three layers of four, the softmax
# layer turning half of each head, Mixtral's experts, every residual
# weighed after its norm; lightning chunks of 16 tokens.
cat >"$work/minimax01.json" <<'EOF'
{"architectures": ["MiniMaxForCausalLM"], "model_type": "minimax", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 32,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rotary_dim": 8,
 "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"], "block_size": 16,
 "num_local_experts": 8, "num_experts_per_tok": 2, "full_attn_alpha_factor": 1.5, "linear_attn_alpha_factor": 1.5,
 "mlp_alpha_factor": 1.5, "postnorm": true, "rms_norm_eps": 1e-05, "rope_theta": 10000000, "max_position_embeddings": 512,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny LongCat-Flash: two MLA sublayers a layer (the LoRA scales), two
# dense MLPs, the shortcut MoE on the first MLP's input with 4 zero
# experts beside 8 real ones, 3 chosen.
cat >"$work/longcat.json" <<'EOF'
{"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "vocab_size": 512, "hidden_size": 64, "ffn_hidden_size": 96,
 "num_layers": 2, "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
 "v_head_dim": 16, "n_routed_experts": 8, "zero_expert_num": 4, "zero_expert_type": "identity", "moe_topk": 3, "expert_ffn_hidden_size": 32,
 "routed_scaling_factor": 2.0, "router_bias": false, "mla_scale_q_lora": true, "mla_scale_kv_lora": true, "rope_theta": 10000000,
 "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny K-EXAONE: EXAONE 4.0's attention (q/k norms, sliding layers of
# 8 tokens but every fourth, global without the rotary) in pre-norm layers
# over DeepSeek-V3's MoE (the 2 best of 4 groups, a shared expert).
cat >"$work/exaonemoe.json" <<'EOF'
{"architectures": ["ExaoneMoeForCausalLM"], "model_type": "exaone_moe", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 8,
 "sliding_window_pattern": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "num_shared_experts": 1,
 "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "rope_theta": 10000, "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny ERNIE 4.5 VL as its text model, in the Hub's layout (the
# routers stored transposed, a correction bias row a modality).
cat >"$work/ernievl.json" <<'EOF'
{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "model_type": "ernie4_5_moe_vl", "vocab_size": 512, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "moe_num_experts": [8, 8], "moe_k": 2, "moe_intermediate_size": [32, 16], "moe_num_shared_experts": 1, "moe_layer_start_index": [1, 1],
 "moe_layer_end_index": [3, 2], "moe_layer_interval": 1, "rope_theta": 500000, "rms_norm_eps": 1e-05, "max_position_embeddings": 512,
 "tie_word_embeddings": true, "use_bias": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny Solar Open: GLM-4.5's MoE on every layer, the whole head turning.
cat >"$work/solaropen.json" <<'EOF'
{"architectures": ["SolarOpenForCausalLM"], "model_type": "solar_open", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 3,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "attention_bias": true, "n_routed_experts": 8, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0,
 "rope_theta": 1000000, "rms_norm_eps": 1e-05, "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
EOF
# A tiny A.X K1: DeepSeek-V3 whose sparse layers norm the MoE output.
cat >"$work/axk1.json" <<'EOF'
{"architectures": ["AXK1ForCausalLM"], "model_type": "axk1", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
 "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
 "n_shared_experts": 1, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "rope_theta": 10000, "rope_interleave": true, "rms_norm_eps": 1e-06, "max_position_embeddings": 512, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
printf '{"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": %s}\n' "$(g4text 2 8 false false)" >"$work/gemma4-e.json"
printf '{"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": %s}\n' "$(g4text 0 null true true)" >"$work/gemma4-moe.json"
for fam in gptoss gemma4-e gemma4-moe qwen3next mixtral deepseek glm minimax olmoe deepseek2 ernie dots granitemoe llama4 granitehybrid nemotronh lfm2moe qwen3vlmoe phimoe phi3 afmoe smollm3 olmo3 ministral3 ministral3-fp8 exaone4 glm4 cohere2 apertus olmo1 granitemoeshared flexolmo bitnet hunyuanmoe falconh1 falconmamba jamba bamba gemma3n zamba2 ling smallthinker pythia gptj gpt2 gptneo exaone internlm2 baichuan2 minicpm qwen1 opt350m mamba2 starcoder bloom opt falcon falconrw dbrx deepseekv1 arctic kimilinear deepseekv32 minimax01 longcat axk1 exaonemoe ernievl solaropen; do
	mkdir -p "$work/$fam"
	dtype=F32
	[ "$fam" = gptoss ] && dtype=BF16 # as released: MXFP4 experts, the rest bf16
	apart=()
	case "$fam" in mixtral | deepseek | deepseek2 | glm | minimax | olmoe | ernie | dots | nemotronh | lfm2moe | phimoe | afmoe | flexolmo | hunyuanmoe | jamba | ling | deepseekv1 | arctic | kimilinear | deepseekv32 | minimax01 | longcat | axk1 | exaonemoe | ernievl | solaropen) apart=(-experts-apart) ;; esac # one tensor an expert, as the Hub holds them
	if [ "$fam" = ministral3-fp8 ]; then
		# The tiny Ministral 3 in per-tensor FP8, as Mistral releases it:
		# held as stored on the CPU engine, decoded at load on the device.
		if [ ! -x "$bin/fp8-checkpoint" ]; then
			say "ministral3-fp8: skipped, $bin/fp8-checkpoint is missing (build with scripts/device-check.sh --build)"
			continue
		fi
		if ! "$bin/fp8-checkpoint" -per-tensor -m "$work/ministral3" -o "$work/$fam" >>"$log" 2>&1; then
			families+=("$fam: no")
			fail "$fam: the FP8 copy could not be written"
			continue
		fi
	elif [ "$fam" = bitnet ]; then
		# A tiny BitNet b1.58 (ternary weights four a byte, a bf16 scale
		# a matrix): decoded at load on both; every projection's input
		# rounded to int8 per token in the graph (Round on the device).
		if [ ! -x "$bin/bitnet-checkpoint" ]; then
			say "bitnet: skipped, $bin/bitnet-checkpoint is missing (build with scripts/device-check.sh --build)"
			continue
		fi
		if ! "$bin/gen-llm-checkpoint" -config "$work/$fam.json" -dtype BF16 -o "$work/$fam-bf16" >>"$log" 2>&1 ||
			! "$bin/bitnet-checkpoint" -m "$work/$fam-bf16" -o "$work/$fam" >>"$log" 2>&1; then
			families+=("$fam: no")
			fail "$fam: the BitNet copy could not be written"
			continue
		fi
	elif ! "$bin/gen-llm-checkpoint" -config "$work/$fam.json" -dtype "$dtype" "${apart[@]}" -o "$work/$fam" >>"$log" 2>&1; then
		families+=("$fam: no")
		fail "$fam: the checkpoint could not be written"
		continue
	fi
	cp testdata/stories260K-hf/tokenizer.json testdata/stories260K-hf/tokenizer_config.json \
		testdata/stories260K-hf/special_tokens_map.json "$work/$fam/"
	fg=(generate -m "$work/$fam" -p "Once upon a time" -p "The little dog" -n 16 --temperature 0 --dtype f32 --json)
	case "$fam" in granitehybrid | nemotronh | kimilinear | deepseekv32 | minimax01 | mamba2) # a prompt past the Mamba-2 chunk of 64 tokens (the KDA's of 8; the indexer's 8 keys; the lightning chunk of 16): the state carried from chunk to chunk
		fg+=(-p "Once upon a time there was a little girl named Lily. She loved to play outside in the sun with her friends. One day, she saw a big red ball in the park and ran to get it. The ball was very shiny and bouncy, and Lily laughed as it flew high into the blue sky above the tall green trees.") ;;
	esac
	run "fam-$fam-cpu.json" "$tputool" --device cpu "${fg[@]}" || true
	run "fam-$fam-dev.json" "${f32_env[@]}" "$tputool" --device "$device" "${fg[@]}" || true
	run "fam-$fam-dev-eager.json" "${f32_env[@]}" "$tputool" --device "$device" "${fg[@]}" --mode eager || true
	if [ -s "$OUT/fam-$fam-cpu.json" ] && compare_tokens "$OUT/fam-$fam-cpu.json" "$OUT/fam-$fam-dev.json" \
		"$OUT/fam-$fam-dev-eager.json" >"$OUT/fam-$fam-compare.txt" 2>&1; then
		families+=("$fam: yes")
		say "$fam: the device's greedy tokens (compiled and eager) equal the CPU's"
	else
		families+=("$fam: no")
		fail "$fam tokens differ: $(head -3 "$OUT/fam-$fam-compare.txt" 2>/dev/null | tr '\n' ' ')"
	fi
done

# ---- 3. bench

if [ "$MOE_BENCH" != 0 ]; then
	big="$work/moe-bench"
	mkdir -p "$big"
	moe_config 512 4 8 4 64 64 256 8 4096 >"$work/moe-bench.json"
	"$bin/gen-llm-checkpoint" -config "$work/moe-bench.json" -o "$big" >>"$log" 2>&1
	bench=(bench -m "$big" --prompt-len 64 --gen-len 32 --repeat 3 --warmup 1 --mode compiled -o json)
	run moe-bench-cpu-graph.json "$tputool" --device cpu "${bench[@]}" --batch 1 --repeat 2 --experts graph || true
	run moe-bench-dev-graph.json "$tputool" --device "$device" "${bench[@]}" --batch 1,8 --experts graph || true
	run moe-bench-dev-dense.json "$tputool" --device "$device" "${bench[@]}" --batch 1 --experts dense || true
	if [ -s "$OUT/moe-bench-dev-graph.json" ]; then
		recompiles=$("$PYTHON" -c 'import json, sys; print(sum(r.get("recompiles", 0) for r in json.load(open(sys.argv[1]))["rows"]))' \
			"$OUT/moe-bench-dev-graph.json" 2>>"$log" || echo "?")
		if [ "$recompiles" = 0 ]; then
			say "bench: --experts graph compiled nothing after its first run on the device"
		else
			fail "bench: --experts graph recompiled on the device after its first run ($recompiles)"
		fi
	fi
fi

# ---- summary

"$PYTHON" - "$OUT" "$device" "$tokens_ok" "${families[@]}" >"$OUT/moe-summary.md" <<'EOF' || fail "moe-summary.md could not be written"
import json, os, sys
out, device, tokens_ok = sys.argv[1:4]
families = sys.argv[4:]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:
        return None
def med(s):
    return "-" if not s else f"{s['median']:.1f}"
print(f"# tputool device check: mixture of experts\n\ndevice: `{device}`\n")
print(f"- Qwen3-MoE greedy token ids (float32; --experts graph compiled and eager, host, dense) equal the CPU's: **{tokens_ok}**")
for f in families:
    name, ok = f.split(": ")
    print(f"- {name} greedy token ids (float32, compiled and eager) equal the CPU's: **{ok}**")
print()
print("## Decode, generated Qwen3-MoE (hidden 512, 4 layers, 64 experts of 256, top 8; random weights)\n")
print("| device | experts | batch | compile s | executables | recompiles | prefill tok/s | decode tok/s | ITL ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for name, label, e in (("moe-bench-cpu-graph.json", "cpu", "graph"), ("moe-bench-dev-graph.json", device, "graph"),
                       ("moe-bench-dev-dense.json", device, "dense")):
    r = load(name)
    for row in (r or {}).get("rows", []):
        print(f"| {label} | {e} | {row['batch']} | {row.get('compile_s', 0):.2f} | {row.get('cache_misses', '-')} | "
              f"{row.get('recompiles', '-')} | {med(row.get('prefill_tok_s'))} | "
              f"{med(row.get('decode_tok_s'))} | {med(row.get('itl_ms'))} |")
EOF

if [ ${#failures[@]} -gt 0 ]; then
	{
		echo
		echo "## Failures"
		echo
		for f in "${failures[@]}"; do echo "- $f"; done
	} >>"$OUT/moe-summary.md"
	say "${#failures[@]} check(s) failed; see $OUT/moe-summary.md"
	exit 1
fi
say "MoE checks passed; results in $OUT (moe-summary.md)"
