package inspect_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/gpt2ref"
)

// stories copies the shipped 260K Llama into a temporary folder with its
// config.json edited by edit, and inspects it at batch 1, context 100, f32.
func inspectStories(t *testing.T, edit func(cfg map[string]any)) *inspect.Report {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "stories260K-hf")
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 100, DType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestArchitectureMatches(t *testing.T) {
	r := inspectStories(t, func(map[string]any) {})
	if !r.Supported || len(r.Mismatches) != 0 {
		t.Fatalf("supported %v, mismatches %+v; want a clean Llama", r.Supported, r.Mismatches)
	}
	// 5 layers x K,V x 4 KV heads x head_dim 8 x 100 positions x 4 bytes.
	if want := int64(5 * 2 * 4 * 8 * 100 * 4); r.Memory.KVCache != want || r.Memory.Recurrent != 0 {
		t.Errorf("state %+v, want KV %d and no recurrent state", r.Memory.State, want)
	}
}

func TestArchitectureNamesMissingTensor(t *testing.T) {
	r := inspectStories(t, func(cfg map[string]any) { cfg["num_hidden_layers"] = 6 })
	if len(r.Mismatches) == 0 {
		t.Fatal("no mismatch for a config with one layer more than the weights")
	}
	first := r.Mismatches[0]
	if first.Kind != "missing" || !strings.HasPrefix(first.Tensor, "model.layers.5.") || !strings.Contains(first.Message, first.Tensor) {
		t.Errorf("first mismatch %+v, want a missing model.layers.5 tensor named in the message", first)
	}
	for _, m := range r.Mismatches {
		if m.Kind != "missing" || !strings.HasPrefix(m.Tensor, "model.layers.5.") {
			t.Errorf("mismatch %+v: only layer 5 is missing", m)
		}
	}
}

func TestArchitectureNamesContradictingShape(t *testing.T) {
	r := inspectStories(t, func(cfg map[string]any) { cfg["vocab_size"] = 1000 })
	i := slices.IndexFunc(r.Mismatches, func(m inspect.Mismatch) bool { return m.Tensor == "model.embed_tokens.weight" })
	if i < 0 {
		t.Fatalf("mismatches %+v: want model.embed_tokens.weight", r.Mismatches)
	}
	m := r.Mismatches[i]
	if m.Kind != "misshapen" || !slices.Equal(m.Shape, []int{512, 64}) || !slices.Equal(m.Want, []int{1000, 64}) {
		t.Errorf("mismatch %+v, want shape [512 64] where the config implies [1000 64]", m)
	}
}

func TestArchitectureRefusedConfig(t *testing.T) {
	r := inspectStories(t, func(cfg map[string]any) { cfg["hidden_size"] = 1e9; cfg["vocab_size"] = 1e12 })
	if len(r.Mismatches) != 1 || r.Mismatches[0].Kind != "config" || !strings.Contains(r.Mismatches[0].Message, "hidden_size") {
		t.Errorf("mismatches %+v, want the config refused naming hidden_size", r.Mismatches)
	}
}

func TestArchitectureNotRun(t *testing.T) {
	r := inspectStories(t, func(cfg map[string]any) { cfg["architectures"] = []string{"RwkvForCausalLM"} })
	if r.Supported || len(r.Mismatches) != 0 {
		t.Errorf("supported %v, mismatches %+v; want neither for an architecture tputool does not run", r.Supported, r.Mismatches)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "tputool does not run RwkvForCausalLM") {
		t.Errorf("notes %q", r.Notes)
	}
}

// resolve parses a --model value and resolves it, as the commands do.
func resolve(ctx context.Context, model string, o loader.Options) (*loader.Checkpoint, error) {
	ref, err := loader.ParseRef(model)
	if err != nil {
		return nil, err
	}
	return loader.ResolveRef(ctx, ref, o)
}

func TestKVCacheInt8NotRun(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "stories260K-hf")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		raw, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "config.json" {
			raw = []byte(strings.Replace(string(raw), `"LlamaForCausalLM"`, `"RwkvForCausalLM"`, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.Run(context.Background(), m, inspect.Options{KVDType: dtypes.Int8}); err == nil || !strings.Contains(err.Error(), "tputool does not run RwkvForCausalLM") {
		t.Errorf("int8 KV cache of RwkvForCausalLM: %v, want refused naming it", err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Context: 100, KVDType: dtypes.Float32})
	if err != nil {
		t.Fatal(err)
	}
	if r.Memory.KVCache != 100*5*2*4*8*4 || r.Memory.KVCacheDType != "f32" {
		t.Errorf("f32 KV cache of RwkvForCausalLM (the config's shape): %d bytes (%q), want %d", r.Memory.KVCache, r.Memory.KVCacheDType, 100*5*2*4*8*4)
	}
}

// TestEncoderContext: an encoder (BERT) is inspected at its positions
// unless --context says otherwise, keeps no KV cache, says that it gives
// embeddings, and its pooler and position_ids buffer are the tensors it
// skips.
func TestEncoderContext(t *testing.T) {
	dir := t.TempDir()
	c := bertref.Config{Vocab: 50, Hidden: 16, Layers: 2, Heads: 2, Intermediate: 24, MaxPositions: 64, TypeVocab: 2, Eps: 1e-12, Pooler: true, PositionIDs: true}
	if err := bertref.Write(dir, c, 1); err != nil {
		t.Fatal(err)
	}
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []int{0, 32} {
		r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 2, Context: ctx, DType: "f32"})
		if err != nil {
			t.Fatal(err)
		}
		want := ctx
		if ctx == 0 {
			want = 64
		}
		// No KV cache: an encoder keeps nothing between steps.
		if !r.Supported || len(r.Mismatches) != 0 || r.Memory.Context != want || r.Memory.KVCache != 0 {
			t.Errorf("context %d: supported %v, mismatches %+v, memory %+v; want context %d", ctx, r.Supported, r.Mismatches, r.Memory, want)
		}
		notes := strings.Join(r.Notes, "\n")
		if !strings.Contains(notes, "BertModel is an encoder: it gives embeddings") || !strings.Contains(notes, "keeps no KV cache") || strings.Contains(notes, "exceeds") {
			t.Errorf("context %d: notes %q", ctx, r.Notes)
		}
		if len(r.Skipped) == 0 {
			t.Errorf("context %d: the pooler and buffer are not listed as skipped", ctx)
		}
	}
}

// TestCausalMaskBuffers: a GPT-2 checkpoint's causal-mask buffers, which
// the model skips, are reported as buffers not loaded, not as the
// text-only path of a multimodal checkpoint.
func TestCausalMaskBuffers(t *testing.T) {
	dir := t.TempDir()
	c := gpt2ref.Tiny()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 20, DType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	// Each of the 3 layers: attn.bias [1, 1, 40, 40] and the scalar
	// attn.masked_bias.
	if !r.Supported || len(r.Skipped) != 1 || r.Skipped[0].Kind != "buffer" || r.Skipped[0].Tensors != 6 || r.Skipped[0].Params != 3*(1600+1) {
		t.Errorf("supported %v, skipped %+v", r.Supported, r.Skipped)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "6 buffer tensors") || strings.Contains(notes, "text-only") {
		t.Errorf("notes %q", notes)
	}
}
