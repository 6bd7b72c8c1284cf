package dbrx_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/dbrx"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dbrxref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny DBRXs (one with the clamp biting,
// grouped-query attention and the top weights over their sum; one with
// neither clamp nor division and a single key/value head) on a
// left-padded batch of two prompts and decode steps, with each experts
// formulation, compiled and eager, on the go and cpu backends, against
// dbrxref's float64 forward under the checkpoints' own names; and a
// bfloat16 checkpoint (the split views two bytes an element, the
// transposed experts decoded from them) in bfloat16 compute within a few
// percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		dbrx dbrxref.Dbrx
	}{{"clamped", dbrxref.Tiny()}, {"unclipped", dbrxref.Unclipped()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.dbrx.Write)
			rm, err := c.dbrx.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
	bf := dbrxref.Tiny()
	bf.DType = safetensors.BF16
	dir, l := lmckpt.WriteLoad(t, bf.Write)
	rm, err := bf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
}

// TestSwitchesMatter checks that the test above can fail where DBRX's
// reading is its own: each expert's slice of w2 read as an [out, in]
// matrix (not transposed), the experts' rows taken interleaved
// ([ffn, experts, d_model]), no clamp, or the top weights not divided by
// their sum give other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	c := dbrxref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	unnormalized := &dbrxref.Model{C: rm.C, W: rm.W}
	unnormalized.C.Unnormalized = true
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "w2 not transposed", Logits: (&dbrxref.Model{C: rm.C, W: rm.W, DownAsOut: true}).Logits},
		refcheck.Mutant{Name: "experts interleaved", Logits: (&dbrxref.Model{C: rm.C, W: rm.W, Interleaved: true}).Logits},
		refcheck.Mutant{Name: "no clamp", Logits: (&dbrxref.Model{C: rm.C, W: rm.W, NoClip: true}).Logits},
		refcheck.Mutant{Name: "weights not divided", Logits: unnormalized.Logits})
}

// instruct is databricks/dbrx-instruct's config.json.
func instruct(attn, ffn string) string {
	return `{"architectures": ["DbrxForCausalLM"], "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "model_type": "", "rope_theta": 500000` + attn + `},
	"d_model": 6144, "emb_pdrop": 0.0, "ffn_config": {"ffn_hidden_size": 10752, "model_type": "", "moe_jitter_eps": 0.01,
	"moe_loss_weight": 0.05, "moe_num_experts": 16, "moe_top_k": 4` + ffn + `}, "initializer_range": 0.02, "max_seq_len": 32768,
	"model_type": "dbrx", "n_heads": 48, "n_layers": 40, "output_router_logits": false, "resid_pdrop": 0.0,
	"router_aux_loss_coef": 0.05, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
	"use_cache": true, "vocab_size": 100352}`
}

// TestConfig reads dbrx-instruct's config.json (131,596,523,520
// parameters, the card's 132B, 36,469,708,800 of them active: the card's
// 36B) and refuses what it cannot run, naming the field; the names the
// checkpoint's tensors are read under, and the split's refusal of a
// misshapen expert tensor.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, instruct("", "")))
	if err != nil {
		t.Fatal(err)
	}
	d := m.(*dbrx.Model)
	o, s := d.Options(), m.Spec()
	if n := lmckpt.Params(m); n != 131_596_523_520 {
		t.Errorf("%d parameters, want 131,596,523,520", n)
	}
	active := 131_596_523_520 - int64(s.Layers)*int64(o.Experts-o.TopK)*3*int64(o.MoEIntermediate)*int64(s.Hidden)
	if active != 36_469_708_800 {
		t.Errorf("%d active parameters, want 36,469,708,800", active)
	}
	if s.Heads != 48 || s.KVHeads != 8 || s.HeadDim != 128 || s.MaxPositions != 32768 || s.TieEmbeddings || o.Experts != 16 ||
		o.TopK != 4 || o.MoEIntermediate != 10752 || !o.NormTopK || o.ClipQKV != 8 || !o.FusedQKV || !o.LayerNorm || !o.NormNoBias ||
		o.Eps != 1e-5 || math.Abs(o.Rope.InvFreq[1]-math.Pow(500000, -2.0/128)) > 1e-15 || o.Rope.RotaryDim != 128 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	for stored, want := range map[string]string{
		"transformer.wte.weight":                                   "model.embed_tokens.weight",
		"transformer.norm_f.weight":                                "model.norm.weight",
		"transformer.blocks.7.norm_attn_norm.norm_1.weight":        "model.layers.7.input_layernorm.weight",
		"transformer.blocks.7.norm_attn_norm.attn.Wqkv.weight":     "model.layers.7.self_attn.qkv_proj.weight",
		"transformer.blocks.7.norm_attn_norm.attn.out_proj.weight": "model.layers.7.self_attn.o_proj.weight",
		"transformer.blocks.7.norm_attn_norm.norm_2.weight":        "model.layers.7.post_attention_layernorm.weight",
		"transformer.blocks.7.ffn.router.layer.weight":             "model.layers.7.mlp.gate.weight",
		"lm_head.weight": "lm_head.weight",
	} {
		if got := d.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	pieces, err := d.SplitWeight("transformer.blocks.39.ffn.experts.mlp.w2", []int{16 * 10752, 6144})
	if err != nil || len(pieces) != 16 || pieces[15].Name != "model.layers.39.mlp.experts.15.down_proj.weight" ||
		pieces[15].Shape[0] != 10752 || pieces[15].Shape[1] != 6144 {
		t.Errorf("w2 split as %v, %v", pieces, err)
	}
	if _, err := d.SplitWeight("transformer.blocks.3.ffn.experts.mlp.v1", []int{16 * 10752, 6000}); err == nil ||
		!strings.Contains(err.Error(), "transformer.blocks.3.ffn.experts.mlp.v1 has shape [172032 6000]; the config implies [172032, 6144]") {
		t.Errorf("misshapen v1: %v", err)
	}
	if p, err := d.SplitWeight("transformer.blocks.40.ffn.experts.mlp.w1", []int{16 * 10752, 6144}); p != nil || err != nil {
		t.Errorf("a layer past n_layers split: %v, %v", p, err)
	}
	if _, err := dbrx.Resolve(lmckpt.ParseConfig(t, instruct("", `, "moe_normalize_expert_weights": null`))); err != nil {
		t.Errorf("moe_normalize_expert_weights null: %v", err)
	} else if o, _ := dbrx.Resolve(lmckpt.ParseConfig(t, instruct("", `, "moe_normalize_expert_weights": null`))); o.NormTopK {
		t.Error("moe_normalize_expert_weights null divides the weights")
	}
	for _, bad := range []struct {
		attn, ffn, want string
		unsupported     bool
	}{
		{"", `, "moe_normalize_expert_weights": 2`, "moe_normalize_expert_weights is 2", true},
		{"", `, "ffn_act_fn": {"name": "swish2"}`, `ffn_act_fn's name "swish2"`, true},
		{`, "clip_qkv": 0`, "", "clip_qkv is 0", false},
		{"", `, "moe_top_k": 17`, "moe_top_k 17 must be in [1, moe_num_experts 16]", false},
	} {
		js := instruct(bad.attn, bad.ffn)
		js = strings.Replace(js, `"clip_qkv": 8, `, "", strings.Count(bad.attn, "clip_qkv"))
		js = strings.Replace(js, `, "moe_top_k": 4`, "", strings.Count(bad.ffn, "moe_top_k"))
		_, err := dbrx.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") || errors.Is(err, errs.ErrUnsupported) != bad.unsupported {
			t.Errorf("%s%s: error %v, want one naming config.json and %q (unsupported %v)", bad.attn, bad.ffn, err, bad.want, bad.unsupported)
		}
	}
	if _, err := dbrx.Resolve(lmckpt.ParseConfig(t, strings.Replace(instruct("", ""), `"tie_word_embeddings": false`, `"tie_word_embeddings": true`, 1))); err == nil ||
		!strings.Contains(err.Error(), "tie_word_embeddings") {
		t.Errorf("tied: %v", err)
	}
}

// TestMisshapenExperts: a checkpoint whose expert tensors do not hold the
// config's experts (ffn_hidden_size says 20, the tensors hold 24) does
// not load, and the error names the stored tensor, its shape and the
// shape the config implies, not the pieces it would have been split into.
func TestMisshapenExperts(t *testing.T) {
	c := dbrxref.Tiny()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	cfg := c.ConfigJSON()
	cfg["ffn_config"].(map[string]any)["ffn_hidden_size"] = 20
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := lmckpt.Load(dir)
	want := "tensor transformer.blocks.0.ffn.experts.mlp.v1 has shape [96 32]; the config implies [80, 32] (moe_num_experts 4 × ffn_hidden_size 20, d_model 32) (and 8 more such tensors)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

// storedShapes is a tensor list as inspect reads headers.
type storedShapes map[string][]int

func (s storedShapes) Names() []string {
	var out []string
	for n := range s {
		out = append(out, n)
	}
	return out
}

func (s storedShapes) Shape(name string) ([]int, bool) { v, ok := s[name]; return v, ok }

// TestStoredWeights: the tensors StoredWeights lists, split and renamed
// as the loader reads them, are exactly the ones the model expects.
func TestStoredWeights(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, instruct("", "")))
	if err != nil {
		t.Fatal(err)
	}
	src := storedShapes{}
	for _, w := range m.(lm.StoredLayout).StoredWeights() {
		src[w.Name] = w.Shape
	}
	if len(src) != 3+40*8 {
		t.Errorf("%d stored tensors, want %d", len(src), 3+40*8)
	}
	if ps := lm.Expect(m, src).Problems(); len(ps) > 0 {
		t.Errorf("%d problems, the first %v", len(ps), ps[0])
	}
	// A checkpoint holding an expert's matrix apart as well as the fused
	// tensor it would be split from: the split is refused by name, as
	// loading refuses it (safetensors.Checkpoint.Split).
	src["model.layers.0.mlp.experts.3.gate_proj.weight"] = []int{10752, 6144}
	ps := lm.Expect(m, src).Problems()
	if len(ps) == 0 || !strings.Contains(fmt.Sprint(ps), `transformer.blocks.0.ffn.experts.mlp.w1: piece "model.layers.0.mlp.experts.3.gate_proj.weight" is already a tensor`) {
		t.Errorf("a piece stored twice: problems %v", ps)
	}
}

// TestHostileSizes: sizes no model has, at the top level or in
// attn_config and ffn_config, are refused naming the field, before any
// table is sized by them.
func TestHostileSizes(t *testing.T) {
	for _, c := range []struct{ js, want string }{
		{strings.Replace(instruct("", ""), `"n_layers": 40`, `"n_layers": 1e12`, 1), "n_layers"},
		{strings.Replace(instruct("", ""), `"d_model": 6144`, `"d_model": 1099511627776`, 1), "d_model"},
		{instruct(`, "kv_n_heads": 1000000000`, ""), "attn_config.kv_n_heads"},
		{instruct("", `, "ffn_hidden_size": 1099511627776`), "ffn_config.ffn_hidden_size"},
		{instruct("", `, "moe_num_experts": 1000000000`), "ffn_config.moe_num_experts"},
		{strings.Replace(instruct("", ""), `"n_heads": 48`, `"n_heads": 0`, 1), "n_heads is 0"},
	} {
		js := c.js
		for _, dup := range []string{`"kv_n_heads": 8, `, `"ffn_hidden_size": 10752, `, `"moe_num_experts": 16, `} {
			if strings.Count(js, strings.SplitN(dup, ":", 2)[0]) > 1 {
				js = strings.Replace(js, dup, "", 1)
			}
		}
		if _, err := lm.New(lmckpt.ParseConfig(t, js)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming it", c.want, err)
		}
	}
}

// TestTransposedExperts: an expert's down projection, a piece of w2
// stored [ffn, d_model], reads as its transpose whichever way it is
// decoded: straight into the stored dtype (bf16 into bfloat16, f32 into
// float32: the elements moved, not converted) or widened (bf16 into
// float32); and a NaN and an infinity in it are reported, the first
// found at its place in the transposed matrix, the same either way.
func TestTransposedExperts(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F32} {
		c := dbrxref.Tiny()
		c.DType = dt
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		// Expert 2's slice of layer 1's w2: row f (of ffn), column i (of
		// d_model) is the down projection's [i, f].
		const name = "transformer.blocks.1.ffn.experts.mlp.w2"
		e, F, H := 2, c.FFN, c.Hidden
		ck, err := safetensors.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, n := range ck.Names() {
			info, _ := ck.Info(n)
			raw, _ := ck.Raw(n)
			ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
			if n == name {
				vals, _ := ck.Float32(n)
				vals[(e*F+5)*H+3], vals[(e*F+7)*H+1] = float32(math.NaN()), float32(math.Inf(1))
				v, _ := safetensors.Float32Tensor(n, dt, info.Shape, vals)
				ts[len(ts)-1] = v
			}
		}
		ck.Close()
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		stored, err := lmckpt.ReadFloat64(dir)
		if err != nil {
			t.Fatal(err)
		}
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []safetensors.NonFiniteTensor
		l.OnNonFinite = func(nf safetensors.NonFiniteTensor) { got = append(got, nf) }
		part := "model.layers.1.mlp.experts.2.down_proj.weight"
		for _, compute := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			x, err := l.Tensor(part, compute)
			if err != nil {
				t.Fatal(err)
			}
			var vals []float32
			if compute == dtypes.Float32 {
				vals = tensors.MustCopyFlatData[float32](x)
			} else {
				for _, v := range tensors.MustCopyFlatData[bfloat16.BFloat16](x) {
					vals = append(vals, v.Float32())
				}
			}
			if d := x.Shape().Dimensions; len(d) != 2 || d[0] != H || d[1] != F {
				t.Fatalf("%s into %s: shape %v, want [%d %d]", dt, compute, d, H, F)
			}
			for i := 0; i < H; i++ {
				for f := 0; f < F; f++ {
					want := float32(stored[name][(e*F+f)*H+i])
					if compute == dtypes.BFloat16 {
						want = bfloat16.BFloat16(safetensors.Float32ToBF16(want)).Float32()
					}
					if g := vals[i*F+f]; g != want && !(math.IsNaN(float64(g)) && math.IsNaN(float64(want))) {
						t.Fatalf("%s into %s: [%d, %d] = %g, want %g", dt, compute, i, f, g, want)
					}
				}
			}
		}
		l.Close()
		// First is the first found in the stored order (the NaN, stored
		// before the infinity), at its place in the transposed matrix.
		want := safetensors.NonFiniteTensor{Name: part, DType: dt, Count: 2, Elements: int64(H * F), First: int64(3*F + 5)}
		if len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("%s: reported %+v, want %+v twice", dt, got, want)
		}
	}
}
