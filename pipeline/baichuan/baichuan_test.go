package baichuan_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/baichuan"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/baichuanref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny Baichuans of each kind (Baichuan 2
// 13B's ALiBi over 6 heads and normalized head over its vocabulary of
// 125,696; Baichuan-13B's ALiBi with a plain head; Baichuan-7B's rotary)
// on a left-padded batch of two prompts and decode steps, compiled and
// eager, on the go and cpu backends, against baichuanref's float64
// forward under the checkpoints' names; and in bfloat16 within a few
// percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		ref  baichuanref.Baichuan
	}{{"baichuan2-13b", baichuanref.Baichuan2_13B()}, {"baichuan-13b", baichuanref.Baichuan13B()}, {"baichuan-7b", baichuanref.Baichuan7B()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.ref.Write)
			if v := l.Model.(*baichuan.Model).Variant(); v.ALiBi != c.ref.ALiBi || v.NormHead != c.ref.NormHead {
				t.Fatalf("read as %+v, the release's code is %+v", v, c.ref)
			}
			rm, err := c.ref.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where the
// releases differ: Baichuan 2 13B read with a plain head, or with the
// rotary in place of ALiBi.
func TestSwitchesMatter(t *testing.T) {
	c := baichuanref.Baichuan2_13B()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain, rotary := &baichuanref.Model{C: rm.C, W: rm.W}, &baichuanref.Model{C: rm.C, W: rm.W}
	plain.C.NormHead, rotary.C.ALiBi = false, false
	prompt := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "a plain head", Logits: plain.Logits},
		refcheck.Mutant{Name: "the rotary", Logits: rotary.Logits})
}

// baichuan27b is baichuan-inc/Baichuan2-7B-Chat's config.json (auto_map
// left out).
const baichuan27b = `{"_from_model_config": true, "architectures": ["BaichuanForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
	"hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
	"model_max_length": 4096, "model_type": "baichuan", "num_attention_heads": 32, "num_hidden_layers": 32, "pad_token_id": 0,
	"rms_norm_eps": 1e-06, "tie_word_embeddings": false, "tokenizer_class": "BaichuanTokenizer", "torch_dtype": "bfloat16",
	"transformers_version": "4.29.2", "use_cache": true, "vocab_size": 125696, "z_loss_weight": 0}`

// baichuan213b is baichuan-inc/Baichuan2-13B-Chat's config.json
// (auto_map left out).
const baichuan213b = `{"architectures": ["BaichuanForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "gradient_checkpointing": false,
	"hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 13696, "model_max_length": 4096,
	"model_type": "baichuan", "num_attention_heads": 40, "num_hidden_layers": 40, "pad_token_id": 0, "rms_norm_eps": 1e-06,
	"tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.29.2", "use_cache": true,
	"vocab_size": 125696, "z_loss_weight": 0}`

// TestConfig reads Baichuan 2 7B's and 13B's config.json (7,505,973,248
// and 13,896,668,160 parameters): the rotary at hidden_size 4096 and
// ALiBi otherwise, NormHead over Baichuan 2's vocabulary; the renames;
// the refusals.
func TestConfig(t *testing.T) {
	for _, c := range []struct {
		name, cfg      string
		params         int64
		alibi, rotated bool
		layers, heads  int
	}{{"7b", baichuan27b, 7_505_973_248, false, true, 32, 32}, {"13b", baichuan213b, 13_896_668_160, true, false, 40, 40}} {
		m, err := lm.New(lmckpt.ParseConfig(t, c.cfg))
		if err != nil {
			t.Fatal(err)
		}
		bm := m.(*baichuan.Model)
		o, s, v := bm.Options(), m.Spec(), bm.Variant()
		if n := lmckpt.Params(m); n != c.params {
			t.Errorf("%s: %d parameters, want %d", c.name, n, c.params)
		}
		if v.ALiBi != c.alibi || o.ALiBi != c.alibi || (len(o.NoRope) > 0 && o.NoRope[0]) == c.rotated || !v.NormHead || s.Layers != c.layers || s.Heads != c.heads ||
			s.KVHeads != c.heads || s.MaxPositions != 4096 || !o.FusedQKV || o.QKVPerHead || s.TieEmbeddings || o.Eps != 1e-6 {
			t.Errorf("%s: spec %+v, options %+v, variant %+v", c.name, s, o, v)
		}
		if c.rotated && math.Abs(o.Rope.InvFreq[1]*math.Pow(10000, 2.0/128)-1) > 1e-12 {
			t.Errorf("%s: rotary base %v", c.name, o.Rope.InvFreq)
		}
		var head lm.WeightSpec
		for _, w := range m.HeadWeights() {
			if w.Name == "lm_head.weight" {
				head = w
			}
		}
		if !head.RowNormalized {
			t.Errorf("%s: lm_head not normalized: %+v", c.name, head)
		}
		if got := m.(lm.Renamer).RenameWeight("model.layers.3.self_attn.W_pack.weight"); got != "model.layers.3.self_attn.qkv_proj.weight" {
			t.Errorf("W_pack read as %s", got)
		}
	}
	// Baichuan-7B (BaiChuanForCausalLM) keeps the rotary at any width.
	_, v, err := baichuan.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["BaiChuanForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 64000}`))
	if err != nil || v.ALiBi || v.NormHead {
		t.Errorf("Baichuan-7B: %+v, %v", v, err)
	}
	for cfg, want := range map[string]string{
		`{"architectures": ["BaichuanForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}`:    "num_key_value_heads 2",
		`{"architectures": ["BaichuanForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "tie_word_embeddings": true}`: "tie_word_embeddings",
		`{"architectures": ["BaichuanForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32}`:              "head_dim 32",
	} {
		if _, _, err := baichuan.Resolve(lmckpt.ParseConfig(t, cfg)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}

// TestNormHeadStoredQuantized checks that a Baichuan 2 whose lm_head is
// stored quantized, in FP8 with its block scales or as GPTQ's packed
// 4-bit words (no lm_head.weight at all), is refused at load: its rows
// could not be normalized where an executor holds them as stored.
func TestNormHeadStoredQuantized(t *testing.T) {
	src := t.TempDir()
	if err := baichuanref.Baichuan2_13B().Write(src); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		format string
		head   func(x safetensors.Tensor) []safetensors.Tensor
		quant  map[string]any
	}{
		{"fp8", func(x safetensors.Tensor) []safetensors.Tensor { // E4M3 zeros, one scale a block of 16 × 16
			out, in := x.Shape[0], x.Shape[1]
			return []safetensors.Tensor{{Name: x.Name, DType: safetensors.F8E4M3, Shape: x.Shape, Data: make([]byte, out*in)},
				{Name: "lm_head.weight_scale_inv", DType: safetensors.F32, Shape: []int{out / 16, in / 16}, Data: make([]byte, 4*(out/16)*(in/16))}}
		}, map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{16, 16}}},
		{"packed", func(x safetensors.Tensor) []safetensors.Tensor { // GPTQ: 4-bit words along the input, groups of 16
			out, in := x.Shape[0], x.Shape[1]
			return []safetensors.Tensor{{Name: "lm_head.qweight", DType: safetensors.I32, Shape: []int{in / 8, out}, Data: make([]byte, 4*in/8*out)},
				{Name: "lm_head.qzeros", DType: safetensors.I32, Shape: []int{in / 16, out / 8}, Data: make([]byte, 4*in/16*out/8)},
				{Name: "lm_head.scales", DType: safetensors.F16, Shape: []int{in / 16, out}, Data: make([]byte, 2*in/16*out)}}
		}, map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": false, "sym": true, "checkpoint_format": "gptq"}},
	} {
		ts, cfg, err := lmckpt.Rewrap(src, func(n string) string { return n })
		if err != nil {
			t.Fatal(err)
		}
		var out []safetensors.Tensor
		for _, x := range ts {
			if x.Name == "lm_head.weight" {
				out = append(out, c.head(x)...)
			} else {
				out = append(out, x)
			}
		}
		cfg["architectures"] = []string{baichuan.Architecture}
		cfg["quantization_config"] = c.quant
		dir := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dir, cfg, out); err != nil {
			t.Fatal(err)
		}
		_, err = lmckpt.Load(dir)
		if err == nil || !strings.Contains(err.Error(), "lm_head.weight is stored "+c.format) {
			t.Errorf("%s: load: %v", c.format, err)
		}
	}
}
