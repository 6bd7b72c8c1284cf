package lm_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	_ "github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// tiny writes a 2-layer Llama checkpoint and returns its directory.
func tiny(t *testing.T, tied bool) string {
	t.Helper()
	tc := lmckpt.LlamaShape(16, 2, 2, 24, 32)
	tc.Config.Tied = tied
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rewrite rewrites dir/model.safetensors through edit.
func rewrite(t *testing.T, dir string, edit func(map[string]safetensors.Tensor)) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	ck, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]safetensors.Tensor{}
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, _ := ck.Raw(n)
		m[n] = safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)}
	}
	ck.Close()
	edit(m)
	var ts []safetensors.Tensor
	for _, v := range m {
		ts = append(ts, v)
	}
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

func TestLoadStrict(t *testing.T) {
	const q = "model.layers.1.self_attn.q_proj.weight"
	for _, tc := range []struct {
		name string
		tied bool
		edit func(map[string]safetensors.Tensor)
		want string // "" for success
	}{
		{"ok", false, func(map[string]safetensors.Tensor) {}, ""},
		{"missing", false, func(m map[string]safetensors.Tensor) { delete(m, q) }, "missing tensors: " + q},
		{"unused", false, func(m map[string]safetensors.Tensor) {
			m["model.layers.0.mlp.extra.weight"] = safetensors.Tensor{Name: "model.layers.0.mlp.extra.weight", DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)}
		}, "unused tensors (this architecture does not read them): model.layers.0.mlp.extra.weight"},
		{"misshapen", false, func(m map[string]safetensors.Tensor) {
			v := m[q]
			v.Shape = []int{8, 32}
			m[q] = v
		}, q + ": shape [8 32], want [16 16]"},
		{"integer dtype", false, func(m map[string]safetensors.Tensor) {
			v := m[q]
			v.DType = safetensors.I32
			m[q] = v
		}, q + ": dtype I32"},
		{"rotary buffer ignored", false, func(m map[string]safetensors.Tensor) {
			n := "model.layers.0.self_attn.rotary_emb.inv_freq"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{4}, Data: make([]byte, 16)}
		}, ""},
		{"tied head equal", true, func(m map[string]safetensors.Tensor) {
			e := m["model.embed_tokens.weight"]
			e.Name = "lm_head.weight"
			m[e.Name] = e
		}, ""},
		{"tied head differs", true, func(m map[string]safetensors.Tensor) {
			e := m["model.embed_tokens.weight"]
			e.Name, e.Data = "lm_head.weight", make([]byte, len(e.Data))
			m[e.Name] = e
		}, "lm_head.weight differs from model.embed_tokens.weight"},
		{"untied head missing", false, func(m map[string]safetensors.Tensor) { delete(m, "lm_head.weight") }, "missing tensors: lm_head.weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tiny(t, tc.tied)
			rewrite(t, dir, tc.edit)
			l, err := lmckpt.Load(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				l.Close()
				return
			}
			if err == nil {
				l.Close()
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errs.ErrUnsupported) {
				t.Fatalf("error %q (unsupported: %v), want it to contain %q", err, errors.Is(err, errs.ErrUnsupported), tc.want)
			}
		})
	}
}

func TestUnknownArchitecture(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["FancyForCausalLM"]}`), 0o644)
	_, err := lmckpt.Load(dir)
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), `"FancyForCausalLM"`) || !strings.Contains(err.Error(), "LlamaForCausalLM") {
		t.Fatalf("err %v", err)
	}
}

func TestTensorConversions(t *testing.T) {
	dir := tiny(t, true)
	const n = "model.layers.0.mlp.up_proj.weight"
	var want []float32
	rewrite(t, dir, func(m map[string]safetensors.Tensor) {
		// Store one tensor as BF16 values that are exact in bfloat16.
		want = make([]float32, 24*16)
		for i := range want {
			want[i] = float32(i%7) - 3.5
		}
		v, _ := safetensors.Float32Tensor(n, safetensors.BF16, []int{24, 16}, want)
		m[n] = v
	})
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.Tensor(n, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Shape().Dimensions; len(d) != 2 || d[0] != 24 || d[1] != 16 {
		t.Fatalf("shape %v", f.Shape())
	}
	got := tensors.MustCopyFlatData[float32](f)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("float32[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	b, err := l.Tensor(n, dtypes.BFloat16)
	if err != nil {
		t.Fatal(err)
	}
	gb := tensors.MustCopyFlatData[bfloat16.BFloat16](b)
	for i := range want {
		if gb[i].Float32() != want[i] {
			t.Fatalf("bfloat16[%d] = %v, want %v", i, gb[i].Float32(), want[i])
		}
	}
	if _, err := l.Tensor(n, dtypes.Float16); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("float16 compute: %v", err)
	}
}

// TestTensorReportsNonFinite: Tensor reports a weight holding NaN/Inf to
// OnNonFinite, with the count and the first index, while converting it
// (F32, F16 and BF16 checkpoints, float32 and bfloat16 compute); the
// values are those converted without the hook, and finite weights are not
// reported.
func TestTensorReportsNonFinite(t *testing.T) {
	const n, finite = "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"
	for _, src := range []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16} {
		dir := tiny(t, true)
		rewrite(t, dir, func(m map[string]safetensors.Tensor) {
			vals := make([]float32, 24*16)
			for i := range vals {
				vals[i] = float32(i%7) - 3.5
			}
			vals[5], vals[300], vals[301] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
			v, _ := safetensors.Float32Tensor(n, src, []int{24, 16}, vals)
			m[n] = v
		})
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []safetensors.NonFiniteTensor
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			l.OnNonFinite = nil
			plain, err := l.Tensor(n, dt)
			if err != nil {
				t.Fatal(err)
			}
			l.OnNonFinite = func(nf safetensors.NonFiniteTensor) { got = append(got, nf) }
			checked, err := l.Tensor(n, dt)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := bits(plain), bits(checked); len(a) != 24*16 || !slices.Equal(a, b) {
				t.Errorf("%s -> %s: the checked conversion differs", src, dt)
			}
			if _, err := l.Tensor(finite, dt); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		want := safetensors.NonFiniteTensor{Name: n, DType: src, Count: 3, Elements: 24 * 16, First: 5}
		if len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("%s: reported %+v, want %+v twice", src, got, want)
		}
	}
}

// bits returns a float32 or bfloat16 tensor's elements as bit patterns.
func bits(t *tensors.Tensor) []uint32 {
	var out []uint32
	switch t.DType() {
	case dtypes.Float32:
		for _, v := range tensors.MustCopyFlatData[float32](t) {
			out = append(out, math.Float32bits(v))
		}
	case dtypes.BFloat16:
		for _, v := range tensors.MustCopyFlatData[bfloat16.BFloat16](t) {
			out = append(out, uint32(v))
		}
	}
	return out
}

// TestLoadBaseModel: a checkpoint saved from the bare decoder (tensor
// names without "model.", as sentence-transformers publishes
// Qwen3-Embedding) loads as the causal LM, each tensor under its causal-LM
// name with its own values; without its untied lm_head the head is tied to
// the embedding, and the notes say both. With the head it stays untied.
func TestLoadBaseModel(t *testing.T) {
	for _, withHead := range []bool{false, true} {
		dir := tiny(t, false)
		var embed []float32
		rewrite(t, dir, func(m map[string]safetensors.Tensor) {
			for n, v := range m {
				if n == "lm_head.weight" {
					if !withHead {
						delete(m, n)
					}
					continue
				}
				delete(m, n)
				v.Name = strings.TrimPrefix(n, "model.")
				m[v.Name] = v
			}
			e := m["embed_tokens.weight"]
			embed = make([]float32, 32*16)
			for i := range embed {
				embed[i] = float32(i%11) - 5
			}
			e, _ = safetensors.Float32Tensor("embed_tokens.weight", safetensors.F32, []int{32, 16}, embed)
			m[e.Name] = e
		})
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatalf("head %v: %v", withHead, err)
		}
		if got := l.Model.Spec().TieEmbeddings; got == withHead {
			t.Errorf("head %v: tied %v", withHead, got)
		}
		wantNotes := 2 // the renaming, the tied head
		if withHead {
			wantNotes = 1
		}
		if len(l.Notes) != wantNotes || !withHead && !strings.Contains(l.Notes[1], "lm_head") {
			t.Errorf("head %v: notes %q", withHead, l.Notes)
		}
		x, err := l.Tensor("model.embed_tokens.weight", dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		if got := tensors.MustCopyFlatData[float32](x); !slices.Equal(got, embed) {
			t.Errorf("head %v: model.embed_tokens.weight is not the stored embed_tokens.weight", withHead)
		}
		l.Close()
	}
}
