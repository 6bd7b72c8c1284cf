// Command export-gguf converts a Hugging Face Qwen3-MoE, Mixtral, OLMoE,
// GLM-4.5 (Glm4MoeForCausalLM), MiniMax-M2, DeepSeek-V2, ERNIE 4.5 MoE,
// dots.llm1, Granite (dense), GraniteMoe and GraniteMoeShared
// (GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM: llama.cpp's
// granitemoe, runGraniteMoE), Granite 4.0-H (GraniteMoeHybridForCausalLM:
// Mamba-2 and attention layers, written as llama.cpp's granitehybrid,
// runGraniteHybrid), NemotronH (NemotronHForCausalLM: Nemotron-H,
// Nemotron Nano 2 and Nemotron 3 Nano, Mamba-2, attention, relu² MLP and
// MoE layers, written as llama.cpp's nemotron_h or nemotron_h_moe,
// runNemotronH), LFM2 and LFM2-MoE (Lfm2ForCausalLM, Lfm2MoeForCausalLM:
// short-convolution and attention layers, written as llama.cpp's lfm2 or
// lfm2moe, runLFM2), Phi-3 and Phi-3.5-MoE (Phi3ForCausalLM, PhimoeForCausalLM:
// written as llama.cpp's phi3 or phimoe with LongRoPE's factors, runPhi3),
// AFMoE (AfmoeForCausalLM, Arcee's Trinity: llama.cpp's afmoe, runAfmoe),
// SmolLM3 (SmolLM3ForCausalLM: llama.cpp's smollm3, runSmolLM3), OLMo 2
// and 3 (Olmo2ForCausalLM, Olmo3ForCausalLM: llama.cpp's olmo2, runOlmo2),
// Gemma 1 and 2 (GemmaForCausalLM, Gemma2ForCausalLM: llama.cpp's gemma
// and gemma2, runGemma1, runGemma2), EXAONE 4.0
// (Exaone4ForCausalLM: llama.cpp's exaone4, runExaone4), GLM-4-0414
// (Glm4ForCausalLM: llama.cpp's glm4, runGlm4), Cohere and Cohere 2
// (CohereForCausalLM, Cohere2ForCausalLM: llama.cpp's command-r and
// cohere2, runCohere), Seed-OSS (SeedOssForCausalLM: llama.cpp's
// seed_oss, runSeedOss), AFM (ArceeForCausalLM: llama.cpp's arcee,
// runArcee), Apertus (ApertusForCausalLM: llama.cpp's apertus,
// runApertus), Phi-1, 1.5 and 2 (PhiForCausalLM: llama.cpp's phi2,
// runPhi), StarCoder2 (Starcoder2ForCausalLM: llama.cpp's starcoder2,
// runStarcoder2), Nemotron (NemotronForCausalLM: llama.cpp's nemotron,
// runNemotron), StableLM (StableLmForCausalLM: llama.cpp's stablelm,
// runStableLM), OLMo 1 (OlmoForCausalLM: llama.cpp's olmo, runOlmo1),
// ERNIE 4.5 dense (Ernie4_5ForCausalLM: llama.cpp's ernie4_5, runPairs),
// Helium (HeliumForCausalLM: llama.cpp's llama, runPairs), HunYuan
// (HunYuanDenseV1ForCausalLM and HunYuanMoEV1ForCausalLM: llama.cpp's
// hunyuan-dense and hunyuan-moe, runHunYuanDense, runHunYuanMoE),
// Falcon-H1 (FalconH1ForCausalLM: llama.cpp's falcon-h1, its multipliers
// folded into the weights, runFalconH1), Mamba and FalconMamba
// (MambaForCausalLM, FalconMambaForCausalLM: llama.cpp's mamba,
// runMamba), Mamba-2 with one group (Mamba2ForCausalLM: llama.cpp's
// mamba2, runMamba2), Jamba (JambaForCausalLM: llama.cpp's jamba, runJamba),
// Bamba (BambaForCausalLM: llama.cpp's granitehybrid, runBamba),
// Gemma 3n (Gemma3nForConditionalGeneration, Gemma3nForCausalLM: llama.cpp's
// gemma3n, runGemma3n), Ling 2.0 (BailingMoeV2ForCausalLM: llama.cpp's
// bailingmoe2, runBailing), GPT-NeoX and Pythia (GPTNeoXForCausalLM:
// llama.cpp's gptneox, runGPTNeoX), GPT-2 and StarCoder (GPT2LMHeadModel,
// GPTBigCodeForCausalLM: llama.cpp's gpt2 and starcoder, runGPT2), BLOOM
// (BloomForCausalLM: llama.cpp's bloom, runBloom), EXAONE without rope
// scaling, 3.0's (ExaoneForCausalLM: llama.cpp's exaone, runPairs), Falcon (FalconForCausalLM: llama.cpp's
// falcon, runFalcon), SmallThinker (SmallThinkerForCausalLM:
// llama.cpp's smallthinker, runSmallThinker), DBRX (DbrxForCausalLM:
// llama.cpp's dbrx, runDbrx), DeepSeek MoE (DeepseekForCausalLM:
// llama.cpp's deepseek, runDeepseekV1), Arctic (ArcticForCausalLM:
// llama.cpp's arctic, runArctic),
// Ministral 3
// (Ministral3ForCausalLM and Mistral3ForConditionalGeneration's text
// model: llama.cpp's mistral3, runMistral3)
// or Llama 4 (text) checkpoint (a directory with
// config.json, safetensors weights with the experts one by one or
// stacked, and a byte-level BPE tokenizer.json, such as the ones
// scripts/bench-moe-vs-llamacpp.sh generates) to a GGUF file that
// llama.cpp's kernels run through ollama (`ollama create` with
// `FROM ./model.gguf`). It exists to time ollama on the same weights as
// tputool: ollama v0.24.0's importer does not read Qwen3MoeForCausalLM,
// Glm4MoeForCausalLM, MiniMaxM2ForCausalLM, DeepseekV2ForCausalLM or
// GraniteMoeHybridForCausalLM safetensors folders (runMLA says more of
// DeepSeek-V2; it does import NemotronHForCausalLM and LFM2, storing
// NemotronH's matrices in f16), and
// writes a Mixtral's w2 (down) and w3 (up) experts under each other's
// names, which llama.cpp refuses to load ("tensor
// 'blk.0.ffn_down_exps.weight' has wrong shape").
//
//	go run ./scripts/export-gguf -m DIR -o DIR/model.gguf
//
// The file is GGUF version 3: the header, the metadata llama.cpp's and
// ollama's "qwen3moe" architecture read (sizes, rope, norms, experts, and
// the tokenizer as "gpt2" byte-level BPE: tokens, types and merges, padded
// with plain tokens to vocab_size), the tensor table, then the tensors
// aligned to 32 bytes. Matrices keep the checkpoint's dtype (F32, F16 or
// BF16); norm weights and the router are written as F32, as llama.cpp's
// converter does. GGUF lists dimensions innermost first, so a row-major
// [out, in] weight is {in, out} and an expert stack [E, I, H] is
// {H, I, E}: the bytes are the checkpoint's, unchanged. Qwen3's rotary
// embedding rotates halves, as llama.cpp's NEOX rope for qwen3moe does, so
// no rows are permuted. A Mixtral is written as llama.cpp's "llama"
// architecture with experts (as its convert_hf_to_gguf.py does), whose
// rope rotates adjacent pairs: the q and k projections' rows are permuted
// within each head from rotate-half order (first half, second half) to
// pairs (row 2j from j, row 2j+1 from j+D/2), as that converter does.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/afmoe"
	_ "github.com/tputool/tputool/pipeline/apertus" // ApertusForCausalLM
	_ "github.com/tputool/tputool/pipeline/arcee"   // ArceeForCausalLM
	"github.com/tputool/tputool/pipeline/arctic"
	"github.com/tputool/tputool/pipeline/bailing"
	"github.com/tputool/tputool/pipeline/bamba"
	"github.com/tputool/tputool/pipeline/bloom"
	"github.com/tputool/tputool/pipeline/cohere"
	"github.com/tputool/tputool/pipeline/dbrx"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/deepseekv1"
	"github.com/tputool/tputool/pipeline/ernie"
	"github.com/tputool/tputool/pipeline/exaone"
	_ "github.com/tputool/tputool/pipeline/exaone4" // Exaone4ForCausalLM
	"github.com/tputool/tputool/pipeline/falcon"
	"github.com/tputool/tputool/pipeline/falconh1"
	"github.com/tputool/tputool/pipeline/gemma3"
	"github.com/tputool/tputool/pipeline/gemma3n"
	"github.com/tputool/tputool/pipeline/glm"
	"github.com/tputool/tputool/pipeline/gpt2"
	"github.com/tputool/tputool/pipeline/gptneox"
	"github.com/tputool/tputool/pipeline/granite"
	_ "github.com/tputool/tputool/pipeline/helium" // HeliumForCausalLM
	"github.com/tputool/tputool/pipeline/jamba"
	"github.com/tputool/tputool/pipeline/lfm2"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mamba"
	"github.com/tputool/tputool/pipeline/minimax"
	"github.com/tputool/tputool/pipeline/mistral3"
	"github.com/tputool/tputool/pipeline/mixtral"
	_ "github.com/tputool/tputool/pipeline/nemotron" // NemotronForCausalLM
	"github.com/tputool/tputool/pipeline/nemotronh"
	_ "github.com/tputool/tputool/pipeline/olmo"  // OlmoForCausalLM
	_ "github.com/tputool/tputool/pipeline/olmo2" // Olmo2ForCausalLM, Olmo3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/olmoe" // OlmoeForCausalLM (FlexOlmoForCausalLM too, which llama.cpp does not run)
	"github.com/tputool/tputool/pipeline/phi"
	"github.com/tputool/tputool/pipeline/phi3"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	_ "github.com/tputool/tputool/pipeline/seedoss" // SeedOssForCausalLM
	"github.com/tputool/tputool/pipeline/smallthinker"
	_ "github.com/tputool/tputool/pipeline/smollm3"  // SmolLM3ForCausalLM
	_ "github.com/tputool/tputool/pipeline/stablelm" // StableLmForCausalLM
	"github.com/tputool/tputool/pipeline/starcoder2"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func main() {
	model := flag.String("m", "", "Hugging Face Qwen3-MoE or Mixtral directory (required)")
	out := flag.String("o", "", "output .gguf file (required)")
	flag.Parse()
	if *model == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "export-gguf: -m and -o are required")
		os.Exit(2)
	}
	if err := run(*model, *out); err != nil {
		fmt.Fprintln(os.Stderr, "export-gguf:", err)
		os.Exit(1)
	}
}

// GGUF value types and ggml tensor types.
const (
	tUint32  = 4
	tInt32   = 5
	tFloat32 = 6
	tBool    = 7
	tString  = 8
	tArray   = 9

	ggmlF32  = 0
	ggmlF16  = 1
	ggmlBF16 = 30

	alignment = 32
)

// kv is one metadata entry.
type kv struct {
	key string
	val any // uint32, float32, bool, string, []string, []int32
}

// tensor is one entry of the tensor table: its GGUF name, dimensions
// (innermost first), type, and the function writing its bytes.
type tensor struct {
	name  string
	dims  []uint64
	typ   uint32
	size  int64
	write func(w *bufio.Writer) error
}

func run(dir, out string) error {
	l, err := lmckpt.Load(dir)
	if err != nil {
		return err
	}
	defer l.Close()
	switch g := l.Model.(type) {
	case *bailing.Model:
		return runBailing(l, dir, out, g)
	case *gptneox.Model:
		return runGPTNeoX(l, dir, out, g)
	case *falcon.Model:
		return runFalcon(l, dir, out, g)
	case *exaone.Model:
		return runPairs(l, dir, out, g.Model, "exaone", "EXAONE") // llama.cpp's NEOX rope turns halves, as EXAONE does: q and k as stored
	case *gpt2.Model:
		return runGPT2(l, dir, out, g)
	case *bloom.Model:
		return runBloom(l, dir, out, g)
	case *dbrx.Model:
		return runDbrx(l, dir, out, g)
	case *arctic.Model:
		return runArctic(l, dir, out, g)
	case *deepseek.Model:
		if g.Options().GQA {
			return runSigmoid(l, dir, out, g)
		}
		return runMLA(l, dir, out, g)
	case *minimax.Model:
		return runSigmoid(l, dir, out, g.Model)
	case *ernie.Model:
		return runErnie(l, dir, out, g)
	case *llama4.Model:
		return runLlama4(l, dir, out, g)
	case *granite.HybridModel:
		if l.Config.Architecture() == "GraniteMoeSharedForCausalLM" {
			h := g.HybridOptions()
			return runGraniteMoE(l, dir, out, h.Options, h.Experts, h.TopK, h.Spec.Intermediate, h.Shared)
		}
		return runGraniteHybrid(l, dir, out, g)
	case *falconh1.Model:
		return runFalconH1(l, dir, out, g)
	case *mamba.Model:
		return runMamba(l, dir, out, g)
	case *mamba.Mamba2Model:
		return runMamba2(l, dir, out, g)
	case *jamba.Model:
		return runJamba(l, dir, out, g)
	case *bamba.Model:
		return runBamba(l, dir, out, g)
	case *gemma3n.Model:
		return runGemma3n(l, dir, out, g)
	case *granite.MoEModel:
		o := g.Options()
		return runGraniteMoE(l, dir, out, o.Options, o.Experts, o.TopK, o.MoEIntermediate, 0)
	case *nemotronh.Model:
		return runNemotronH(l, dir, out, g)
	case *lfm2.Model:
		return runLFM2(l, dir, out, g)
	case *phi3.MoEModel:
		return runPhi3(l, dir, out)
	case *afmoe.Model:
		return runAfmoe(l, dir, out, g)
	case *phi.Model:
		return runPhi(l, dir, out, g)
	case *starcoder2.Model:
		return runStarcoder2(l, dir, out, g)
	case *mistral3.Model:
		return runMistral3(l, dir, out, g)
	case *gemma3.Model:
		if l.Config.Architecture() == gemma3.Gemma2 {
			return runGemma2(l, dir, out, g)
		}
	case *llama.Model:
		switch l.Config.Architecture() {
		case "GraniteForCausalLM":
			return runGranite(l, dir, out, g)
		case "Phi3ForCausalLM":
			return runPhi3(l, dir, out)
		case "SmolLM3ForCausalLM":
			return runSmolLM3(l, dir, out, g)
		case "Olmo2ForCausalLM", "Olmo3ForCausalLM":
			return runOlmo2(l, dir, out, g)
		case "Exaone4ForCausalLM":
			return runExaone4(l, dir, out, g)
		case glm.Glm4:
			return runGlm4(l, dir, out, g)
		case cohere.Cohere, cohere.Cohere2:
			return runCohere(l, dir, out, g)
		case "SeedOssForCausalLM":
			return runSeedOss(l, dir, out, g)
		case "ArceeForCausalLM":
			return runArcee(l, dir, out, g)
		case gemma3.Gemma1:
			return runGemma1(l, dir, out, g)
		case "ApertusForCausalLM":
			return runApertus(l, dir, out, g)
		case "NemotronForCausalLM":
			return runNemotron(l, dir, out, g)
		case "StableLmForCausalLM":
			return runStableLM(l, dir, out, g)
		case "OlmoForCausalLM":
			return runOlmo1(l, dir, out, g)
		case "Ernie4_5ForCausalLM":
			return runPairs(l, dir, out, g, "ernie4_5", "ERNIE 4.5")
		case "HeliumForCausalLM":
			return runPairs(l, dir, out, g, "llama", "Helium")
		case "HunYuanDenseV1ForCausalLM":
			return runHunYuanDense(l, dir, out, g)
		}
	}
	var m *qwen3moe.Model
	switch x := l.Model.(type) {
	case *qwen3moe.Model:
		switch l.Config.Architecture() {
		case "HunYuanMoEV1ForCausalLM":
			return runHunYuanMoE(l, dir, out, x)
		case smallthinker.Architecture:
			return runSmallThinker(l, dir, out, x)
		case deepseekv1.Architecture:
			return runDeepseekV1(l, dir, out, x)
		case "Qwen3MoeForCausalLM", "OlmoeForCausalLM":
			m = x
		}
	case *mixtral.Model:
		m = x.Model
	}
	if m == nil {
		return fmt.Errorf("%s: architecture %s; export-gguf writes Qwen3MoeForCausalLM, MixtralForCausalLM, OlmoeForCausalLM, Glm4MoeForCausalLM, MiniMaxM2ForCausalLM, DeepseekV2ForCausalLM, Ernie4_5_MoeForCausalLM, Dots1ForCausalLM, GraniteForCausalLM, GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM, Lfm2ForCausalLM, Lfm2MoeForCausalLM, Phi3ForCausalLM, Phi-3.5-MoE (PhimoeForCausalLM), AfmoeForCausalLM, SmolLM3ForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, Gemma2ForCausalLM, Exaone4ForCausalLM, Glm4ForCausalLM, CohereForCausalLM, Cohere2ForCausalLM, SeedOssForCausalLM, ArceeForCausalLM, GemmaForCausalLM, ApertusForCausalLM, PhiForCausalLM, Starcoder2ForCausalLM, NemotronForCausalLM, StableLmForCausalLM, OlmoForCausalLM, Ernie4_5ForCausalLM, HeliumForCausalLM, HunYuanDenseV1ForCausalLM, HunYuanMoEV1ForCausalLM, FalconH1ForCausalLM, MambaForCausalLM, FalconMambaForCausalLM, Mamba2ForCausalLM, JambaForCausalLM, BambaForCausalLM, Gemma3nForConditionalGeneration, BailingMoeV2ForCausalLM, SmallThinkerForCausalLM, GPTNeoXForCausalLM, GPT2LMHeadModel, GPTBigCodeForCausalLM, BloomForCausalLM, ExaoneForCausalLM, FalconForCausalLM, DbrxForCausalLM, DeepseekForCausalLM, ArcticForCausalLM, Ministral 3 (Ministral3ForCausalLM, Mistral3ForConditionalGeneration) and Llama 4 (Llama4ForConditionalGeneration, Llama4ForCausalLM) only", dir, l.Config.Architecture())
	}
	_, isMixtral := l.Model.(*mixtral.Model)
	isOLMoE := l.Config.Architecture() == "OlmoeForCausalLM"
	o, s := m.Options(), m.Spec()
	if s.SlidingWindow > 0 {
		return fmt.Errorf("%s: sliding_window %d; export-gguf writes full attention only", dir, s.SlidingWindow)
	}
	for i, sparse := range o.Sparse {
		if !sparse {
			return fmt.Errorf("%s: layer %d is dense; export-gguf writes models whose every layer is sparse", dir, i)
		}
	}
	defaultTheta := 10000.0 // Qwen3MoeConfig's
	if isMixtral {
		defaultTheta = 1e6 // MixtralConfig's
	}
	theta, err := ropeTheta(filepath.Join(dir, "config.json"), defaultTheta)
	if err != nil {
		return err
	}
	arch := "qwen3moe"
	switch {
	case isMixtral:
		arch = "llama"
	case isOLMoE:
		// llama.cpp's olmoe: the q/k norms over whole projections, the top
		// k never renormalized, k_norm as wide as the hidden size.
		if o.NormTopK || s.KVHeads != s.Heads || o.ClipQKV > 0 {
			return fmt.Errorf("%s: llama.cpp's olmoe runs multi-head attention without clip_qkv and the top k not renormalized", dir)
		}
		arch = "olmoe"
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(theta)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "norm_top_k_prob", o.NormTopK},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)

	var ts []tensor
	add := func(gguf string, names []string, f32 bool, pairHeads int) error {
		t, err := newTensor(l, gguf, names, f32, pairHeads)
		if err != nil {
			return err
		}
		ts = append(ts, t)
		return nil
	}
	if err := add("token_embd.weight", []string{"model.embed_tokens.weight"}, false, 0); err != nil {
		return err
	}
	layout, qkNorm, qHeads, kHeads := qwen3moe.QwenLayout, true, 0, 0
	if isMixtral {
		layout, qkNorm, qHeads, kHeads = mixtral.Layout, false, s.Heads, s.KVHeads
	}
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		for _, x := range []struct {
			gguf, hf  string
			f32       bool
			pairHeads int
		}{
			{"attn_norm.weight", "input_layernorm.weight", true, 0},
			{"attn_q.weight", "self_attn.q_proj.weight", false, qHeads},
			{"attn_k.weight", "self_attn.k_proj.weight", false, kHeads},
			{"attn_v.weight", "self_attn.v_proj.weight", false, 0},
			{"attn_output.weight", "self_attn.o_proj.weight", false, 0},
			{"attn_q_norm.weight", "self_attn.q_norm.weight", true, 0},
			{"attn_k_norm.weight", "self_attn.k_norm.weight", true, 0},
			{"ffn_norm.weight", "post_attention_layernorm.weight", true, 0},
			{"ffn_gate_inp.weight", layout.Block + ".gate.weight", true, 0},
		} {
			if !qkNorm && (x.gguf == "attn_q_norm.weight" || x.gguf == "attn_k_norm.weight") {
				continue
			}
			if err := add(b+x.gguf, []string{p + x.hf}, x.f32, x.pairHeads); err != nil {
				return err
			}
		}
		for _, proj := range []struct{ gguf, hf string }{
			{"gate", layout.Experts.Gate}, {"up", layout.Experts.Up}, {"down", layout.Experts.Down},
		} {
			names := make([]string, o.Experts)
			for e := range names {
				names[e] = fmt.Sprintf("%s%s.experts.%d.%s", p, layout.Block, e, proj.hf)
			}
			if err := add(b+"ffn_"+proj.gguf+"_exps.weight", names, false, 0); err != nil {
				return err
			}
		}
	}
	if err := add("output_norm.weight", []string{"model.norm.weight"}, true, 0); err != nil {
		return err
	}
	head := "lm_head.weight"
	if s.TieEmbeddings {
		head = "model.embed_tokens.weight"
	}
	if err := add("output.weight", []string{head}, false, 0); err != nil {
		return err
	}
	return write(out, meta, ts)
}

// header is the metadata every export writes: the architecture's name,
// the file type, and the tokenizer as "gpt2" byte-level BPE padded to
// the vocabulary, its end of sequence the config's first. The
// pre-tokenizer is named qwen2's, which the bench scripts' tokenizer
// (loader/tokenizer/testdata/tokenizers/qwen2-tiny) is; a release's own
// tokenizer (GLM-4.5's glm4, MiniMax-M2's) is not converted.
func header(l *lm.Loaded, dir, arch string) ([]kv, error) {
	s := l.Model.Spec()
	tokens, types, merges, err := vocabulary(filepath.Join(dir, "tokenizer.json"), s.VocabSize)
	if err != nil {
		return nil, err
	}
	eos := uint32(s.VocabSize - 1)
	if len(s.EOS) > 0 {
		eos = uint32(s.EOS[0])
	}
	fileType := uint32(0) // llama.cpp's LLAMA_FTYPE: all F32, mostly F16 (1) or BF16 (32)
	embed := "model.embed_tokens.weight"
	if ws := l.Model.EmbedWeights(); len(ws) > 0 { // the model's own name (Gemma 3n's model.language_model.*)
		embed = ws[0].Name
	}
	switch l.StoredDType(embed) {
	case dtypes.Float16:
		fileType = 1
	case dtypes.BFloat16:
		fileType = 32
	}
	return []kv{
		{"general.architecture", arch},
		{"general.file_type", fileType},
		{"general.name", filepath.Base(dir)},
		{"general.alignment", uint32(alignment)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "qwen2"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
		{"tokenizer.ggml.eos_token_id", eos},
		{"tokenizer.ggml.bos_token_id", eos},
		{"tokenizer.ggml.padding_token_id", eos},
		{"tokenizer.ggml.add_bos_token", false},
	}, nil
}

// runSigmoid writes a Glm4MoeForCausalLM as llama.cpp's "glm4moe", a
// MiniMaxM2ForCausalLM as its "minimax-m2" and a Dots1ForCausalLM as its
// "dots1": the q/k/v projections (GLM's with their biases), the q/k norms
// (MiniMax's over whole projections, dots.llm1's per head), the
// post-attention norm (post_attention_norm for glm4moe, ffn_norm for the
// others), GLM's and dots.llm1's leading dense layers' MLP, and on the
// sparse layers the sigmoid router with its correction bias
// (exp_probs_b), the expert stacks and the shared experts. Their rope
// rotates halves (NEOX) over rope.dimension_count dims, as transformers'
// partial rotary does, so no rows are permuted.
func runSigmoid(l *lm.Loaded, dir, out string, m *deepseek.Model) error {
	o, s, lay := m.Options(), m.Spec(), m.Layout()
	arch, glm, dots := "minimax-m2", l.Config.Architecture() == "Glm4MoeForCausalLM", l.Config.Architecture() == "Dots1ForCausalLM"
	switch {
	case glm:
		arch = "glm4moe"
	case dots:
		arch = "dots1"
	}
	switch {
	case glm && !o.QKVBias:
		return fmt.Errorf("%s: attention_bias is false; llama.cpp's glm4moe requires the q/k/v biases", dir)
	case dots && (o.QKVBias || s.KVHeads != s.Heads || o.Shared == 0 || s.SlidingWindow > 0):
		return fmt.Errorf("%s: llama.cpp's dots1 runs multi-head attention without biases or sliding layers, and shared experts", dir)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes %s without it", dir, o.Rope.Type, arch)
	case !glm && !dots && (!o.QKNorm || !o.QKNormAcross):
		return fmt.Errorf("%s: llama.cpp's minimax-m2 requires q/k norms over whole projections (use_qk_norm, qk_norm_type per_layer)", dir)
	}
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	for i := dense; i < len(o.Sparse); i++ {
		if !o.Sparse[i] {
			return fmt.Errorf("%s: layer %d is dense after a sparse one; %s's dense layers lead", dir, i, arch)
		}
	}
	if !glm && !dots && (dense > 0 || o.Shared > 0) {
		return fmt.Errorf("%s: llama.cpp's minimax-m2 has neither dense layers nor shared experts", dir)
	}
	defaultTheta := 10000.0 // Glm4MoeConfig's and Dots1Config's
	if !glm && !dots {
		defaultTheta = 5e6 // MiniMaxM2Config's
	}
	theta, err := ropeTheta(filepath.Join(dir, "config.json"), defaultTheta)
	if err != nil {
		return err
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	ff := s.Intermediate // the dense layers'; minimax-m2 reads its experts' width here
	if !glm && !dots {
		ff = o.MoEIntermediate
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(ff)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(theta)},
		{a + "rope.dimension_count", uint32(o.Rope.RotaryDim)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_gating_func", uint32(2)}, // sigmoid
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	if glm || dots {
		meta = append(meta, []kv{
			{a + "expert_shared_count", uint32(o.Shared)},
			{a + "leading_dense_block_count", uint32(dense)},
			{a + "expert_weights_scale", float32(o.RoutedScale)},
			{a + "expert_weights_norm", o.NormTopK},
		}...)
	}
	if glm {
		meta = append(meta, kv{a + "nextn_predict_layers", uint32(0)})
	}
	if o.Groups > 1 && o.TopKGroup < o.Groups {
		// llama.cpp's build_moe_ffn limits the groups for every
		// architecture, closing the others with −∞ where transformers
		// masks them with 0: the two choose alike unless fewer than top k
		// open experts have a biased score of 0 or more.
		meta = append(meta, kv{a + "expert_group_count", uint32(o.Groups)}, kv{a + "expert_group_used_count", uint32(o.TopKGroup)})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	postNorm := "ffn_norm.weight"
	if glm {
		postNorm = "post_attention_norm.weight"
	}
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		block := p + lay.Block + "."
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{postNorm, p + "post_attention_layernorm.weight", true},
		}
		if o.QKVBias {
			ps = append(ps, ggufPair{"attn_q.bias", p + "self_attn.q_proj.bias", true}, ggufPair{"attn_k.bias", p + "self_attn.k_proj.bias", true},
				ggufPair{"attn_v.bias", p + "self_attn.v_proj.bias", true})
		}
		if o.QKNorm {
			ps = append(ps, ggufPair{"attn_q_norm.weight", p + "self_attn.q_norm.weight", true}, ggufPair{"attn_k_norm.weight", p + "self_attn.k_norm.weight", true})
		}
		if !o.Sparse[i] {
			g.pairs(b, append(ps, denseMLP(p)...))
			continue
		}
		ps = append(ps, ggufPair{"ffn_gate_inp.weight", block + "gate.weight", true}, ggufPair{"exp_probs_b.bias", block + lay.Bias, true})
		if o.Shared > 0 {
			ps = append(ps, sharedExperts(block)...)
		}
		g.pairs(b, ps)
		g.experts(b, block, o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// ggufPair names a GGUF tensor and the checkpoint weight it holds,
// written as float32 when f32 (norms, routers, biases).
type ggufPair struct {
	gguf, hf string
	f32      bool
}

// denseMLP is a layer's dense SwiGLU MLP (p is "model.layers.I.").
func denseMLP(p string) []ggufPair {
	return []ggufPair{{"ffn_gate.weight", p + "mlp.gate_proj.weight", false}, {"ffn_up.weight", p + "mlp.up_proj.weight", false},
		{"ffn_down.weight", p + "mlp.down_proj.weight", false}}
}

// sharedExperts is a sparse block's shared experts (block ends in ".").
func sharedExperts(block string) []ggufPair {
	return []ggufPair{{"ffn_gate_shexp.weight", block + "shared_experts.gate_proj.weight", false},
		{"ffn_up_shexp.weight", block + "shared_experts.up_proj.weight", false},
		{"ffn_down_shexp.weight", block + "shared_experts.down_proj.weight", false}}
}

// ggufTensors collects a GGUF's tensors from l in order, keeping the
// first error.
type ggufTensors struct {
	l   *lm.Loaded
	ts  []tensor
	err error
}

// add appends GGUF tensor gguf holding the checkpoint weights names
// (newTensor).
func (g *ggufTensors) add(gguf string, f32 bool, names ...string) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, names, f32, 0)
	if err != nil {
		g.err = err
		return
	}
	g.ts = append(g.ts, t)
}

// addPaired adds a q or k projection of heads heads, its rows permuted
// from rotate-half order to adjacent pairs (newTensor's pairHeads).
func (g *ggufTensors) addPaired(gguf string, heads int, name string) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, false, heads)
	if err != nil {
		g.err = err
		return
	}
	g.ts = append(g.ts, t)
}

// addPairedRot adds a q or k projection of heads heads whose rotary
// turns each head's first rot rows only (a partial rotary in rotate-half
// order): those rows permuted to adjacent pairs, the rest as stored.
func (g *ggufTensors) addPairedRot(gguf string, heads, rot int, name string) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, false, 0)
	if err != nil {
		g.err = err
		return
	}
	_, _, read := storedType(g.l, name)
	t.write = func(w *bufio.Writer) error {
		x, err := g.l.Tensor(name, read)
		if err != nil {
			return err
		}
		defer x.FinalizeAll()
		if err := pairRows(x, heads, rot); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeData(w, x, t.typ); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	g.ts = append(g.ts, t)
}

// pairs adds each of ps, its GGUF name prefixed by blk ("blk.I.").
func (g *ggufTensors) pairs(blk string, ps []ggufPair) {
	for _, x := range ps {
		g.add(blk+x.gguf, x.f32, x.hf)
	}
}

// experts adds blk's ffn_gate_exps, ffn_up_exps and ffn_down_exps, each
// stacking the n experts' matrices block+"experts.E."+name.
func (g *ggufTensors) experts(blk, block string, n int, names lm.ExpertNames) {
	for _, proj := range []struct{ gguf, hf string }{{"gate", names.Gate}, {"up", names.Up}, {"down", names.Down}} {
		hf := make([]string, n)
		for e := range hf {
			hf[e] = fmt.Sprintf("%sexperts.%d.%s", block, e, proj.hf)
		}
		g.add(blk+"ffn_"+proj.gguf+"_exps.weight", false, hf...)
	}
}

// final adds output_norm and output: lm_head, or the embedding when
// tied, which omitTied leaves out (for an architecture that takes the
// embedding when output is missing).
func (g *ggufTensors) final(tied, omitTied bool) {
	g.add("output_norm.weight", true, "model.norm.weight")
	switch {
	case !tied:
		g.add("output.weight", false, "lm_head.weight")
	case !omitTied:
		g.add("output.weight", false, "model.embed_tokens.weight")
	}
}

// newTensor is GGUF tensor gguf holding the checkpoint weights names (one
// weight, or one matrix per expert stacked on a new outer axis), in the
// stored dtype or, with f32, as float32. pairHeads > 0 permutes the rows
// of each of that many heads from rotate-half order to adjacent pairs
// (pairRows).
func newTensor(l *lm.Loaded, gguf string, names []string, f32 bool, pairHeads int) (tensor, error) {
	shape, ok := l.Shape(names[0])
	if !ok {
		_, err := l.Tensor(names[0], dtypes.Float32) // its error names the cause
		return tensor{}, err
	}
	typ, elem, read := uint32(ggmlF32), int64(4), dtypes.Float32
	if !f32 {
		typ, elem, read = storedType(l, names[0])
	}
	t := tensor{name: gguf, typ: typ}
	n := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		t.dims = append(t.dims, uint64(shape[i]))
		n *= int64(shape[i])
	}
	if len(names) > 1 {
		t.dims = append(t.dims, uint64(len(names)))
	}
	t.size = n * int64(len(names)) * elem
	t.write = func(w *bufio.Writer) error {
		for _, name := range names {
			x, err := l.Tensor(name, read)
			if err != nil {
				return err
			}
			if pairHeads > 0 {
				if err := pairRows(x, pairHeads, 0); err != nil {
					x.FinalizeAll()
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			err = writeData(w, x, typ)
			x.FinalizeAll()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	return t, nil
}

// pairRows permutes the rows of x [heads·D, in] within each head from
// rotate-half order to adjacent pairs: row 2j of a head becomes its row j,
// row 2j+1 its row j+R/2, for the R = rot rotated rows (rot 0: the whole
// head); rows from R on stay (llama.cpp's convert_hf_to_gguf.py permutes
// Llama-architecture q and k so; its rope then rotates pairs, the first
// rope.dimension_count rows of a head).
func pairRows(x *tensors.Tensor, heads, rot int) error {
	dims := x.Shape().Dimensions
	if len(dims) != 2 || dims[0]%(2*heads) != 0 {
		return fmt.Errorf("shape %v does not hold %d heads of an even size", dims, heads)
	}
	d := dims[0] / heads
	r := rot
	if r == 0 {
		r = d
	}
	if r%2 != 0 || r > d {
		return fmt.Errorf("a rotary of %d rows in heads of %d", r, d)
	}
	return x.MutableBytes(func(b []byte) {
		row := len(b) / dims[0]
		head := make([]byte, r*row)
		for h := 0; h < heads; h++ {
			src := b[h*d*row : (h+1)*d*row]
			for j := 0; j < r/2; j++ {
				copy(head[2*j*row:(2*j+1)*row], src[j*row:(j+1)*row])
				copy(head[(2*j+1)*row:(2*j+2)*row], src[(j+r/2)*row:(j+r/2+1)*row])
			}
			copy(src, head)
		}
	})
}

// storedType is how a matrix stored as l stores weight name is written
// (its GGUF type and element size) and read for it: bf16 as bf16, f16
// read as f32 and written as f16, anything else as f32.
func storedType(l *lm.Loaded, name string) (typ uint32, elem int64, read dtypes.DType) {
	switch l.StoredDType(name) {
	case dtypes.BFloat16:
		return ggmlBF16, 2, dtypes.BFloat16
	case dtypes.Float16:
		return ggmlF16, 2, dtypes.Float32
	}
	return ggmlF32, 4, dtypes.Float32
}

func writeData(w *bufio.Writer, x *tensors.Tensor, typ uint32) error {
	var err error
	x.MustConstFlatData(func(flat any) { err = writeFlat(w, flat, typ) })
	return err
}

// writeFlat writes flat values (read as storedType says) as GGUF type
// typ: f32 values as f16 when typ is F16, others as they are.
func writeFlat(w *bufio.Writer, flat any, typ uint32) error {
	if v, ok := flat.([]float32); ok && typ == ggmlF16 {
		buf := make([]byte, 2*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint16(buf[2*i:], safetensors.Float32ToHalf(f))
		}
		_, err := w.Write(buf)
		return err
	}
	return binary.Write(w, binary.LittleEndian, flat)
}

// vocabulary reads a byte-level BPE tokenizer.json: its tokens by id (the
// model's vocabulary and the added tokens), their GGUF types (1 normal, 3
// control for special added tokens) and merges, padded with plain tokens
// <|pad_N|> to vocab entries.
func vocabulary(path string, vocab int) ([]string, []int32, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	var tj struct {
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type   string          `json:"type"`
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return nil, nil, nil, fmt.Errorf("%s: model type %q, want a byte-level BPE", path, tj.Model.Type)
	}
	merges, err := readMerges(tj.Model.Merges)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: merges: %w", path, err)
	}
	byID := map[int]string{}
	typ := map[int]int32{}
	for tok, id := range tj.Model.Vocab {
		byID[id], typ[id] = tok, 1
	}
	for _, a := range tj.Added {
		byID[a.ID], typ[a.ID] = a.Content, 1
		if a.Special {
			typ[a.ID] = 3
		}
	}
	ids := make([]int, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	if len(ids) > 0 && ids[len(ids)-1] >= vocab {
		return nil, nil, nil, fmt.Errorf("%s: token id %d is outside vocab_size %d", path, ids[len(ids)-1], vocab)
	}
	tokens, types := make([]string, vocab), make([]int32, vocab)
	for id := range tokens {
		if tok, ok := byID[id]; ok {
			tokens[id], types[id] = tok, typ[id]
		} else {
			tokens[id], types[id] = fmt.Sprintf("<|pad_%d|>", id), 1
		}
	}
	return tokens, types, merges, nil
}

// readMerges reads merges as "a b" strings or [a, b] pairs.
func readMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, err
	}
	for _, p := range pairs {
		s = append(s, p[0]+" "+p[1])
	}
	return s, nil
}

func write(path string, meta []kv, ts []tensor) (err error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var pos int64
	put := func(v any) {
		if err == nil {
			err = binary.Write(w, binary.LittleEndian, v)
			pos += int64(binary.Size(v))
		}
	}
	str := func(s string) {
		put(uint64(len(s)))
		if err == nil {
			var n int
			n, err = w.WriteString(s)
			pos += int64(n)
		}
	}
	put([]byte("GGUF"))
	put(uint32(3))
	put(uint64(len(ts)))
	put(uint64(len(meta)))
	for _, e := range meta {
		str(e.key)
		switch v := e.val.(type) {
		case uint32:
			put(uint32(tUint32))
			put(v)
		case float32:
			put(uint32(tFloat32))
			put(v)
		case bool:
			put(uint32(tBool))
			b := uint8(0)
			if v {
				b = 1
			}
			put(b)
		case string:
			put(uint32(tString))
			str(v)
		case []string:
			put(uint32(tArray))
			put(uint32(tString))
			put(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			put(uint32(tArray))
			put(uint32(tInt32))
			put(uint64(len(v)))
			put(v)
		case []float32:
			put(uint32(tArray))
			put(uint32(tFloat32))
			put(uint64(len(v)))
			put(v)
		default:
			return fmt.Errorf("metadata %s: unsupported value %T", e.key, e.val)
		}
	}
	var off int64
	for _, t := range ts {
		str(t.name)
		put(uint32(len(t.dims)))
		put(t.dims)
		put(t.typ)
		put(uint64(off))
		off = pad(off + t.size)
	}
	pos = writePad(w, pos, &err)
	for _, t := range ts {
		if err != nil {
			return err
		}
		if err = t.write(w); err != nil {
			return err
		}
		pos = writePad(w, pos+t.size, &err)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

func pad(n int64) int64 { return (n + alignment - 1) / alignment * alignment }

// writePad writes zeros from pos up to the next alignment boundary.
func writePad(w *bufio.Writer, pos int64, err *error) int64 {
	if *err != nil {
		return pos
	}
	n := pad(pos) - pos
	_, *err = w.Write(make([]byte, n))
	return pos + n
}

// ropeTheta reads rope_theta from config.json, def when absent.
func ropeTheta(path string, def float64) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var c struct {
		Theta *float64 `json:"rope_theta"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if c.Theta == nil {
		return def, nil
	}
	return *c.Theta, nil
}
