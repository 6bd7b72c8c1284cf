package lmref_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	. "github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"

	_ "github.com/tputool/tputool/pipeline/apertus"
	_ "github.com/tputool/tputool/pipeline/arcee"
	_ "github.com/tputool/tputool/pipeline/cohere"
	_ "github.com/tputool/tputool/pipeline/ernie"
	_ "github.com/tputool/tputool/pipeline/exaone4"
	_ "github.com/tputool/tputool/pipeline/gemma3"
	_ "github.com/tputool/tputool/pipeline/glm"
	_ "github.com/tputool/tputool/pipeline/helium"
	_ "github.com/tputool/tputool/pipeline/hunyuan"
	_ "github.com/tputool/tputool/pipeline/llama"
	_ "github.com/tputool/tputool/pipeline/mistral"
	_ "github.com/tputool/tputool/pipeline/mistral3"
	_ "github.com/tputool/tputool/pipeline/nemotron"
	_ "github.com/tputool/tputool/pipeline/olmo"
	_ "github.com/tputool/tputool/pipeline/olmo2"
	_ "github.com/tputool/tputool/pipeline/phi"
	_ "github.com/tputool/tputool/pipeline/qwen2"
	_ "github.com/tputool/tputool/pipeline/qwen3"
	_ "github.com/tputool/tputool/pipeline/seedoss"
	_ "github.com/tputool/tputool/pipeline/smollm3"
	_ "github.com/tputool/tputool/pipeline/stablelm"
	_ "github.com/tputool/tputool/pipeline/starcoder2"
)

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// tinyCases are small models of every architecture, with the features
// that distinguish them switched on and sizes that are not all equal.
func tinyCases() []lmckpt.Tiny {
	base := lmref.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5}
	llama := base
	llama.RopeTheta, llama.Window = repeat(10000.0, 3), repeat(0, 3)
	qwen2 := llama
	qwen2.QKVBias, qwen2.Tied = true, true
	qwen2.RopeTheta = repeat(1e6, 3)
	qwen3 := llama
	qwen3.QKNorm, qwen3.HeadDim, qwen3.Tied = true, 16, true // head_dim != hidden/heads
	mistral := llama
	mistral.KVHeads, mistral.Window = 1, repeat(5, 3) // sliding window on every layer
	smol := llama
	smol.Layers, smol.Tied, smol.KVHeads = 4, true, 1
	smol.RopeTheta, smol.Window = repeat(2e6, 4), []int{0, 0, 0, 5} // the last NoPE layer within a window shorter than the sequence
	smol.NoRope = []bool{false, true, false, true}                  // NoPE layers where no_rope_layers is 0
	olmo := llama
	olmo.Olmo2, olmo.KVHeads = true, 2 // post norms only, q/k norms over whole projections
	olmo3 := olmo
	olmo3.Layers, olmo3.RopeTheta = 4, repeat(10000.0, 4)
	olmo3.Window, olmo3.RopeLinear = []int{5, 5, 5, 0}, 2 // three sliding layers, then a full one whose rotary alone is scaled
	exaone := olmo
	exaone.QKNorm, exaone.Layers, exaone.RopeTheta = true, 4, repeat(10000.0, 4)        // q/k norms per head
	exaone.Window, exaone.NoRope = []int{5, 5, 5, 0}, []bool{false, false, false, true} // the hybrid layout: the full layer NoPE
	glm := llama
	glm.Glm, glm.QKVBias, glm.HeadDim = true, true, 16 // the rotary over 8 of 16 dims, in pairs; a fused gate_up_proj
	glm4 := glm
	glm4.Glm4, glm4.KVHeads = true, 1 // four norms a layer
	cohere := llama
	cohere.Cohere, cohere.LogitScale, cohere.Tied, cohere.QKVBias = true, 0.25, true, true // parallel block, LayerNorms, pairs; biases on every projection
	cohereQK := cohere
	cohereQK.QKNorm, cohereQK.QKVBias = true, false // Command R+'s use_qk_norm: a LayerNorm over each head, a weight per head
	cohere2 := cohere
	cohere2.Layers, cohere2.QKVBias, cohere2.RopeTheta = 4, false, repeat(50000.0, 4)
	cohere2.Window, cohere2.NoRope = []int{5, 5, 5, 0}, []bool{false, false, false, true} // three sliding layers, a NoPE global one
	seed := llama
	seed.QKVBias, seed.OBias, seed.HeadDim = true, true, 16 // attention_bias and attention_out_bias; head_dim != hidden/heads
	arcee := llama
	arcee.Ungated, arcee.KVHeads = true, 1 // relu² without a gate
	apertus := llama
	apertus.Apertus, apertus.QKNorm, apertus.HeadDim = true, true, 16 // xIELU without a gate, renamed norms, q/k norms per head
	phi := llama
	phi.Phi, phi.PartialRotary, phi.HeadDim, phi.KVHeads = true, 0.5, 8, 4 // parallel, biased LayerNorm, the rotary over 4 of 8 dims, biases everywhere
	phiQK := phi
	phiQK.QKNorm = true // qk_layernorm: one biased LayerNorm for the query heads, one for the key heads
	starcoder := llama
	starcoder.Starcoder2, starcoder.Tied, starcoder.KVHeads, starcoder.Window = true, true, 2, repeat(5, 3) // biased LayerNorms and projections, c_fc/c_proj, a window of 5
	nemotron := llama
	nemotron.Nemotron, nemotron.PartialRotary, nemotron.KVHeads = true, 0.5, 2 // LayerNorm1P, relu² without a gate, the rotary over half of each head
	stablelm := llama
	stablelm.StableLM, stablelm.QKVBias, stablelm.PartialRotary, stablelm.KVHeads = true, true, 0.25, 4 // biased LayerNorms, q/k/v biases, the rotary over 2 of 8 dims
	stablelmPar := stablelm
	stablelmPar.StableLMParallel, stablelmPar.QKVBias = true, false // use_parallel_residual
	stablelm12 := stablelmPar
	stablelm12.QKNorm, stablelm12.KVHeads = true, 2 // StableLM 2 12B's qk_layernorm: a LayerNorm a head, each its own tensor; GQA as the 12B's
	olmo1 := llama
	olmo1.Olmo1, olmo1.ClipQKV, olmo1.KVHeads = true, 0.3, 4 // parameter-free LayerNorms; a clamp the projections reach
	ernie := llama
	ernie.RopePairs, ernie.HeadDim, ernie.Tied, ernie.RopeTheta = true, 16, true, repeat(500000.0, 3) // adjacent pairs over whole heads; head_dim != hidden/heads
	ernieBias := ernie
	ernieBias.QKVBias, ernieBias.OBias, ernieBias.MLPBias, ernieBias.HeadDim, ernieBias.Tied = true, true, true, 8, false // use_bias: every projection
	helium := llama
	helium.RopePairs, helium.QKVBias, helium.MLPBias, helium.Eps = true, true, true, 1e-8 // adjacent pairs; q/k/v and MLP biases, none on o
	hunyuan := llama
	hunyuan.HunYuan, hunyuan.QKNorm, hunyuan.Tied, hunyuan.HeadDim = true, true, true, 16 // q/k norms after the rotary; head_dim != hidden/heads
	hunyuan.RopeAlpha = 1000                                                              // the rotary's base raised to 10000·1000^(16/14)
	hunyuanBias := hunyuan
	hunyuanBias.QKVBias, hunyuanBias.OBias, hunyuanBias.Tied, hunyuanBias.RopeAlpha = true, true, false, 0 // attention_bias on q, k, v and o; the plain rotary
	olmo1Bias := olmo1
	olmo1Bias.QKVBias, olmo1Bias.ClipQKV = true, 0 // attention_bias: q, k, v and o; no clamp
	ministral8b := llama
	ministral8b.Layers, ministral8b.RopeTheta = 4, repeat(1e6, 4)
	ministral8b.Window = []int{0, 5, 5, 5} // layer_types: a full layer, then three within the window
	ministral := llama
	ministral.HeadDim, ministral.Tied = 16, true // head_dim != hidden/heads, as Ministral 3's 3B ties its head
	ministral.RopeTheta = repeat(1e6, 3)
	// YaRN over 8 original positions and β 0.1: the prompts and steps
	// reach positions 34, where the queries scale by 1 + 0.1·log(5).
	ministral.Yarn, ministral.Llama4Beta = &lmckpt.Yarn{Factor: 8, Orig: 8, BetaFast: 32, BetaSlow: 1}, 0.1
	gemma := base
	gemma.Gemma, gemma.Layers, gemma.Tied, gemma.HeadDim = true, 4, true, 16
	gemma.Window = []int{4, 4, 0, 4} // local, local, global, local; window < sequence
	gemma.RopeTheta = []float64{10000, 10000, 1e6, 10000}
	gemma.QueryScale = 1 / math.Sqrt(24) // query_pre_attn_scalar 24 != head_dim
	gemma.AttnSoftcap, gemma.FinalSoftcap = 20, 10
	gemma1 := base
	gemma1.Gemma, gemma1.Gemma1, gemma1.Tied, gemma1.HeadDim, gemma1.KVHeads = true, true, true, 16, 1 // Llama's norms with (1+w), head_dim != hidden/heads, MQA
	gemma1.RopeTheta, gemma1.Window = repeat(10000.0, 3), repeat(0, 3)
	gemma2 := gemma
	gemma2.Gemma2, gemma2.QueryScale = true, 0                              // no q/k norms, query_pre_attn_scalar head_dim
	gemma2.Window, gemma2.RopeTheta = []int{4, 0, 4, 0}, repeat(50000.0, 4) // every second layer global, one rope_theta for both kinds
	return []lmckpt.Tiny{
		{Arch: "LlamaForCausalLM", Config: llama, Seed: 1},
		{Arch: "Qwen2ForCausalLM", Config: qwen2, Seed: 2},
		{Arch: "Qwen3ForCausalLM", Config: qwen3, Seed: 3},
		{Arch: "MistralForCausalLM", Config: mistral, Seed: 4},
		{Arch: "Ministral3ForCausalLM", Config: ministral, Seed: 10, MaxPositions: 64},
		{Arch: "MinistralForCausalLM", Config: ministral8b, Seed: 19},
		{Arch: "ApertusForCausalLM", Config: apertus, Seed: 20},
		{Arch: "PhiForCausalLM", Config: phi, Seed: 21},
		{Arch: "PhiForCausalLM", Config: phiQK, Seed: 37},
		{Arch: "Starcoder2ForCausalLM", Config: starcoder, Seed: 22},
		{Arch: "NemotronForCausalLM", Config: nemotron, Seed: 23},
		{Arch: "StableLmForCausalLM", Config: stablelm, Seed: 24},
		{Arch: "StableLmForCausalLM", Config: stablelmPar, Seed: 25},
		{Arch: "StableLmForCausalLM", Config: stablelm12, Seed: 34},
		{Arch: "HeliumForCausalLM", Config: helium, Seed: 30},
		{Arch: "HunYuanDenseV1ForCausalLM", Config: hunyuan, Seed: 35},
		{Arch: "HunYuanDenseV1ForCausalLM", Config: hunyuanBias, Seed: 36},
		{Arch: "Ernie4_5ForCausalLM", Config: ernie, Seed: 28},
		{Arch: "Ernie4_5ForCausalLM", Config: ernieBias, Seed: 29},
		{Arch: "OlmoForCausalLM", Config: olmo1, Seed: 26},
		{Arch: "OlmoForCausalLM", Config: olmo1Bias, Seed: 27},
		{Arch: "Exaone4ForCausalLM", Config: exaone, Seed: 11},
		{Arch: "GlmForCausalLM", Config: glm, Seed: 12},
		{Arch: "CohereForCausalLM", Config: cohere, Seed: 14},
		{Arch: "CohereForCausalLM", Config: cohereQK, Seed: 33},
		{Arch: "SeedOssForCausalLM", Config: seed, Seed: 16},
		{Arch: "ArceeForCausalLM", Config: arcee, Seed: 17},
		{Arch: "Cohere2ForCausalLM", Config: cohere2, Seed: 15},
		{Arch: "Glm4ForCausalLM", Config: glm4, Seed: 13},
		{Arch: "Gemma3ForCausalLM", Config: gemma, Seed: 5},
		{Arch: "Gemma2ForCausalLM", Config: gemma2, Seed: 9},
		{Arch: "GemmaForCausalLM", Config: gemma1, Seed: 18},
		{Arch: "SmolLM3ForCausalLM", Config: smol, Seed: 6},
		{Arch: "Olmo2ForCausalLM", Config: olmo, Seed: 7},
		{Arch: "Olmo3ForCausalLM", Config: olmo3, Seed: 8},
	}
}

// load writes a tiny checkpoint and loads it both ways: for the graph code
// (closed with the test) and for the reference.
func load(t *testing.T, tc lmckpt.Tiny) (*lm.Loaded, *lmref.Model) {
	t.Helper()
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rm, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	return l, rm
}

// TestLogitsMatchReference runs every tiny architecture in both modes on a
// batch of two prompts of different lengths (left padding) plus several
// decode steps, and compares every row's logits with the float64
// reference run on that row alone.
func TestLogitsMatchReference(t *testing.T) {
	be := refcheck.GoBackend(t)
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	// 24 steps take the 16-token prompt bucket past the first cache bucket
	// (32 slots), so the cache grows mid-generation.
	const steps = 24
	const tol = 1e-4
	for _, tc := range tinyCases() {
		t.Run(tc.Arch, func(t *testing.T) {
			l, rm := load(t, tc)
			// Reference token streams: greedy under the reference.
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			for _, variant := range []struct {
				name string
				opts Options
			}{
				{"compiled", Options{Mode: Compiled, SplitMatmul: 1}},
				{"compiled-auto", Options{Mode: Compiled}},
				// Blocked weights: 2+ row parts, column blocks of 16.
				{"eager-blocked", Options{Mode: Eager, SplitMatmul: 2, BlockCols: 16}},
			} {
				t.Run(variant.name, func(t *testing.T) {
					r, err := NewRunner(be, l, variant.opts)
					gen := r.NewState()
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					worst := 0.0
					defer func() { t.Logf("max relative error %.3g", worst) }()
					for _, batch := range [][]int{{0, 1}, {1}} {
						var in, want [][]int
						for _, b := range batch {
							in, want = append(in, prompts[b]), append(want, seqs[b])
						}
						t.Run(fmt.Sprintf("rows%v", batch), func(t *testing.T) {
							f := refcheck.TeacherForced(t, gen, rm, in, want, steps, tol)
							worst = math.Max(worst, f.Worst)
						})
					}
					grown := 0
					for _, p := range r.Stats().Programs {
						if p.Name == "grow-cache" {
							grown = p.Calls
						}
					}
					if grown != 2 {
						t.Errorf("the cache grew %d times, want once per generation (2)", grown)
					}
				})
			}
		})
	}
}

// TestBFloat16Compute runs the tiny Llama, Gemma 3, Cohere 2 (its
// rotary in f32, LayerNorms, the parallel block) and Ministral 3 (its
// query scale rounded to bf16) checkpoints (stored as BF16) with bfloat16
// compute on the go backend: logits stay within a few percent of the
// float64 reference.
// TestSwitchesMatter checks that TestLogitsMatchReference can fail where
// a family departs from Llama in one switch: the reference with that
// switch flipped (OLMo 1's clamp dropped, ERNIE 4.5's and Helium's rotary
// on halves instead of pairs, Command R+'s, StableLM 2 12B's and Phi's
// q/k LayerNorms dropped) gives
// other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}
	for _, c := range []struct {
		arch   string
		seed   uint64
		name   string
		mutate func(*lmref.Config)
	}{
		{"OlmoForCausalLM", 26, "no clip_qkv", func(c *lmref.Config) { c.ClipQKV = 0 }},
		{"Ernie4_5ForCausalLM", 28, "the rotary on halves", func(c *lmref.Config) { c.RopePairs = false }},
		{"Ernie4_5ForCausalLM", 29, "the rotary on halves", func(c *lmref.Config) { c.RopePairs = false }},
		{"HeliumForCausalLM", 30, "the rotary on halves", func(c *lmref.Config) { c.RopePairs = false }},
		{"CohereForCausalLM", 33, "no q/k LayerNorms", func(c *lmref.Config) { c.QKNorm = false }},
		{"HunYuanDenseV1ForCausalLM", 35, "no alpha on the rotary", func(c *lmref.Config) { c.RopeAlpha = 0 }},
		{"HunYuanDenseV1ForCausalLM", 35, "no q/k norms", func(c *lmref.Config) { c.QKNorm = false }},
		{"StableLmForCausalLM", 34, "no q/k LayerNorms", func(c *lmref.Config) { c.QKNorm = false }},
		{"PhiForCausalLM", 37, "no q/k LayerNorms", func(c *lmref.Config) { c.QKNorm = false }},
	} {
		t.Run(fmt.Sprint(c.arch, c.seed), func(t *testing.T) {
			var tc *lmckpt.Tiny
			for _, x := range tinyCases() {
				if x.Arch == c.arch && x.Seed == c.seed {
					tc = &x
				}
			}
			if tc == nil {
				t.Fatalf("no tiny case %s seed %d", c.arch, c.seed)
			}
			l, rm := load(t, *tc)
			mc := rm.C
			c.mutate(&mc)
			mutant := &lmref.Model{C: mc, W: rm.W}
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, refcheck.Mutant{Name: c.name, Logits: mutant.Logits})
		})
	}
}

func TestBFloat16Compute(t *testing.T) {
	be := refcheck.GoBackend(t)
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	for _, tc := range tinyCases() {
		switch tc.Arch {
		case "LlamaForCausalLM", "Gemma3ForCausalLM", "GemmaForCausalLM", "Cohere2ForCausalLM", "Ministral3ForCausalLM", "ApertusForCausalLM",
			"OlmoForCausalLM", "Olmo2ForCausalLM", "Ernie4_5ForCausalLM", "HeliumForCausalLM", "CohereForCausalLM", "StableLmForCausalLM",
			"HunYuanDenseV1ForCausalLM":
		default:
			continue
		}
		t.Run(tc.Arch, func(t *testing.T) {
			tc.DType = safetensors.BF16
			l, rm := load(t, tc)
			r, err := NewRunner(be, l, Options{DType: dtypes.BFloat16})
			gen := r.NewState()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			logits, err := gen.Prefill(prompts, 4)
			if err != nil {
				t.Fatal(err)
			}
			for b, p := range prompts {
				want := rm.Logits(p)
				if e := refcheck.RelErr(logits[b], want[len(p)-1]); e > 0.05 {
					t.Errorf("row %d: relative error %.3g > 0.05", b, e)
				} else {
					t.Logf("row %d: relative error %.3g", b, e)
				}
			}
		})
	}
}
