#!/usr/bin/env bash
# A random Qwen3-MoE (or with FAMILY=mixtral a Mixtral, FAMILY=deepseek a
# DeepSeek-V3, FAMILY=deepseek2 a DeepSeek-V2, FAMILY=glm a GLM-4.5,
# FAMILY=minimax a MiniMax-M2, FAMILY=olmoe an OLMoE, FAMILY=ernie an
# ERNIE 4.5 MoE, FAMILY=dots a dots.llm1, FAMILY=llama4 a Llama 4,
# FAMILY=granitehybrid a Granite 4.0-H, FAMILY=nemotronh a Nemotron 3
# Nano, FAMILY=lfm2moe an LFM2-8B-A1B, FAMILY=lfm2 a dense LFM2-1.2B,
# FAMILY=phimoe a Phi-3.5-MoE, FAMILY=phi3 a dense Phi-4-mini, FAMILY=afmoe
# an Arcee Trinity Mini, FAMILY=granitemoe a Granite 3.1 MoE,
# FAMILY=granitemoeshared the same with a shared MLP, FAMILY=jamba a Jamba,
# FAMILY=falconmamba a FalconMamba, FAMILY=gemma3n a Gemma 3n,
# FAMILY=bamba a Bamba, FAMILY=ling a Ling 2.0, FAMILY=smallthinker a
# SmallThinker, FAMILY=pythia a dense GPT-NeoX, FAMILY=dbrx a DBRX,
# FAMILY=deepseekv1 a DeepSeek MoE, FAMILY=arctic an Arctic) on
# tputool and on llama.cpp's kernels (ollama), same weights, side
# by side, in rounds that interleave the two:
#
#   MODE=decode (default): batch-1 decode; each round one tputool bench run
#     (--repeat 3, median) and three ollama generations (median);
#   MODE=prefill: prompt processing; each round one tputool bench run
#     (--prompt-len PROMPT_LEN, default 512, one generated token, --repeat
#     3, median) and three ollama generations of one token whose prompt
#     is about as many of ollama's tokens (each made distinct at its start
#     so that ollama's prompt cache cannot serve it), its prompt_eval rate
#     (median);
#   MODE=serve: both servers up, and per round and level of LEVELS
#     (default 8,32,64) concurrent greedy streams, scripts/servebench
#     against `tputool serve` then against ollama (OLLAMA_NUM_PARALLEL =
#     the largest level): aggregate tok/s, and tputool's compiles and
#     recompiles during the measured phase (from /metrics).
#
# Every line carries the load average. In MODE=decode ollama samples
# (temperature 1, top-k 40, a fixed seed): greedy decoding of a random
# model can repeat one token, and ollama aborts a generation after 30
# repeats (scripts/bench-dense-vs-llamacpp.sh says more).
#
# The model (docs/moe.md): hidden 1024, 8 layers, 16 heads (4 KV) of 128,
# 64 experts of 512, top 8, vocab 151936 (Qwen3's size; the tokenizer is a
# byte-level BPE padded with plain tokens <|pad_N|>), untied head, bf16, 2.3 GB,
# experts stacked as transformers v5 stores them. FAMILY=mixtral: Mixtral
# 8x7B's layer (hidden 4096, 32 heads, 8 KV heads of 128, 8 experts of
# 14336, top 2, vocab 32000, untied head) in LAYERS layers (default 2, 6.3
# GB bf16), the experts one tensor per expert as the release stores them
# (block_sparse_moe.experts.E.w1/w2/w3), DIR /tmp/tputool-mixtral-bench.
# FAMILY=deepseek: a DeepseekV3ForCausalLM of Moonlight-16B-A3B's layer
# (hidden 2048, MLA of 16 heads with kv_lora_rank 512, rope 64, nope 128,
# v 128, and DeepSeek-V3's q LoRA of 1536, since ollama's converter does
# not map a plain q_proj; 64 experts of 1408, top 6, 2 shared, sigmoid routing
# with the correction bias, a dense first layer of 11264; vocab 163840,
# untied head; DeepSeek-V3's YaRN rope_scaling, without which ollama's
# deepseek2 engine samples from NaNs) in LAYERS layers (default 4, 4.9 GB
# bf16; ollama's import takes twice that again on disk), the experts one
# tensor each, DIR /tmp/tputool-deepseek-bench; ollama imports the folder
# itself (its convert_deepseek2.go). FAMILY=deepseek2: a
# DeepseekV2ForCausalLM of DeepSeek-V2-Lite's layer (hidden 2048, MLA of 16
# heads over a latent of 512, rope 64, nope 128, v 128; 64 experts of
# 1408, top 6 by softmax, greedy, not renormalized, 2 shared; a dense first
# layer of 10944; vocab 102400, untied head; V2-Lite's YaRN) with
# DeepSeek-V2's q LoRA of 1536 (llama.cpp reads a plain q_proj only in a
# 26- or 27-layer deepseek2) in LAYERS layers (default 4, 4.5 GB bf16),
# DIR /tmp/tputool-deepseek2-bench; scripts/export-gguf writes the GGUF,
# which ollama runs on its llama.cpp runner (its own engine routes by
# sigmoid only, and takes no such file). FAMILY=glm: a Glm4MoeForCausalLM of
# GLM-4.5-Air's layer (hidden 4096, 96 heads and 8 KV heads of 128, half of
# each rotated, q/k/v biases; 128 experts of 1408, top 8, a shared expert,
# sigmoid routing with the correction bias; a dense first layer of 10944;
# vocab 151552, untied head) in LAYERS layers (default 2: the dense one and
# one sparse, 7.6 GB bf16), the experts one tensor each, DIR
# /tmp/tputool-glm-bench; ollama's importer does not read that class, and
# llama.cpp runs the GGUF as its glm4moe. FAMILY=minimax: a
# MiniMaxM2ForCausalLM of MiniMax-M2's layer (hidden 3072, 48 heads and 8 KV
# heads of 128, a rotary_dim of 64, q/k norms over whole projections; 256
# experts of 1536, top 8, sigmoid routing with the correction bias; vocab
# 200064, untied head) in LAYERS layers (default 1, 9.7 GB bf16; with
# Q8=1 and Q4=1 the GGUF and ollama's copies take about 38 GB of disk),
# DIR /tmp/tputool-minimax-bench, run by llama.cpp as its minimax-m2.
# FAMILY=olmoe: an OlmoeForCausalLM of OLMoE-1B-7B's layer (hidden 2048,
# 16 heads of 128, q/k norms over whole projections, 64 experts of 1024,
# top 8 not renormalized; vocab 50304, untied head) in LAYERS layers
# (default 4, 3.8 GB bf16), DIR /tmp/tputool-olmoe-bench, run by llama.cpp
# as its olmoe. FAMILY=ernie: an Ernie4_5_MoeForCausalLM of
# ERNIE-4.5-21B-A3B's layer (hidden 2560, 20 heads and 4 KV heads of 128,
# rotary on adjacent pairs; 64 experts of 1536, top 6 by softmax with the
# correction bias, 2 shared; a dense first layer of 12288; vocab 103424,
# tied head) in LAYERS layers (default 4, 5.5 GB bf16), DIR
# /tmp/tputool-ernie-bench, run by llama.cpp as its ernie4_5-moe.
# FAMILY=dots: a Dots1ForCausalLM of dots.llm1's layer (hidden 4096, 32
# heads of 128 with q/k norms; 128 experts of 1408, top 6, 2 shared,
# sigmoid routing with the correction bias, renormalized, scale 2.5; a
# dense first layer of 10944; vocab 152064, untied head) in LAYERS layers
# (default 2: the dense one and a sparse one, 7.4 GB bf16), DIR
# /tmp/tputool-dots-bench, run by llama.cpp as its dots1. FAMILY=llama4: a
# Llama4ForConditionalGeneration of Llama 4 Scout's text layer (hidden
# 5120, 40 heads and 8 KV heads of 128, adjacent-pair rotary, q/k L2
# norms, chunks of 8192; 16 experts of 8192, top 1 by sigmoid, scaling the
# expert's input, and a shared expert; no rope scaling) with vocab 32000
# (Scout's 202048 would add 3.8 GB a side) in LAYERS layers (default 2,
# 9.5 GB bf16), DIR /tmp/tputool-llama4-bench; ollama runs the GGUF on its
# own engine (its importer of the folder, convert_llama4.go, takes more
# than this machine's 24 GiB for one layer's expert stack).
# FAMILY=granitehybrid: a GraniteMoeHybridForCausalLM of
# granite-4.0-h-tiny's layers (testdata/configs/granite_4_0_h_tiny: hidden
# 1536; Mamba-2 mixers of 48 heads of 64, state 128, 1 group, conv 4;
# attention of 12 heads and 4 KV heads, no positional embedding
# (position_embedding_type nope, as the releases); 64 experts of 512, top
# 6, and a shared MLP of 1024 on every layer; vocab 100352, tied head;
# representative Granite 4.0 multipliers: embedding 12, attention
# 0.0078125, residual 0.22, logits 6) in LAYERS layers (default 10, 3.7 GB
# bf16) whose kinds follow the release's pattern cut to LAYERS (attention
# at layer 5 of every 10, the last layer when LAYERS < 6; the rest Mamba),
# DIR /tmp/tputool-granitehybrid-bench; ollama's importer does not read
# that class, and llama.cpp runs the GGUF as its granitehybrid.
# FAMILY=nemotronh: a NemotronHForCausalLM of Nemotron 3 Nano 30B-A3B's
# layers (testdata/configs/nemotron_3_nano_30b_a3b: hidden 2688; Mamba-2
# mixers of 64 heads of 64 in 8 groups, state 128, conv 4; attention of 32
# heads and 2 KV heads of 128 without a positional embedding; MoE layers
# of 128 relu² experts of 1856, top 6 by sigmoid with the correction bias,
# renormalized, scale 2.5, and a shared expert of 3712; vocab 131072,
# untied head) in LAYERS layers (default 6, 6.9 GB bf16) whose kinds are
# the release's hybrid_override_pattern cut to LAYERS ("MEMEM*" for 6:
# Mamba, MoE, Mamba, MoE, Mamba, attention; fewer have no attention layer,
# which ollama's engine runs and llama.cpp's own runner does not), the
# experts one tensor each as the release stores them, DIR
# /tmp/tputool-nemotronh-bench. scripts/export-gguf writes llama.cpp's
# nemotron_h_moe, which ollama runs on its own engine (a port of
# llama.cpp's graph on the same ggml kernels; its importer reads the
# folder too, but stores the matrices in f16); ollama runs NemotronH one
# sequence at a time whatever OLLAMA_NUM_PARALLEL says, so MODE=serve
# measures its one stream against tputool's batch.
# FAMILY=lfm2moe: an Lfm2MoeForCausalLM of LFM2-8B-A1B's layers
# (testdata/configs/lfm2_8b_a1b: hidden 2048; short convolutions of kernel
# 3; attention of 32 heads and 8 KV heads of 64 with q/k norms; the first
# 2 layers a dense MLP of 7168, then 32 experts of 1792, top 4 by sigmoid
# with the expert bias, renormalized; vocab 65536, tied head) in LAYERS
# layers (default 8, 4.9 GB bf16) whose kinds are the release's
# layer_types cut to LAYERS, the experts one tensor each as the release
# stores them, DIR /tmp/tputool-lfm2moe-bench. scripts/export-gguf writes
# llama.cpp's lfm2moe, which ollama runs on its own engine (a port of
# llama.cpp's graph on the same ggml kernels). FAMILY=lfm2: the dense
# LFM2-1.2B whole (testdata/configs/lfm2_1_2b: 16 layers, 10 short
# convolutions and 6 attention layers, the MLP 8192; 1.17B parameters,
# 2.3 GB bf16), DIR /tmp/tputool-lfm2-bench, written as llama.cpp's lfm2,
# which ollama runs on its own engine. FAMILY=phimoe: a Phi-3.5-MoE
# (PhiMoEForCausalLM, testdata/configs/phi_3_5_moe: hidden 4096, 32 heads
# and 8 KV heads of 128 with biases, LayerNorms, LongRoPE over 4096
# original positions; 16 experts of 6400, two chosen by sparsemixer;
# vocab 32064, untied head with a bias) in LAYERS layers (default 2, 5.5
# GB bf16), the experts one tensor each as the release stores them, DIR
# /tmp/tputool-phimoe-bench, written as llama.cpp's phimoe (which routes
# by the softmax's top 2 and normalizes by RMSNorm plus the biases:
# the same work a token, other numbers). FAMILY=phi3: Phi-4-mini's shape
# whole (Phi3ForCausalLM: hidden 3072, 32 layers, 24 heads and 8 KV heads
# of 128, a rotary of 96 dims with LongRoPE, fused qkv_proj and
# gate_up_proj of 8192, vocab 200064, tied; 3.84B parameters, 7.7 GB
# bf16; the factor lists are ones), DIR /tmp/tputool-phi3-bench, written
# as llama.cpp's phi3. Both run on llama.cpp's own graph (ollama has no
# engine of its own for them). FAMILY=afmoe: an AfmoeForCausalLM of Trinity
# Mini's shape (hidden 2048; 32 heads and 4 KV heads of 128 with q/k norms
# and the output gate; three layers within a window of 2048 then one
# attending in full without the rotary; the first 2 layers a dense MLP of
# 6144, then 128 experts of 1024, top 8 by sigmoid with the expert bias,
# renormalized, times 2.826, and one shared; mup; vocab 200192, untied;
# 26.0B parameters, 3.0B active, at 32 layers, as the model card counts
# them; the sizes are not transcribed from the release's config) in LAYERS
# layers (default
# 4: two dense, two sparse, 5.3 GB bf16), the experts one tensor each as
# the release stores them, DIR /tmp/tputool-afmoe-bench, written as
# llama.cpp's afmoe, which runs on llama.cpp's own graph.
# FAMILY=granitemoe: a GraniteMoeForCausalLM of granite-3.1-3b-a800m's
# layer (hidden 1536, 24 heads and 8 KV heads of 64; 40 experts of 512,
# top 8, softmaxed among themselves; the multipliers 12, 1/64, 0.22 and
# 6; vocab 49155, tied) in LAYERS layers (default 8, 1.7 GB bf16), the
# experts in two stacks (the layout of GraniteMoe's input_linear and
# output_linear, under the names tputool reads them by), DIR
# /tmp/tputool-granitemoe-bench, written as llama.cpp's granitemoe.
# FAMILY=granitemoeshared: that layer as a GraniteMoeSharedForCausalLM with
# a shared MLP of 1024 beside the experts (the sizes are not a release's),
# DIR /tmp/tputool-granitemoeshared-bench, written as llama.cpp's
# granitemoe with its shexp tensors. Otherwise
# scripts/export-gguf
# writes the same weights as GGUF for `ollama create`; Q8=1 also creates
# ollama's q8_0 quantisation and runs tputool with --quantize int8, and
# Q4=1 ollama's q4_K_M against tputool's --quantize int4 (and, with
# Q4ACT=1, against --quantize int4 --activations int8 too). The quantized
# tags are created once per DIR (ollama's server keeps the quantizer's
# memory, gigabytes for a large layer); OLLAMA_MAX_LOADED_MODELS=1 keeps
# one model in ollama's memory at a time.
#
#   OLLAMA=/path/to/ollama scripts/bench-moe-vs-llamacpp.sh
#
# Build ollama v0.24.0 with CGO_CFLAGS="-O3 -march=native"
# CGO_CXXFLAGS="-O3 -march=native" go build (without them its ggml is
# built for baseline x86-64, 4x slower). DIR (default
# /tmp/tputool-moe-bench) keeps the model between runs. Env: ROUNDS (3),
# GEN (64 decode tokens), EXPERTS (tputool --experts, default graph).
#
# RUNNER=llamacpp (MODE=decode) times llama.cpp's own graph through
# ollama's llama.cpp runner on the GGUF (`$OLLAMA runner`, loaded over
# its HTTP API as scripts/logprobs-vs-llamacpp.sh does; with Q8=1 or Q4=1
# also on the q8_0 or q4_K_M blob ollama's server quantizes, one runner
# a file on ports PORT+1, PORT+2, ...) instead of ollama's server, for a
# family whose ollama engine cannot take
# export-gguf's file: FAMILY=gemma3n needs it (ollama's gemma3n engine
# reads SentencePiece vocabularies only). FAMILY=gemma3n: a
# Gemma3nForConditionalGeneration of the releases' layout at hidden 768
# (25 layers: llama.cpp's graph fixes KV sharing from layer 20 and the
# first 10 MLPs sparse; 6 heads of 128 over 2, MLPs of 3072, LAuReL 64,
# per-layer inputs of 256, vocab 32768 for both tables), bf16.
# FAMILY=bamba: a BambaForCausalLM of Bamba-9B's layer at hidden 1024 (8
# layers, attention at 3 with 8 heads of 128 over 2 rotating half of each;
# Mamba-2 of 32 heads of 64, state 128, one group, elsewhere; MLPs of
# 4096; vocab 32768, untied), bf16, run by llama.cpp as its
# granitehybrid. FAMILY=ling: a BailingMoeV2ForCausalLM of
# Ling-mini-2.0's layer (hidden 2048, 16 heads of 128 over 4 with q/k
# norms rotating half of each head, 256 experts of 512 of which 8 are
# chosen, a shared expert, a dense first layer of 5120; LAYERS=4 layers;
# one expert group;
# vocab 32768, untied), bf16. FAMILY=smallthinker: a
# SmallThinkerForCausalLM of SmallThinker-4BA0.6B's layer (hidden 1536,
# 12 heads of 128 over 2, 32 ReGLU experts of 768 of which 4 are chosen
# by the sigmoid router on the layer's input; LAYERS=8 layers, the rotary
# everywhere, no windows; vocab 32768, tied), bf16. FAMILY=pythia: a
# GPTNeoXForCausalLM of Pythia-410M's shape (hidden 1024, 24 layers of 16
# heads, a quarter of each rotated, the parallel residual, vocab 50304,
# untied; hidden_act gelu_new, the tanh GELU llama.cpp computes, where
# Pythia's gelu is erf's), bf16. FAMILY=dbrx: a DbrxForCausalLM of
# DBRX's layer scaled to hidden 1024 (8 heads of 128 over 2 — DBRX's 48
# over 8 —, clip_qkv 8, rope_theta 500000; 16 SiLU experts of 1792 —
# DBRX's 10752 at its ratio to the width — of which 4 are chosen;
# LAYERS=8 layers; vocab 32768, untied), bf16, stored as DBRX's releases
# store it (w1, v1, w2 three to a layer). FAMILY=deepseekv1: a
# DeepseekForCausalLM of deepseek-moe-16b's layer (hidden 2048, 16 heads
# of 128, 64 experts of 1408 of which 6 are chosen, undivided, 2 shared
# experts, a dense first layer of 10944; LAYERS=4 layers; vocab 32768,
# untied), bf16. FAMILY=arctic: an ArcticForCausalLM of Arctic's layer
# scaled to hidden 1024 (16 heads of 64 over 2; 128 experts of 704 —
# Arctic's 4864 at its ratio to the width — of which 2 are chosen,
# beside the attention, and the residual MLP of the hidden width;
# LAYERS=4 layers; vocab 32000, untied), bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
OLLAMA="${OLLAMA:?set OLLAMA to an ollama v0.24.0 binary}"
FAMILY="${FAMILY:-qwen3moe}"
case "$FAMILY" in
qwen3moe) DIR="${DIR:-/tmp/tputool-moe-bench}" ;;
mixtral) DIR="${DIR:-/tmp/tputool-mixtral-bench}" ;;
deepseek) DIR="${DIR:-/tmp/tputool-deepseek-bench}" ;;
deepseek2) DIR="${DIR:-/tmp/tputool-deepseek2-bench}" ;;
glm) DIR="${DIR:-/tmp/tputool-glm-bench}" ;;
minimax) DIR="${DIR:-/tmp/tputool-minimax-bench}" ;;
olmoe) DIR="${DIR:-/tmp/tputool-olmoe-bench}" ;;
ernie) DIR="${DIR:-/tmp/tputool-ernie-bench}" ;;
dots) DIR="${DIR:-/tmp/tputool-dots-bench}" ;;
llama4) DIR="${DIR:-/tmp/tputool-llama4-bench}" ;;
granitehybrid) DIR="${DIR:-/tmp/tputool-granitehybrid-bench}" ;;
nemotronh) DIR="${DIR:-/tmp/tputool-nemotronh-bench}" ;;
lfm2moe) DIR="${DIR:-/tmp/tputool-lfm2moe-bench}" ;;
lfm2) DIR="${DIR:-/tmp/tputool-lfm2-bench}" ;;
phimoe) DIR="${DIR:-/tmp/tputool-phimoe-bench}" ;;
phi3) DIR="${DIR:-/tmp/tputool-phi3-bench}" ;;
afmoe) DIR="${DIR:-/tmp/tputool-afmoe-bench}" ;;
granitemoe) DIR="${DIR:-/tmp/tputool-granitemoe-bench}" ;;
granitemoeshared) DIR="${DIR:-/tmp/tputool-granitemoeshared-bench}" ;;
jamba) DIR="${DIR:-/tmp/tputool-jamba-bench}" ;;
falconmamba) DIR="${DIR:-/tmp/tputool-falconmamba-bench}" ;;
gemma3n) DIR="${DIR:-/tmp/tputool-gemma3n-bench}" ;;
bamba) DIR="${DIR:-/tmp/tputool-bamba-bench}" ;;
ling) DIR="${DIR:-/tmp/tputool-ling-bench}" ;;
smallthinker) DIR="${DIR:-/tmp/tputool-smallthinker-bench}" ;;
pythia) DIR="${DIR:-/tmp/tputool-pythia-bench}" ;;
dbrx) DIR="${DIR:-/tmp/tputool-dbrx-bench}" ;;
deepseekv1) DIR="${DIR:-/tmp/tputool-deepseekv1-bench}" ;;
arctic) DIR="${DIR:-/tmp/tputool-arctic-bench}" ;;
*) echo "FAMILY must be qwen3moe, mixtral, deepseek, deepseek2, glm, minimax, olmoe, ernie, dots, llama4, granitehybrid, nemotronh, lfm2moe, lfm2, phimoe, phi3, afmoe, granitemoe, granitemoeshared, jamba, falconmamba, gemma3n, bamba, ling, smallthinker, pythia, dbrx, deepseekv1 or arctic" >&2; exit 2 ;;
esac
ROUNDS="${ROUNDS:-3}"
GEN="${GEN:-64}"
EXPERTS="${EXPERTS:-graph}"
PORT="${PORT:-11500}"
mkdir -p "$DIR/hf"
if [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = deepseek ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
 "hidden_size": 2048, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 16,
 "num_key_value_heads": 16, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
 "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 11264, "moe_intermediate_size": 1408,
 "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "n_group": 1, "topk_group": 1,
 "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.446,
 "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_theta": 50000, "rope_interleave": true,
 "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
 "vocab_size": 163840, "max_position_embeddings": 163840, "rms_norm_eps": 1e-05,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 163840
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = glm ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
 "hidden_size": 4096, "num_hidden_layers": ${LAYERS:-2}, "num_attention_heads": 96,
 "num_key_value_heads": 8, "head_dim": 128, "partial_rotary_factor": 0.5, "attention_bias": true,
 "use_qk_norm": false, "intermediate_size": 10944, "moe_intermediate_size": 1408,
 "n_routed_experts": 128, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
 "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0,
 "vocab_size": 151552, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 1000000,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 151552
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = minimax ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
 "hidden_size": 3072, "num_hidden_layers": ${LAYERS:-1}, "num_attention_heads": 48,
 "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64, "intermediate_size": 1536,
 "num_local_experts": 256, "num_experts_per_tok": 8, "scoring_func": "sigmoid", "use_routing_bias": true,
 "use_qk_norm": true, "qk_norm_type": "per_layer", "shared_intermediate_size": 0,
 "vocab_size": 200064, "max_position_embeddings": 196608, "rms_norm_eps": 1e-06, "rope_theta": 5000000,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 200064
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = olmoe ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
 "hidden_size": 2048, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 16,
 "num_key_value_heads": 16, "intermediate_size": 1024, "num_experts": 64, "num_experts_per_tok": 8,
 "norm_topk_prob": false, "clip_qkv": null, "vocab_size": 50304, "max_position_embeddings": 4096,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu",
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 50304
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = mixtral ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
 "hidden_size": 4096, "num_hidden_layers": ${LAYERS:-2}, "num_attention_heads": 32,
 "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8,
 "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
 "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32000
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = deepseek2 ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
 "hidden_size": 2048, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 16,
 "num_key_value_heads": 16, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
 "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
 "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "n_group": 1, "topk_group": 1,
 "first_k_dense_replace": 1, "moe_layer_freq": 1, "norm_topk_prob": false, "routed_scaling_factor": 1.0,
 "scoring_func": "softmax", "topk_method": "greedy", "rope_theta": 10000,
 "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
  "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
 "vocab_size": 102400, "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 102400
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = ernie ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
 "hidden_size": 2560, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 20, "num_key_value_heads": 4,
 "head_dim": 128, "intermediate_size": 12288, "moe_intermediate_size": 1536, "moe_num_experts": 64, "moe_k": 6,
 "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1, "moe_layer_interval": 1,
 "moe_norm_min": 1e-12, "use_bias": false, "rope_theta": 500000, "vocab_size": 103424,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "tie_word_embeddings": true, "hidden_act": "silu",
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 103424
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = dots ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Dots1ForCausalLM"], "model_type": "dots1",
 "hidden_size": 4096, "num_hidden_layers": ${LAYERS:-2}, "num_attention_heads": 32, "num_key_value_heads": 32,
 "head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 128,
 "num_experts_per_tok": 6, "n_shared_experts": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
 "norm_topk_prob": true, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
 "rope_theta": 10000000, "sliding_window": null, "vocab_size": 152064, "max_position_embeddings": 32768,
 "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 152064
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = llama4 ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": false,
 "torch_dtype": "bfloat16",
 "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": ${LAYERS:-2},
  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
  "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
  "use_qk_norm": true, "attention_chunk_size": 8192, "attn_temperature_tuning": true, "floor_scale": 8192,
  "attn_scale": 0.1, "no_rope_layers": [], "vocab_size": 32000, "max_position_embeddings": 10485760,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "rope_scaling": null, "torch_dtype": "bfloat16"},
 "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 0,
  "intermediate_size": 5632, "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "rope_theta": 10000,
  "norm_eps": 1e-05, "pixel_shuffle_ratio": 0.5}}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32000
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = granitehybrid ]; then
  types=$(python3 -c 'import json,sys; n = int(sys.argv[1])
print(json.dumps(["attention" if i % 10 == 5 or (n < 6 and i == n - 1) else "mamba" for i in range(n)]))' "${LAYERS:-10}")
  cat > "$DIR/config.json" <<JSON
{"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
 "hidden_size": 1536, "num_hidden_layers": ${LAYERS:-10}, "layer_types": $types,
 "num_attention_heads": 12, "num_key_value_heads": 4, "position_embedding_type": "nope",
 "intermediate_size": 512, "num_local_experts": 64, "num_experts_per_tok": 6, "shared_intermediate_size": 1024,
 "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
 "mamba_expand": 2, "mamba_chunk_size": 256, "mamba_conv_bias": true, "mamba_proj_bias": false,
 "embedding_multiplier": 12.0, "attention_multiplier": 0.0078125, "residual_multiplier": 0.22,
 "logits_scaling": 6.0, "vocab_size": 100352, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
 "rope_theta": 10000, "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 100352
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = nemotronh ]; then
  pattern=$(python3 -c 'import json,sys; n = int(sys.argv[1])
p = json.load(open("testdata/configs/nemotron_3_nano_30b_a3b/config.json"))["hybrid_override_pattern"]
print(p[:n]) if 0 < n <= len(p) else sys.exit("LAYERS must be in [1, %d]" % len(p))' "${LAYERS:-6}")
  cat > "$DIR/config.json" <<JSON
{"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
 "hidden_size": 2688, "num_hidden_layers": ${LAYERS:-6}, "hybrid_override_pattern": "$pattern",
 "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "attention_bias": false,
 "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
 "chunk_size": 128, "use_conv_bias": true, "use_bias": false, "mamba_hidden_act": "silu",
 "intermediate_size": 1856, "mlp_hidden_act": "relu2", "mlp_bias": false,
 "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "n_shared_experts": 1,
 "moe_shared_expert_intermediate_size": 3712, "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1,
 "norm_topk_prob": true, "vocab_size": 131072, "max_position_embeddings": 262144, "layer_norm_epsilon": 1e-05,
 "rope_theta": 10000, "sliding_window": null, "residual_in_fp32": false, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 131072
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = lfm2moe ]; then
  python3 -c 'import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
c = json.load(open("testdata/configs/lfm2_8b_a1b/config.json"))
if not 0 < n <= len(c["layer_types"]):
    sys.exit("LAYERS must be in [1, %d]" % len(c["layer_types"]))
c["num_hidden_layers"], c["layer_types"] = n, c["layer_types"][:n]
json.dump(c, open(out, "w"))' "${LAYERS:-8}" "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 65536
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = phimoe ]; then
  python3 -c 'import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
c = json.load(open("testdata/configs/phi_3_5_moe/config.json"))
if not 0 < n <= 32:
    sys.exit("LAYERS must be in [1, 32]")
c["num_hidden_layers"] = n
json.dump(c, open(out, "w"))' "${LAYERS:-2}" "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32064
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = phi3 ]; then
  python3 -c 'import json, sys
ones = [1.0] * 48
json.dump({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 200064, "hidden_size": 3072,
  "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "partial_rotary_factor": 0.75, "max_position_embeddings": 131072,
  "original_max_position_embeddings": 4096, "sliding_window": 262144, "tie_word_embeddings": True, "hidden_act": "silu",
  "rope_scaling": {"type": "longrope", "short_factor": ones, "long_factor": ones},
  "bos_token_id": 199999, "eos_token_id": 199999, "torch_dtype": "bfloat16"}, open(sys.argv[1], "w"))' "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 200064
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = afmoe ]; then
  python3 -c 'import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
if n < 1:
    sys.exit("LAYERS must be positive")
json.dump({"architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "vocab_size": 200192, "hidden_size": 2048,
  "intermediate_size": 6144, "moe_intermediate_size": 1024, "num_hidden_layers": n, "num_dense_layers": 2,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
  "num_shared_experts": 1, "route_scale": 2.826, "global_attn_every_n_layers": 4, "sliding_window": 2048,
  "mup_enabled": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 3,
  "torch_dtype": "bfloat16"}, open(out, "w"))' "${LAYERS:-4}" "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 200192
elif [ ! -f "$DIR/hf/config.json" ] && { [ "$FAMILY" = granitemoe ] || [ "$FAMILY" = granitemoeshared ]; }; then
  arch=GraniteMoeForCausalLM type=granitemoe shared=0
  [ "$FAMILY" = granitemoeshared ] && arch=GraniteMoeSharedForCausalLM type=granitemoeshared shared=1024
  cat > "$DIR/config.json" <<JSON
{"architectures": ["$arch"], "model_type": "$type", "shared_intermediate_size": $shared,
 "hidden_size": 1536, "num_hidden_layers": ${LAYERS:-8}, "num_attention_heads": 24,
 "num_key_value_heads": 8, "intermediate_size": 512, "num_local_experts": 40, "num_experts_per_tok": 8,
 "embedding_multiplier": 12.0, "attention_multiplier": 0.015625, "residual_multiplier": 0.22, "logits_scaling": 6.0,
 "vocab_size": 49155, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 49155
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = jamba ]; then
  # Jamba-1.5-Mini's pattern at hidden 1024: attention on one layer in 8
  # (at 4), 16 experts of 2048 (top 2) on every second layer, Mamba-1
  # elsewhere (state 16, rank 64).
  cat > "$DIR/config.json" <<JSON
{"architectures": ["JambaForCausalLM"], "model_type": "jamba", "vocab_size": 65536, "hidden_size": 1024,
 "intermediate_size": 2048, "num_hidden_layers": ${LAYERS:-8}, "num_attention_heads": 8, "num_key_value_heads": 2,
 "hidden_act": "silu", "rms_norm_eps": 1e-06, "num_experts": 16, "num_experts_per_tok": 2,
 "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4,
 "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 64, "mamba_conv_bias": true,
 "mamba_proj_bias": false, "tie_word_embeddings": false, "max_position_embeddings": 4096,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 65536
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = falconmamba ]; then
  # FalconMamba-7B's mixer at hidden 1024 (state 16, rank 64), 8 layers.
  cat > "$DIR/config.json" <<JSON
{"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "vocab_size": 65024, "hidden_size": 1024,
 "num_hidden_layers": ${LAYERS:-8}, "state_size": 16, "expand": 2, "conv_kernel": 4, "time_step_rank": 64,
 "use_bias": false, "use_conv_bias": true, "hidden_act": "silu", "layer_norm_epsilon": 1e-05, "mixer_rms_eps": 1e-05,
 "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 11, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 65024
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = gemma3n ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text",
 "vocab_size": 32768, "vocab_size_per_layer_input": 32768, "hidden_size": 768, "hidden_size_per_layer_input": 256,
 "intermediate_size": 3072, "num_hidden_layers": 25, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 128,
 "sliding_window": 512, "num_kv_shared_layers": 5, "altup_num_inputs": 4, "laurel_rank": 64,
 "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 4096, "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "bfloat16"}}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = bamba ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["BambaForCausalLM"], "model_type": "bamba", "vocab_size": 32768, "hidden_size": 1024,
 "intermediate_size": 4096, "num_hidden_layers": ${LAYERS:-8}, "num_attention_heads": 8, "num_key_value_heads": 2,
 "attn_layer_indices": [3], "mamba_n_heads": 32, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 128,
 "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256, "hidden_act": "silu", "rms_norm_eps": 1e-05,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "max_position_embeddings": 4096,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = ling ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe_v2", "vocab_size": 32768,
 "hidden_size": 2048, "intermediate_size": 5120, "moe_intermediate_size": 512, "num_hidden_layers": ${LAYERS:-4},
 "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128, "partial_rotary_factor": 0.5,
 "use_qkv_bias": false, "use_bias": false, "use_qk_norm": true, "num_experts": 256, "num_shared_experts": 1,
 "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5, "score_function": "sigmoid",
 "norm_topk_prob": true, "moe_shared_expert_intermediate_size": 512, "first_k_dense_replace": 1,
 "num_nextn_predict_layers": 0, "rope_theta": 600000, "rms_norm_eps": 1e-06, "max_position_embeddings": 4096,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = smallthinker ]; then
  layers=${LAYERS:-8}
  ones=$(printf '1,%.0s' $(seq "$layers")) zeros=$(printf '0,%.0s' $(seq "$layers"))
  cat > "$DIR/config.json" <<JSON
{"architectures": ["SmallThinkerForCausalLM"], "model_type": "smallthinker", "vocab_size": 32768, "hidden_size": 1536,
 "num_hidden_layers": $layers, "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
 "moe_num_primary_experts": 32, "moe_num_active_primary_experts": 4, "moe_ffn_hidden_size": 768,
 "moe_primary_router_apply_softmax": false, "rope_layout": [${ones%,}], "sliding_window_layout": [${zeros%,}],
 "sliding_window_size": 4096, "rope_theta": 1500000, "rms_norm_eps": 1e-06, "max_position_embeddings": 4096,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = pythia ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 1024,
 "intermediate_size": 4096, "num_hidden_layers": ${LAYERS:-24}, "num_attention_heads": 16, "rotary_pct": 0.25,
 "rotary_emb_base": 10000, "layer_norm_eps": 1e-05, "use_parallel_residual": true, "tie_word_embeddings": false,
 "hidden_act": "gelu_new", "max_position_embeddings": 2048, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 50304
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = dbrx ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "vocab_size": 32768, "d_model": 1024, "n_heads": 8,
 "n_layers": ${LAYERS:-8}, "max_seq_len": 4096, "attn_config": {"clip_qkv": 8, "kv_n_heads": 2, "rope_theta": 500000},
 "ffn_config": {"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 1792, "moe_num_experts": 16, "moe_top_k": 4,
 "moe_normalize_expert_weights": 1}, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = deepseekv1 ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "vocab_size": 32768, "hidden_size": 2048,
 "intermediate_size": 10944, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 16, "num_key_value_heads": 16,
 "n_routed_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "n_shared_experts": 2, "moe_layer_freq": 1,
 "first_k_dense_replace": 1, "norm_topk_prob": false, "scoring_func": "softmax", "hidden_act": "silu", "rms_norm_eps": 1e-06,
 "rope_theta": 10000, "max_position_embeddings": 4096, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32768
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = arctic ]; then
  cat > "$DIR/config.json" <<JSON
{"architectures": ["ArcticForCausalLM"], "model_type": "arctic", "vocab_size": 32000, "hidden_size": 1024,
 "intermediate_size": 704, "num_hidden_layers": ${LAYERS:-4}, "num_attention_heads": 16, "num_key_value_heads": 2,
 "num_local_experts": 128, "num_experts_per_tok": 2, "moe_layer_frequency": 1, "parallel_attn_mlp_res": true,
 "use_residual": true, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000, "max_position_embeddings": 4096,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -experts-apart -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 32000
elif [ ! -f "$DIR/hf/config.json" ] && [ "$FAMILY" = lfm2 ]; then
  cp testdata/configs/lfm2_1_2b/config.json "$DIR/config.json"
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 65536
elif [ ! -f "$DIR/hf/config.json" ]; then
  cat > "$DIR/config.json" <<'JSON'
{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
 "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
 "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 3072,
 "moe_intermediate_size": 512, "num_experts": 64, "num_experts_per_tok": 8,
 "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
 "vocab_size": 151936, "max_position_embeddings": 4096,
 "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "bos_token_id": 270, "eos_token_id": 270,
 "torch_dtype": "bfloat16"}
JSON
  go run ./scripts/gen-llm-checkpoint -config "$DIR/config.json" -dtype BF16 -o "$DIR/hf"
  python3 scripts/pad-tokenizer.py "$DIR/hf/tokenizer.json" 151936 # the model's vocabulary, as the GGUF pads it
fi
FROM="$DIR/model.gguf"
if [ "$FAMILY" = deepseek ]; then
  FROM="$DIR/hf"
else
  [ -f "$DIR/model.gguf" ] || go run ./scripts/export-gguf -m "$DIR/hf" -o "$DIR/model.gguf"
fi
go build -o "$DIR/tputool" .

MODE="${MODE:-decode}"
LEVELS="${LEVELS:-8,32,64}"
parallel=1
if [ "$MODE" = serve ]; then
  parallel=$(tr , '\n' <<< "$LEVELS" | sort -n | tail -1)
fi
PROMPT_LEN="${PROMPT_LEN:-512}"
CTX=512
[ "$MODE" = prefill ] && CTX=2048
export OLLAMA_MODELS="$DIR/ollama-models" OLLAMA_HOST="127.0.0.1:$PORT" OLLAMA_NUM_PARALLEL=$parallel OLLAMA_KEEP_ALIVE=1h OLLAMA_CONTEXT_LENGTH=$CTX
RUNNER="${RUNNER:-server}"
TSERVER=""
if [ "$RUNNER" = llamacpp ]; then
  [ "$MODE" = decode ] && [ -f "$FROM" ] ||
    { echo "RUNNER=llamacpp times decode on a GGUF only (MODE=decode)" >&2; exit 2; }
  files=("$FROM")
  tags=(llamacpp-bf16)
  quant=("")
  if [ "${Q8:-0}" = 1 ] || [ "${Q4:-0}" = 1 ]; then
    # ollama's server quantizes the GGUF (its llama.cpp quantizer, no
    # model loaded); each runner then reads the quantized blob.
    "$OLLAMA" serve > "$DIR/ollama.log" 2>&1 &
    qserver=$!
    for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
    printf 'FROM %s\n' "$FROM" > "$DIR/Modelfile"
    for q in ${Q8:+q8_0} ${Q4:+q4_K_M}; do
      [ "$q" = q8_0 ] && [ "${Q8:-0}" != 1 ] && continue
      [ "$q" = q4_K_M ] && [ "${Q4:-0}" != 1 ] && continue
      "$OLLAMA" show "moe-$q" > /dev/null 2>&1 ||
        "$OLLAMA" create "moe-$q" --quantize "$q" -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; kill $qserver; exit 1; }
      files+=("$("$OLLAMA" show --modelfile "moe-$q" | sed -n 's/^FROM //p' | head -1)")
      tags+=("llamacpp-$q")
      if [ "$q" = q8_0 ]; then quant+=(int8); else quant+=(int4); fi
    done
    kill $qserver 2>/dev/null || true
    wait $qserver 2>/dev/null || true
  fi
  # One runner a file, each on its own port (PORT+1, PORT+2, ...).
  declare -A rport
  pids=()
  trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
  for i in "${!files[@]}"; do
    rp=$((PORT + 1 + i))
    rport[${tags[$i]}]=$rp
    "$OLLAMA" runner --model "${files[$i]}" --port "$rp" > "$DIR/runner-$i.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$rp/health" > /dev/null && break; sleep 0.2; done
    # Operation 2 is llm.LoadOperationCommit; FlashAttention 0 disabled.
    curl -sf "http://127.0.0.1:$rp/load" -d "{\"Operation\": 2, \"BatchSize\": 512, \"KvSize\": $CTX,
      \"Parallel\": 1, \"NumThreads\": $(nproc), \"FlashAttention\": 0}" > /dev/null
    for _ in $(seq 600); do # status 0: llm.ServerStatusReady
      curl -sf "http://127.0.0.1:$rp/health" | grep -q '"status":0' && break
      sleep 0.2
    done
  done
else
"$OLLAMA" serve > "$DIR/ollama.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER $TSERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://$OLLAMA_HOST/api/version" > /dev/null && break; sleep 0.2; done
printf 'FROM %s\n' "$FROM" > "$DIR/Modelfile"
"$OLLAMA" create moe-bf16 -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
tags=(moe-bf16)
quant=("")
if [ "${Q8:-0}" = 1 ]; then
  "$OLLAMA" show moe-q8 > /dev/null 2>&1 || # quantized once per DIR: ollama's server keeps the quantizer's memory
    "$OLLAMA" create moe-q8 --quantize q8_0 -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
  tags+=(moe-q8)
  quant+=(int8)
fi
if [ "${Q4:-0}" = 1 ]; then
  "$OLLAMA" show moe-q4 > /dev/null 2>&1 || # quantized once per DIR: ollama's server keeps the quantizer's memory
    "$OLLAMA" create moe-q4 --quantize q4_K_M -f "$DIR/Modelfile" > /dev/null 2>> "$DIR/create.log" || { tail -c 2000 "$DIR/create.log" >&2; exit 1; }
  tags+=(moe-q4)
  quant+=(int4)
  if [ "${Q4ACT:-0}" = 1 ]; then
    tags+=(moe-q4)
    quant+=("int4 --activations int8")
  fi
fi
fi
PROMPT="The quick brown fox jumps over the lazy dog while the cat sleeps"

REPS=$((PROMPT_LEN / 9))
ollama_tok_s() { # median decode (or prompt) tok/s of 3 generations
  for _ in 1 2 3; do
    if [ "$MODE" = prefill ]; then
      prompt="$RANDOM$RANDOM $(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * $REPS))")"
      npred=1
    else
      prompt="$PROMPT"
      npred=$GEN
    fi
    if [ "$RUNNER" = llamacpp ]; then # the runner streams; its last line holds the counts
      curl -sf "http://127.0.0.1:${rport[$1]}/completion" -d "{\"prompt\":\"$prompt\",
        \"options\":{\"num_predict\":$npred,\"temperature\":1,\"top_k\":40,\"top_p\":1,\"typical_p\":1,\"min_p\":0,\"seed\":1,\"repeat_penalty\":1,\"num_ctx\":$CTX}}" |
        python3 -c 'import json,sys
r = [json.loads(l) for l in sys.stdin if l.strip()][-1]
print(r["eval_count"]/r["eval_duration"]*1e9) if r.get("eval_count") else sys.exit("llama.cpp runner: %s" % r)'
      continue
    fi
    curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"$1\",\"prompt\":\"$prompt\",\"raw\":true,\"stream\":false,
      \"options\":{\"num_predict\":$npred,\"temperature\":1,\"top_k\":40,\"seed\":1,\"num_thread\":$(nproc),\"num_ctx\":$CTX}}" |
      MODE="$MODE" python3 -c 'import json,os,sys; r=json.load(sys.stdin); k="prompt_eval" if os.environ["MODE"]=="prefill" else "eval"; print(r[k+"_count"]/r[k+"_duration"]*1e9) if k+"_count" in r else sys.exit("ollama: %s" % r)'
  done | sort -g | sed -n 2p
}
tputool_tok_s() { # median decode (or prefill) tok/s of --repeat 3
  local plen=16 glen="$GEN" key=decode_tok_s
  if [ "$MODE" = prefill ]; then
    plen="$PROMPT_LEN" glen=1 key=prefill_tok_s
  fi
  "$DIR/tputool" bench --model "$DIR/hf" --batch 1 --prompt-len "$plen" --gen-len "$glen" --repeat 3 --warmup 1 \
    --mode compiled --experts "$EXPERTS" ${1:+--quantize $1} -o json | # $1 unquoted: "int4 --activations int8" is three words
    KEY="$key" python3 -c 'import json,os,sys; r=json.load(sys.stdin); print(r["rows"][0][os.environ["KEY"]]["median"])'
}
if [ "$MODE" = serve ]; then
  # shellcheck source=scripts/serve-vs-ollama.sh
  . scripts/serve-vs-ollama.sh
  serve_vs_ollama moe-bf16 --model "$DIR/hf" --port 0 --max-batch "$parallel" --experts "$EXPERTS"
  exit
fi
if [ "$MODE" = prefill ]; then
  # The phrase's repetitions that make about PROMPT_LEN of ollama's tokens.
  probe=$(curl -sf "http://$OLLAMA_HOST/api/generate" -d "{\"model\":\"${tags[0]}\",\"prompt\":\"$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 8))")\",\"raw\":true,\"stream\":false,\"options\":{\"num_predict\":1,\"num_ctx\":$CTX}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt_eval_count"])')
  REPS=$(( (PROMPT_LEN * 8 + probe / 2) / probe ))
  echo "ollama: 8 repetitions are $probe tokens; prompts of $REPS repetitions (about $PROMPT_LEN tokens)" >&2
fi
for i in "${!tags[@]}"; do ollama_tok_s "${tags[$i]}" > /dev/null; done # load and warm
echo "round  weights  tputool_tok_s  ollama_tok_s  ratio  load_avg"
for r in $(seq "$ROUNDS"); do
  for i in "${!tags[@]}"; do
    t=$(tputool_tok_s "${quant[$i]}")
    o=$(ollama_tok_s "${tags[$i]}")
    label=${tags[$i]}
    [[ "${quant[$i]}" == *activations* ]] && label="$label/act-int8"
    printf '%s  %s  %.1f  %.1f  %.2f  %s\n' "$r" "$label" "$t" "$o" "$(python3 -c "print($t/$o)")" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
