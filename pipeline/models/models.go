// Package models links every text architecture tputool runs into the
// pipeline/lm registry (each package registers itself under its
// config.json architectures[0] from init), as ollama's model/models does.
// Commands and inspect import it once instead of listing the packages.
package models

import (
	_ "github.com/tputool/tputool/pipeline/afmoe"        // AfmoeForCausalLM (Arcee's Trinity)
	_ "github.com/tputool/tputool/pipeline/apertus"      // ApertusForCausalLM
	_ "github.com/tputool/tputool/pipeline/arcee"        // ArceeForCausalLM (AFM)
	_ "github.com/tputool/tputool/pipeline/arctic"       // ArcticForCausalLM (Snowflake Arctic)
	_ "github.com/tputool/tputool/pipeline/baichuan"     // BaichuanForCausalLM (Baichuan 2, Baichuan-13B), BaiChuanForCausalLM (Baichuan-7B)
	_ "github.com/tputool/tputool/pipeline/bailing"      // BailingMoeV2ForCausalLM (Ling 2.0, Ring 2.0)
	_ "github.com/tputool/tputool/pipeline/bamba"        // BambaForCausalLM
	_ "github.com/tputool/tputool/pipeline/bert"         // BertModel, XLMRobertaModel, RobertaModel (encoders: embeddings)
	_ "github.com/tputool/tputool/pipeline/bitnet"       // BitNetForCausalLM (BitNet b1.58)
	_ "github.com/tputool/tputool/pipeline/bloom"        // BloomForCausalLM (BLOOM, BLOOMZ)
	_ "github.com/tputool/tputool/pipeline/cohere"       // CohereForCausalLM, Cohere2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/dbrx"         // DbrxForCausalLM
	_ "github.com/tputool/tputool/pipeline/deepseek"     // DeepseekV3ForCausalLM, DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM, DeepseekV2ForCausalLM, Glm4MoeLiteForCausalLM, Glm4MoeForCausalLM, Dots1ForCausalLM, AXK1ForCausalLM, SolarOpenForCausalLM
	_ "github.com/tputool/tputool/pipeline/deepseekv1"   // DeepseekForCausalLM (deepseek-moe-16b)
	_ "github.com/tputool/tputool/pipeline/ernie"        // Ernie4_5_MoeForCausalLM, Ernie4_5ForCausalLM, Ernie4_5_VLMoeForConditionalGeneration (text)
	_ "github.com/tputool/tputool/pipeline/exaone"       // ExaoneForCausalLM (EXAONE 3.0, 3.5, Deep)
	_ "github.com/tputool/tputool/pipeline/exaone4"      // Exaone4ForCausalLM, ExaoneMoeForCausalLM (K-EXAONE)
	_ "github.com/tputool/tputool/pipeline/falcon"       // FalconForCausalLM (Falcon-7B, 40B, 180B, Falcon 2)
	_ "github.com/tputool/tputool/pipeline/falconh1"     // FalconH1ForCausalLM
	_ "github.com/tputool/tputool/pipeline/gemma3"       // Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text), Gemma2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/gemma3n"      // Gemma3nForConditionalGeneration, Gemma3nForCausalLM (text)
	_ "github.com/tputool/tputool/pipeline/gemma4"       // Gemma4ForConditionalGeneration, Gemma4ForCausalLM (text)
	_ "github.com/tputool/tputool/pipeline/glm"          // GlmForCausalLM, Glm4ForCausalLM
	_ "github.com/tputool/tputool/pipeline/gpt2"         // GPT2LMHeadModel (GPT-2, DistilGPT2), GPTBigCodeForCausalLM (StarCoder 1)
	_ "github.com/tputool/tputool/pipeline/gptj"         // GPTJForCausalLM (GPT-J-6B)
	_ "github.com/tputool/tputool/pipeline/gptneo"       // GPTNeoForCausalLM (GPT-Neo)
	_ "github.com/tputool/tputool/pipeline/gptneox"      // GPTNeoXForCausalLM (Pythia, GPT-NeoX-20B)
	_ "github.com/tputool/tputool/pipeline/gptoss"       // GptOssForCausalLM
	_ "github.com/tputool/tputool/pipeline/granite"      // GraniteForCausalLM, GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM, GraniteMoeHybridForCausalLM
	_ "github.com/tputool/tputool/pipeline/helium"       // HeliumForCausalLM
	_ "github.com/tputool/tputool/pipeline/hunyuan"      // HunYuanDenseV1ForCausalLM, HunYuanMoEV1ForCausalLM
	_ "github.com/tputool/tputool/pipeline/internlm2"    // InternLM2ForCausalLM (InternLM 2, 2.5)
	_ "github.com/tputool/tputool/pipeline/internvl"     // InternVLForConditionalGeneration (its text model)
	_ "github.com/tputool/tputool/pipeline/jamba"        // JambaForCausalLM
	_ "github.com/tputool/tputool/pipeline/kimilinear"   // KimiLinearForCausalLM (Kimi Linear)
	_ "github.com/tputool/tputool/pipeline/lfm2"         // Lfm2ForCausalLM, Lfm2MoeForCausalLM, Lfm2VlForConditionalGeneration (text)
	_ "github.com/tputool/tputool/pipeline/llama"        // LlamaForCausalLM
	_ "github.com/tputool/tputool/pipeline/llama4"       // Llama4ForConditionalGeneration, Llama4ForCausalLM (text)
	_ "github.com/tputool/tputool/pipeline/longcat"      // LongcatFlashForCausalLM (LongCat-Flash)
	_ "github.com/tputool/tputool/pipeline/mamba"        // MambaForCausalLM, FalconMambaForCausalLM, Mamba2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/minicpm"      // MiniCPMForCausalLM (MiniCPM 1B, 2B, MiniCPM4)
	_ "github.com/tputool/tputool/pipeline/minimax"      // MiniMaxM2ForCausalLM, MiniMaxForCausalLM (MiniMax-Text-01, MiniMax-M1)
	_ "github.com/tputool/tputool/pipeline/mistral"      // MistralForCausalLM
	_ "github.com/tputool/tputool/pipeline/mistral3"     // Mistral3ForConditionalGeneration (text), Ministral3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/mixtral"      // MixtralForCausalLM
	_ "github.com/tputool/tputool/pipeline/modernbert"   // ModernBertModel, ModernBertForSequenceClassification (encoders)
	_ "github.com/tputool/tputool/pipeline/nemotron"     // NemotronForCausalLM (dense)
	_ "github.com/tputool/tputool/pipeline/nemotronh"    // NemotronHForCausalLM
	_ "github.com/tputool/tputool/pipeline/nomicbert"    // NomicBertModel (nomic-embed-text: an encoder)
	_ "github.com/tputool/tputool/pipeline/olmo"         // OlmoForCausalLM (OLMo 1)
	_ "github.com/tputool/tputool/pipeline/olmo2"        // Olmo2ForCausalLM, Olmo3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/olmoe"        // OlmoeForCausalLM, FlexOlmoForCausalLM
	_ "github.com/tputool/tputool/pipeline/opt"          // OPTForCausalLM (OPT, Galactica)
	_ "github.com/tputool/tputool/pipeline/phi"          // PhiForCausalLM (Phi-1, 1.5, 2)
	_ "github.com/tputool/tputool/pipeline/phi3"         // Phi3ForCausalLM, PhimoeForCausalLM (PhiMoEForCausalLM)
	_ "github.com/tputool/tputool/pipeline/qwen1"        // QWenLMHeadModel (Qwen 1)
	_ "github.com/tputool/tputool/pipeline/qwen2"        // Qwen2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/qwen2vl"      // Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, Qwen2.5-Omni (text)
	_ "github.com/tputool/tputool/pipeline/qwen3"        // Qwen3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/qwen35"       // Qwen3.5 and Qwen3.5-MoE (text models)
	_ "github.com/tputool/tputool/pipeline/qwen3moe"     // Qwen3MoeForCausalLM, Qwen2MoeForCausalLM
	_ "github.com/tputool/tputool/pipeline/qwen3vl"      // Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration, Qwen3OmniMoeForConditionalGeneration (text)
	_ "github.com/tputool/tputool/pipeline/seedoss"      // SeedOssForCausalLM
	_ "github.com/tputool/tputool/pipeline/smallthinker" // SmallThinkerForCausalLM
	_ "github.com/tputool/tputool/pipeline/smollm3"      // SmolLM3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/stablelm"     // StableLmForCausalLM
	_ "github.com/tputool/tputool/pipeline/starcoder2"   // Starcoder2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/zamba2"       // Zamba2ForCausalLM
)
