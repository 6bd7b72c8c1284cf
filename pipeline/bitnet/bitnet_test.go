package bitnet_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/bitnet"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"

	_ "github.com/tputool/tputool/pipeline/qwen2"
)

// TestConfig: bitnet-b1.58-2B-4T's sizes (30 layers, hidden 2560, 20
// heads of 128 over 5, MLP 6912, vocabulary 128256, tied) give
// 2,412,820,480 parameters (the card's 2B, its 2.4B with the embedding),
// the two sub norms in every layer; BitNetConfig's defaults; a
// quantization_config the loader does not read is refused by name.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["BitNetForCausalLM"], "hidden_act": "relu2", "hidden_size": 2560,
		"intermediate_size": 6912, "max_position_embeddings": 4096, "model_type": "bitnet", "num_attention_heads": 20,
		"num_hidden_layers": 30, "num_key_value_heads": 5, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
		"tie_word_embeddings": true, "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128001,
		"quantization_config": {"linear_class": "autobitlinear", "quant_method": "bitnet", "quantization_mode": "offline"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n != 2_412_820_480 {
		t.Errorf("%d parameters, want 2,412,820,480", n)
	}
	o := m.(*llama.Model).Options()
	if !o.SubNorms || o.Spec.BitNet == nil || o.Spec.BitNet.Divide || o.Spec.KVHeads != 5 || !o.Spec.TieEmbeddings {
		t.Errorf("options %+v, BitNet %+v", o, o.Spec.BitNet)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = true
	}
	if !names["model.layers.0.self_attn.attn_sub_norm.weight"] || !names["model.layers.0.mlp.ffn_sub_norm.weight"] {
		t.Errorf("layer 0's weights %v lack the sub norms", names)
	}
	d, err := bitnet.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["BitNetForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Spec; s.Hidden != 2560 || s.KVHeads != 5 || s.BOS != 128000 || fmt.Sprint(s.EOS) != "[128001]" || s.TieEmbeddings {
		t.Errorf("BitNetConfig's defaults: %+v", s)
	}
	for _, bad := range []struct{ q, want string }{
		{`{"quant_method": "bitnet", "quantization_mode": "online"}`, "quantization_mode \"online\""},
		{`{"quant_method": "bitnet", "linear_class": "bitlinear2"}`, "linear_class"},
		{`{"quant_method": "bitnet", "use_rms_norm": true}`, "use_rms_norm"},
		{`{"quant_method": "bitnet", "modules_to_not_convert": ["lm_head", "down_proj"]}`, "modules_to_not_convert \"down_proj\""},
		{`{"quant_method": "bitnet", "linear_class": "autobitlinear"}, "attention_bias": true`, "attention_bias"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["BitNetForCausalLM"], "quantization_config": `+bad.q+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error naming %s", bad.q, err, bad.want)
		}
	}
	_, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Qwen2ForCausalLM"], "quantization_config": {"quant_method": "bitnet"}}`))
	if err == nil || !strings.Contains(err.Error(), "bitnet") {
		t.Errorf("bitnet on Qwen2: %v, want it refused", err)
	}
}

// tiny is a small BitNet: 3 layers, hidden 32, 4 heads of 8 over 2, MLP
// 48 (every output width a multiple of 4, as the releases'), untied.
func tiny() lmckpt.Tiny {
	c := lmref.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5, BitNet: true, BitNetQuant: true}
	c.RopeTheta, c.Window = []float64{500000, 500000, 500000}, []int{0, 0, 0}
	return lmckpt.Tiny{Arch: "BitNetForCausalLM", Config: c, Seed: 31}
}

// quantized writes the tiny BitNet in float and its BitNet copy, and
// loads the copy and its float64 reference.
func quantized(t *testing.T, auto bool) (dir string, l *lm.Loaded, rm *lmref.Model) {
	_, dir, l, rm = quantizedOf(t, tiny(), auto)
	return dir, l, rm
}

// quantizedOf is quantized for the tiny model tc; src is the float
// checkpoint the copy quantizes.
func quantizedOf(t *testing.T, tc lmckpt.Tiny, auto bool) (src, dir string, l *lm.Loaded, rm *lmref.Model) {
	t.Helper()
	src = t.TempDir()
	if err := tc.Write(src); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "bitnet")
	if err := lmckpt.WriteBitNetCopy(src, dir, auto); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c := tc.Config
	c.BitNetDivide = !auto
	rm, err = lmref.Load(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	return src, dir, l, rm
}

// TestPackTernary: lmckpt's packing reproduces the example of
// transformers' unpack_weights docstring: the unpacked [8, 2] codes
// [[0,-1],[-1,1],[-1,1],[-1,1],[1,0],[0,-1],[1,-1],[1,-1]] are the packed
// bytes [[0b10100001, 0b00011000], [0b10010000, 0b00001010]]. It anchors
// the layout that the loader and lmref read.
func TestPackTernary(t *testing.T) {
	codes := []float32{0, -1, -1, 1, -1, 1, -1, 1, 1, 0, 0, -1, 1, -1, 1, -1}
	packed, mean := lmckpt.PackTernary(codes, 8, 2)
	if want := []byte{0b10100001, 0b00011000, 0b10010000, 0b00001010}; string(packed) != string(want) {
		t.Errorf("packed %08b, want %08b", packed, want)
	}
	if mean != 13.0/16 {
		t.Errorf("mean |w| %g, want 13/16", mean)
	}
}

// TestWeightsDecode: every projection the loader decodes equals, bit for
// bit, the reference's unpacking of the stored bytes (transformers'
// unpack_weights, times or over weight_scale), under both linear
// classes, and its codes are the float source's round(w / mean|w|),
// clamped (transformers' WeightQuant); held as int8 (the CPU engine's
// form) the codes times their group's scale are the same values; the
// head and the norms are read as stored.
func TestWeightsDecode(t *testing.T) {
	for _, auto := range []bool{true, false} {
		src, dir, l, rm := quantizedOf(t, tiny(), auto)
		float, err := lmckpt.ReadFloat64(src)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := lmckpt.ReadFloat64(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, w := range l.Weights() {
			if !strings.HasSuffix(w.Name, "_proj.weight") {
				continue
			}
			got := make([]float32, len(rm.W[w.Name]))
			if err := l.DecodeInto(w.Name, got); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if want := float32(rm.W[w.Name][i]); v != want {
					t.Fatalf("autobitlinear %v: %s[%d] = %g, want %g", auto, w.Name, i, v, want)
				}
			}
			src := float[w.Name]
			mean := 0.0
			for _, v := range src {
				mean += math.Abs(v)
			}
			mean /= float64(len(src))
			scale := raw[strings.TrimSuffix(w.Name, "weight")+"weight_scale"][0]
			if !auto {
				scale = 1 / scale
			}
			for i, v := range src {
				code := math.Max(-1, math.Min(1, math.RoundToEven(v/mean)))
				if math.Abs(float64(got[i])-code*scale) > 1e-6*math.Abs(scale) {
					t.Fatalf("autobitlinear %v: %s[%d] = %g, want code %g × %g", auto, w.Name, i, got[i], code, scale)
				}
			}
			// Held as int8 on the CPU engine: the codes, the matrix's scale
			// in every group (a row whole: no width here is a multiple of 64).
			group, ok := l.StoredInt8Groups(w.Name)
			in := w.Shape[1]
			if !ok || group != in {
				t.Fatalf("%s: held as int8 %v in groups of %d, want rows of %d", w.Name, ok, group, in)
			}
			q, sc := make([]int8, len(got)), make([]float32, len(got)/group)
			if err := l.Int8GroupsInto(w.Name, q, sc); err != nil {
				t.Fatal(err)
			}
			for i, v := range q {
				if float32(v)*sc[i/group] != got[i] {
					t.Fatalf("%s[%d]: int8 %d × %g, decoded %g", w.Name, i, v, sc[i/group], got[i])
				}
			}
			n++
		}
		if n != 3*7 {
			t.Errorf("%d projections decoded, want 21", n)
		}
	}
}

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs the tiny BitNet, quantized by each
// linear class, on a left-padded batch of two prompts plus decode
// steps, compiled and eager on the go and cpu backends, against lmref's
// float64 BitNetForCausalLM (its own unpacking, sub norms, relu² and
// per-token int8 activations); and checks the comparison can fail: a
// reference that unpacks the rows interleaved (row 4j+s from bits 2s of
// stored row j), applies weight_scale the other way, or leaves the
// activations float gives other logits.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprint("autobitlinear=", auto), func(t *testing.T) {
			dir, l, rm := quantized(t, auto)
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)

			raw, err := lmckpt.ReadFloat64(dir)
			if err != nil {
				t.Fatal(err)
			}
			inter := map[string][]float64{}
			for name, v := range rm.W {
				inter[name] = v
				if sc, ok := raw[strings.TrimSuffix(name, "weight")+"weight_scale"]; ok {
					in := rm.C.Hidden
					if strings.HasSuffix(name, "down_proj.weight") {
						in = rm.C.Intermediate
					}
					inter[name] = interleaved(raw[name], in, sc[0], auto)
				}
			}
			flip := rm.C
			flip.BitNetDivide = !flip.BitNetDivide
			flipped, err := lmref.Load(dir, flip)
			if err != nil {
				t.Fatal(err)
			}
			floatActs := rm.C
			floatActs.BitNetFloatActs = true
			prompt := prompts[1]
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
				refcheck.Mutant{Name: "rows unpacked interleaved", Logits: (&lmref.Model{C: rm.C, W: inter}).Logits},
				refcheck.Mutant{Name: "weight_scale applied the other way", Logits: flipped.Logits},
				refcheck.Mutant{Name: "float activations", Logits: (&lmref.Model{C: floatActs, W: rm.W}).Logits})
		})
	}
}

// interleaved unpacks packed [out/4, in] (as float64 bytes) the wrong
// way: output row 4j+s from bits 2s..2s+1 of stored row j, minus one,
// times scale (over it when not auto).
func interleaved(packed []float64, in int, scale float64, auto bool) []float64 {
	if !auto {
		scale = 1 / scale
	}
	rows := len(packed) / in
	out := make([]float64, 4*len(packed))
	for j := 0; j < rows; j++ {
		for s := 0; s < 4; s++ {
			for i := 0; i < in; i++ {
				out[(4*j+s)*in+i] = float64((int(packed[j*in+i])>>(2*s))&3-1) * scale
			}
		}
	}
	return out
}

// TestLlama158: a LlamaForCausalLM with a BitNet quantization_config (the
// Llama-architecture 1.58-bit releases: BitLinear, the class's default,
// which divides by weight_scale) quantizes every projection's input as
// BitNet does, without BitNet's sub norms: within 1e-4 of lmref's
// float64 Llama reading the same copy, compiled and eager.
func TestLlama158(t *testing.T) {
	c := tiny().Config
	c.BitNet = false
	tc := lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 32}
	_, _, l, rm := quantizedOf(t, tc, false)
	if l.Model.Spec().BitNet == nil || !l.Model.Spec().BitNet.Divide {
		t.Fatalf("BitNet %+v, want BitLinear's", l.Model.Spec().BitNet)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 6), 6, 1e-4)
}

// TestHeldInGroups: projections whose input width is a multiple of 64
// are held as int8 in groups of 64 (--quantize int8's), the matrix's one
// scale in each, and read back exactly.
func TestHeldInGroups(t *testing.T) {
	tc := tiny()
	tc.Config.Hidden, tc.Config.HeadDim, tc.Config.Intermediate, tc.Config.Layers = 64, 16, 128, 1
	tc.Config.RopeTheta, tc.Config.Window = tc.Config.RopeTheta[:1], tc.Config.Window[:1]
	_, _, l, _ := quantizedOf(t, tc, true)
	n := 0
	for _, w := range l.Weights() {
		if !strings.HasSuffix(w.Name, "_proj.weight") {
			continue
		}
		group, ok := l.StoredInt8Groups(w.Name)
		if !ok || group != 64 {
			t.Fatalf("%s: held as int8 %v in groups of %d, want 64", w.Name, ok, group)
		}
		got := make([]float32, w.Shape[0]*w.Shape[1])
		if err := l.DecodeInto(w.Name, got); err != nil {
			t.Fatal(err)
		}
		q, sc := make([]int8, len(got)), make([]float32, len(got)/group)
		if err := l.Int8GroupsInto(w.Name, q, sc); err != nil {
			t.Fatal(err)
		}
		for i, v := range q {
			if float32(v)*sc[i/group] != got[i] || sc[i/group] != sc[0] {
				t.Fatalf("%s[%d]: int8 %d × %g, decoded %g (scale 0: %g)", w.Name, i, v, sc[i/group], got[i], sc[0])
			}
		}
		n++
	}
	if n != 7 {
		t.Errorf("%d projections, want 7", n)
	}
}
