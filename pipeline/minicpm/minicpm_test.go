package minicpm_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/minicpm"
	"github.com/tputool/tputool/pipeline/testkit/graniteref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// toMiniCPM writes the Granite in src as a MiniCPM release: the same
// tensors (Llama's names), the config with MiniCPMConfig's μP fields in
// place of Granite's multipliers: scale_emb the embedding multiplier,
// scale_depth the residual multiplier × √layers, dim_model_base the
// hidden size over the logits' divisor.
func toMiniCPM(t *testing.T, g graniteref.Granite, src, dst string) {
	t.Helper()
	ts, cfg, err := lmckpt.Rewrap(src, func(n string) string { return n })
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling", "mlp_bias"} {
		delete(cfg, k)
	}
	cfg["architectures"], cfg["model_type"] = []string{minicpm.Architecture}, "minicpm"
	cfg["scale_emb"] = g.EmbeddingMultiplier
	cfg["scale_depth"] = g.ResidualMultiplier * math.Sqrt(float64(g.Layers))
	cfg["dim_model_base"] = float64(g.Hidden) / g.LogitsScaling
	if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
		t.Fatal(err)
	}
}

// TestLogitsMatchReference writes tiny Granites whose attention scale is
// Llama's (tied, as MiniCPM 2B, and untied, as MiniCPM4) as MiniCPM
// releases and runs them on a left-padded batch and decode steps,
// compiled and eager, on the go and cpu backends, against graniteref's
// float64 forward; each μP scaling left out must differ.
func TestLogitsMatchReference(t *testing.T) {
	for _, tied := range []bool{true, false} {
		g := graniteref.TinyGranite()
		g.AttentionMultiplier = 1 / math.Sqrt(float64(g.Hidden/g.Heads))
		g.LogitsScaling, g.Tied = 4, tied
		src := t.TempDir()
		if err := g.Write(src); err != nil {
			t.Fatal(err)
		}
		rm, err := g.Load(src)
		if err != nil {
			t.Fatal(err)
		}
		_, l := lmckpt.WriteLoad(t, func(dir string) error { toMiniCPM(t, g, src, dir); return nil })
		moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)
		mutant := func(m graniteref.Mistakes) func([]int) [][]float64 {
			return (&graniteref.Model{C: rm.C, W: rm.W, Mistakes: m}).Logits
		}
		prompt := prompts[1]
		refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
			refcheck.Mutant{Name: "no scale_emb", Logits: mutant(graniteref.Mistakes{NoEmbeddingMultiplier: true})},
			refcheck.Mutant{Name: "no scale_depth", Logits: mutant(graniteref.Mistakes{NoResidualMultiplier: true})},
			refcheck.Mutant{Name: "no dim_model_base", Logits: mutant(graniteref.Mistakes{NoLogitsScaling: true})})
	}
}

// minicpm2b is openbmb/MiniCPM-2B-sft-bf16's config.json (auto_map left
// out).
const minicpm2b = `{"_name_or_path": "openbmb/CPM-2B", "architectures": ["MiniCPMForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
	"hidden_act": "silu", "hidden_size": 2304, "initializer_range": 0.1, "intermediate_size": 5760, "max_position_embeddings": 4096,
	"num_attention_heads": 36, "num_hidden_layers": 40, "num_key_value_heads": 36, "rms_norm_eps": 1e-05, "rope_scaling": null,
	"torch_dtype": "bfloat16", "transformers_version": "4.36.0", "use_cache": true, "vocab_size": 122753, "scale_emb": 12,
	"dim_model_base": 256, "scale_depth": 1.4}`

// TestConfig reads MiniCPM 2B's config.json (2,724,880,896 parameters):
// its μP scalings and the tied head (MiniCPMConfig's default); longrope's
// factors chosen from max_position_embeddings, as MiniCPMLongRoPE caches
// them; sparse_config's dense_len; the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, minicpm2b))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 2_724_880_896 {
		t.Errorf("%d parameters, want 2,724,880,896", n)
	}
	if s.Layers != 40 || s.Heads != 36 || s.HeadDim != 64 || !s.TieEmbeddings || o.EmbedScale != 12 ||
		math.Abs(o.ResidualScale-1.4/math.Sqrt(40)) > 1e-15 || o.LogitsDivisor != 9 || s.MaxPositions != 4096 || o.Eps != 1e-5 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	short, long := make([]float64, 16), make([]float64, 16)
	for i := range short {
		short[i], long[i] = 1+float64(i)/16, 4+float64(i)
	}
	o2, err := minicpm.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["MiniCPMForCausalLM"], "hidden_size": 128, "num_attention_heads": 4,
		"num_key_value_heads": 2, "max_position_embeddings": 65536, "tie_word_embeddings": false, "scale_emb": 12, "scale_depth": 1.4,
		"dim_model_base": 32, "rope_scaling": {"rope_type": "longrope", "short_factor": `+floats(short)+`, "long_factor": `+floats(long)+`,
		"original_max_position_embeddings": 32768}, "sparse_config": {"kernel_size": 32, "block_size": 64, "topk": 64, "dense_len": 8192}}`))
	if err != nil {
		t.Fatal(err)
	}
	// max_position_embeddings passes the original: the long factors
	// divide the frequencies at every position; the attention factor is
	// √(1 + ln 2 / ln 32768); dense_len bounds the context.
	if r := o2.Rope; r.LongInvFreq != nil || o2.Spec.RopeSwitch != 0 || o2.Spec.MaxPositions != 8192 ||
		math.Abs(r.InvFreq[3]*long[3]*math.Pow(10000, 6.0/32)-1) > 1e-12 || math.Abs(r.AttentionFactor-math.Sqrt(1+math.Log(2)/math.Log(32768))) > 1e-12 {
		t.Errorf("longrope past the original: %+v, spec %+v", o2.Rope, o2.Spec)
	}
	// Equal to it: the short factors, a factor of 1, the whole context.
	o3, err := minicpm.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["MiniCPMForCausalLM"], "hidden_size": 128, "num_attention_heads": 4,
		"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "longrope", "short_factor": `+floats(short)+`, "long_factor": `+floats(long)+`,
		"original_max_position_embeddings": 32768}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := o3.Rope; r.LongInvFreq != nil || o3.Spec.RopeSwitch != 0 || o3.Spec.MaxPositions != 32768 ||
		math.Abs(r.InvFreq[3]*short[3]*math.Pow(10000, 6.0/32)-1) > 1e-12 || r.AttentionFactor != 1 {
		t.Errorf("longrope at the original: %+v, spec %+v", o3.Rope, o3.Spec)
	}
	for cfg, want := range map[string]string{
		`{"architectures": ["MiniCPMForCausalLM"], "use_mup": false}`:              "use_mup false",
		`{"architectures": ["MiniCPMForCausalLM"], "dim_model_base": 0}`:           "dim_model_base must be positive",
		`{"architectures": ["MiniCPMForCausalLM"], "sparse_config": {"topk": 64}}`: "dense_len",
	} {
		if _, err := minicpm.Resolve(lmckpt.ParseConfig(t, cfg)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}

func floats(v []float64) string {
	var b strings.Builder
	b.WriteString("[")
	for i, x := range v {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	}
	b.WriteString("]")
	return b.String()
}
