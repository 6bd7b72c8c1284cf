package compile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/nomicbert" // NomicBertModel
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/nomicbertref"
)

// TestEmbedNomicBert: NomicBERT encoders, written with the Hub's tensor
// names (nomicbertref), give through Embed the pooled last hidden states
// of the float64 reference written from contrastors'
// modeling_hf_nomic_bert.py, for a batch of inputs of unequal lengths
// (left-padded together: each row's rotary positions and padding mask its
// own), by the mean, the first and the last token, in both modes on both
// CPU backends. The configs cover nomic-embed-text-v1.5's (SwiGLU, no
// biases, base 1000, two token types), a gated MLP whose n_inner the
// reference rounds up to 256 rows, biases everywhere with a pooler stored
// (skipped), half the head dims rotated, GeGLU, and a plain MLP under
// gelu_new (exact gelu in the reference) without token types, and
// nomic-embed-text-v2-moe's mixture-of-experts layers (megablocks' dMoE:
// the experts' matrices split from their stored tensors), with GELU
// experts and with SwiGLU ones.
func TestEmbedNomicBert(t *testing.T) {
	v15 := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 3, Heads: 4, MaxPositions: 64}
	rounded := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 40, Layers: 2, Heads: 2, MaxPositions: 64,
		QKVBias: true, FC1Bias: true, FC2Bias: true, Pooler: true, RotaryFraction: 0.5, RotaryBase: 10000, Eps: 1e-5}
	geglu := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 2, Heads: 4, MaxPositions: 64, Act: "geglu", FC2Bias: true}
	plain := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 48, Layers: 2, Heads: 4, MaxPositions: 64, Act: "gelu_new", TypeVocab: -1, FC1Bias: true}
	// nomic-embed-text-v2-moe's layout: every second layer 8 GELU experts
	// of which 2 run, undivided, biases everywhere, one token type; and a
	// SwiGLU variant whose top 3 are divided by their sum.
	v2moe := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 48, Layers: 4, Heads: 4, MaxPositions: 64, Act: "gelu", TypeVocab: 1,
		QKVBias: true, FC1Bias: true, FC2Bias: true, RotaryBase: 10000, Eps: 1e-5, Experts: 8, TopK: 2, EveryN: 2}
	gluMoE := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 3, Heads: 4, MaxPositions: 64, Experts: 4, TopK: 3, EveryN: 2,
		NormalizeWeights: true}
	for n, c := range []nomicbertref.Config{v15, rounded, geglu, plain, v2moe, gluMoE} {
		dir := t.TempDir()
		if err := nomicbertref.Write(dir, c, uint64(7+n)); err != nil {
			t.Fatal(err)
		}
		l := loadDir(t, dir)
		if s := l.Model.Spec(); !s.Encoder || s.MaxPositions != 64 || s.TokenTypes != c.TypeVocabSize() || s.Intermediate != c.MLPWidth() {
			t.Fatalf("config %d: spec %+v: want an encoder of 64 positions, %d token types, MLP width %d", n, s, c.TypeVocabSize(), c.MLPWidth())
		}
		prompts := modernInputs(uint64(3+n), c.Vocab, 9, 1, 23, 5)
		want := map[Pooling][][]float64{}
		for _, p := range prompts {
			h, err := nomicbertref.Forward(dir, c, p)
			if err != nil {
				t.Fatal(err)
			}
			want[PoolMean] = append(want[PoolMean], bertref.Pool(h, "mean", false))
			want[PoolCLS] = append(want[PoolCLS], bertref.Pool(h, "cls", false))
			want[PoolLast] = append(want[PoolLast], bertref.Pool(h, "last", false))
		}
		for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
			for _, mode := range []Mode{Compiled, Eager} {
				t.Run(fmt.Sprintf("config%d/%s/%s", n, be.Name(), mode), func(t *testing.T) {
					run, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					checkPoolings(t, run, prompts, want)
				})
			}
		}
	}
}

// TestNomicBertExpertsMatter checks that TestEmbedNomicBert can fail where
// nomic-embed-text-v2-moe's layers are their own: the reference without
// the experts' bias, with the top weights divided by their sum, with each
// expert's slice of w2 read as an [out, in] matrix, or with the experts'
// rows of w1 and w2 taken interleaved gives mean embeddings far from the
// model's, which match the reference's.
func TestNomicBertExpertsMatter(t *testing.T) {
	c := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 48, Layers: 4, Heads: 4, MaxPositions: 64, Act: "gelu", TypeVocab: 1,
		QKVBias: true, FC1Bias: true, FC2Bias: true, RotaryBase: 10000, Eps: 1e-5, Experts: 8, TopK: 2, EveryN: 2}
	dir := t.TempDir()
	if err := nomicbertref.Write(dir, c, 21); err != nil {
		t.Fatal(err)
	}
	l := loadDir(t, dir)
	run, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	prompt := modernInputs(5, c.Vocab, 17)[0]
	got, err := run.Embed([][]int{prompt}, PoolMean)
	if err != nil {
		t.Fatal(err)
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		t.Fatal(err)
	}
	E, I, H := c.Experts, c.Inner, c.Hidden
	changed := func(f func(cfg *nomicbertref.Config, w map[string][]float64)) (nomicbertref.Config, map[string][]float64) {
		cw := map[string][]float64{}
		for n, v := range w {
			cw[n] = append([]float64(nil), v...)
		}
		cc := c
		f(&cc, cw)
		return cc, cw
	}
	each := func(w map[string][]float64, suffix string, f func(v []float64) []float64) {
		for n, v := range w {
			if strings.HasSuffix(n, suffix) {
				w[n] = f(v)
			}
		}
	}
	for _, m := range []struct {
		name string
		f    func(cfg *nomicbertref.Config, w map[string][]float64)
	}{
		{"as written", func(*nomicbertref.Config, map[string][]float64) {}},
		{"no experts' bias", func(_ *nomicbertref.Config, w map[string][]float64) {
			each(w, "mlp.experts.bias", func(v []float64) []float64 { return make([]float64, len(v)) })
		}},
		{"weights divided", func(cfg *nomicbertref.Config, _ map[string][]float64) { cfg.NormalizeWeights = true }},
		{"w2 read as [out, in]", func(_ *nomicbertref.Config, w map[string][]float64) {
			each(w, "mlp.experts.mlp.w2", func(v []float64) []float64 {
				out := make([]float64, len(v))
				for e := range E { // the reference reads out[f·H+i]; a model reading [H, I] takes v[i·I+f]
					s, o := v[e*I*H:(e+1)*I*H], out[e*I*H:(e+1)*I*H]
					for f := range I {
						for i := range H {
							o[f*H+i] = s[i*I+f]
						}
					}
				}
				return out
			})
		}},
		{"experts interleaved", func(_ *nomicbertref.Config, w map[string][]float64) {
			for _, suffix := range []string{"mlp.experts.mlp.w1", "mlp.experts.mlp.w2"} {
				each(w, suffix, func(v []float64) []float64 {
					out := make([]float64, len(v))
					for e := range E {
						for f := range I {
							copy(out[(e*I+f)*H:(e*I+f+1)*H], v[(f*E+e)*H:(f*E+e+1)*H])
						}
					}
					return out
				})
			}
		}},
	} {
		cc, cw := changed(m.f)
		h, err := nomicbertref.ForwardWeights(cw, cc, prompt)
		if err != nil {
			t.Fatal(err)
		}
		want := bertref.Pool(h, "mean", false)
		var worst float64
		for j, x := range got[0] {
			worst = max(worst, math.Abs(float64(x)-want[j]))
		}
		if m.name == "as written" && worst > 2e-5 || m.name != "as written" && worst < 1e-3 {
			t.Errorf("%s: largest difference from the model %.3g", m.name, worst)
		}
	}
}

// TestNomicBertV2MoEConfig: nomic-embed-text-v2-moe's sizes (a
// config.json of its keys) give 475,292,928 parameters, 305,423,616 of
// them active a token (the card's 475M and 305M), experts on the six odd
// layers.
func TestNomicBertV2MoEConfig(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["NomicBertModel"], "model_type": "nomic_bert", "activation_function": "gelu",
		"n_embd": 768, "n_head": 12, "n_layer": 12, "n_inner": 3072, "n_positions": 2048, "vocab_size": 250048, "pad_vocab_size_multiple": 64,
		"type_vocab_size": 1, "rotary_emb_fraction": 1.0, "rotary_emb_base": 10000, "rotary_emb_interleaved": false,
		"qkv_proj_bias": true, "mlp_fc1_bias": true, "mlp_fc2_bias": true, "layer_norm_epsilon": 1e-05, "prenorm": false,
		"num_experts": 8, "moe_top_k": 2, "moe_every_n_layers": 2, "moe_normalize_expert_weights": false, "moe_impl": "megablocks",
		"num_shared_experts": 0, "expert_choice_router": false, "ffn_div": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n != 475_292_928 {
		t.Errorf("%d parameters, want 475,292,928", n)
	}
	var sparse []int
	var idle int64 // the experts a token leaves: 6 of 8 in each sparse layer
	for i := range m.Spec().Layers {
		for _, w := range m.LayerWeights(i) {
			if strings.HasSuffix(w.Name, "experts.up_proj") || strings.HasSuffix(w.Name, "experts.down_proj") {
				idle += int64(w.Shape[0]*w.Shape[1]*w.Shape[2]) * 6 / 8
				if strings.HasSuffix(w.Name, "up_proj") {
					sparse = append(sparse, i)
				}
			}
		}
	}
	if active := lmckpt.Params(m) - idle; active != 305_423_616 || fmt.Sprint(sparse) != "[1 3 5 7 9 11]" {
		t.Errorf("%d active parameters, want 305,423,616; experts on layers %v", active, sparse)
	}
}

// TestNomicBertRefuses: native transformers' config layout is refused by
// name (exit 3), as are the features the embedding models do not use,
// among them the mixture-of-experts options nomic-embed-text-v2-moe
// leaves off.
func TestNomicBertRefuses(t *testing.T) {
	c := nomicbertref.Config{Vocab: 64, Hidden: 32, Inner: 256, Layers: 2, Heads: 4, MaxPositions: 64}
	moe := func(extra map[string]any) map[string]any {
		m := map[string]any{"num_experts": 8, "moe_top_k": 2, "moe_every_n_layers": 2}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for key, val := range map[string]any{"prenorm": true, "rotary_emb_interleaved": true, "rotary_emb_fraction": 0.0,
		"num_shared_experts": moe(map[string]any{"num_shared_experts": 1}), "expert_choice_router": moe(map[string]any{"expert_choice_router": true}),
		"moe_impl": moe(map[string]any{"moe_impl": "contrastors"}), "moe_normalize_expert_weights": moe(map[string]any{"moe_normalize_expert_weights": 2}),
		"activation_function": moe(map[string]any{"activation_function": "geglu"})} {
		dir := t.TempDir()
		if err := nomicbertref.Write(dir, c, 1); err != nil {
			t.Fatal(err)
		}
		cfg := c.ConfigJSON()
		if m, ok := val.(map[string]any); ok { // several keys, the one named among them
			for k, v := range m {
				cfg[k] = v
			}
		} else {
			cfg[key] = val
		}
		writeJSONFile(t, dir+"/config.json", cfg)
		if _, err := lmckpt.Load(dir); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s %v: %v, want ErrUnsupported naming it", key, val, err)
		}
	}
	dir := t.TempDir()
	if err := nomicbertref.Write(dir, c, 1); err != nil {
		t.Fatal(err)
	}
	cfg := c.ConfigJSON()
	cfg["hidden_size"] = cfg["n_embd"]
	delete(cfg, "n_embd")
	writeJSONFile(t, dir+"/config.json", cfg)
	if _, err := lmckpt.Load(dir); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "native") {
		t.Errorf("native layout: %v, want ErrUnsupported naming it", err)
	}
}

// writeJSONFile writes v as JSON to path.
func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
