package inspect_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/qwen35"
	"github.com/tputool/tputool/tpu"
)

// writeSparseCheckpoint writes a safetensors file whose header lists the
// given BF16 tensors and whose data is a hole (a sparse file): inspect reads
// only headers, so a 9B-parameter checkpoint costs no disk.
func writeSparseCheckpoint(t *testing.T, path string, names []string, shapes map[string][]int) {
	writeSparseTyped(t, path, names, shapes, nil)
}

// elements is the number of values of a tensor of shape dims.
func elements(dims []int) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= int64(d)
	}
	return n
}

// released lists weights as a release stores them, for a header-only
// checkpoint: an expert stack as its parts, one tensor per expert.
type released struct {
	names  []string
	shapes map[string][]int
}

// inspect writes the listed tensors as dir's sparse checkpoint, resolves
// dir and inspects it under o.
func (r *released) inspect(t *testing.T, dir string, o inspect.Options) *inspect.Report {
	t.Helper()
	writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), r.names, r.shapes)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := inspect.Run(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// add lists ws and returns their parameter count (the model's, stacks
// whole).
func (r *released) add(ws ...lm.WeightSpec) int64 {
	if r.shapes == nil {
		r.shapes = map[string][]int{}
	}
	var n int64
	for _, w := range ws {
		n += elements(w.Shape)
		stored := w.Parts
		if len(stored) == 0 {
			stored = []lm.WeightSpec{w}
		}
		for _, p := range stored {
			r.names = append(r.names, p.Name)
			r.shapes[p.Name] = p.Shape
		}
	}
	return n
}

// realConfig copies testdata/configs/NAME/config.json (a release's
// config, see its SOURCE.md where it was assembled) into a temporary
// directory and returns it with the model the architecture builds from it.
func realConfig(t *testing.T, name string) (string, lm.Model) {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join("../../testdata/configs", name, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseModel(raw)
	if err != nil {
		t.Fatal(err)
	}
	model, err := lm.New(cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return dir, model
}

// writeSparseTyped is writeSparseCheckpoint with the dtype of each tensor
// named in dtypes (U8 or BF16; BF16 for the others).
func writeSparseTyped(t *testing.T, path string, names []string, shapes map[string][]int, dtypes map[string]string) {
	t.Helper()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, n := range names {
		dt, size := "BF16", int64(2)
		if dtypes[n] == "U8" {
			dt, size = "U8", 1
		}
		for _, d := range shapes[n] {
			size *= int64(d)
		}
		header[n] = map[string]any{"dtype": dt, "shape": shapes[n], "data_offsets": []int64{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	if _, err := f.Write(append(n[:], h...)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 + int64(len(h)) + off); err != nil {
		t.Fatal(err)
	}
}

// TestQwen35_9B inspects the real Qwen/Qwen3.5-9B config with a header-only
// checkpoint holding the text model's tensors (names and shapes from
// pipeline/qwen35, i.e. the real index) plus vision-tower and MTP tensors:
// the KV cache covers only the 8 full-attention layers, the 24 Gated
// DeltaNet layers add a fixed state equal to what tputool allocates
// (pipeline/qwen35's LayerState), the vision and MTP tensors are reported
// as outside the text-only path, and in bf16 the model does not fit one
// v5e chip.
func TestQwen35_9B(t *testing.T) {
	dir, model := realConfig(t, "qwen3_5_9b")
	var names []string
	shapes := map[string][]int{}
	var textParams int64
	for _, w := range lm.Weights(model) {
		names = append(names, w.Name)
		shapes[w.Name] = w.Shape
		textParams += elements(w.Shape)
	}
	for n, s := range map[string][]int{
		"model.visual.patch_embed.proj.weight":        {1152, 3, 2, 16, 16},
		"model.visual.blocks.0.attn.qkv.weight":       {3456, 1152},
		"model.visual.blocks.0.mlp.linear_fc1.weight": {4304, 1152},
		"model.visual.merger.linear_fc2.weight":       {4096, 4608},
		"mtp.fc.weight":                               {4096, 8192},
		"mtp.layers.0.mlp.gate_proj.weight":           {12288, 4096},
	} {
		names = append(names, n)
		shapes[n] = s
	}
	writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), names, shapes)

	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ctxLen = 32768
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: ctxLen, DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text.FullAttentionLayers != 8 || r.Text.LinearAttentionLayers != 24 {
		t.Errorf("layers: %d full, %d linear; want 8 and 24", r.Text.FullAttentionLayers, r.Text.LinearAttentionLayers)
	}
	// The state tputool allocates, from the model itself.
	var kv, rec int64
	for i := 0; i < model.Spec().Layers; i++ {
		for _, s := range model.LayerState(i, 1, ctxLen) {
			n := int64(2) // bf16 compute dtype
			if s.DType != dtypes.InvalidDType {
				n = int64(s.DType.Size())
			}
			for _, d := range s.Shape {
				n *= int64(d)
			}
			if model.LayerKind(i) == lm.KindFull {
				kv += n
			} else {
				rec += n
			}
		}
	}
	if want := int64(8 * 2 * 4 * 256 * ctxLen * 2); kv != want {
		t.Fatalf("model KV cache %d, want %d (8 layers × K,V × 4 heads × 256 × %d × 2 bytes)", kv, want, ctxLen)
	}
	if r.Memory.KVCache != kv {
		t.Errorf("inspect KV cache %d bytes, want %d (full-attention layers only)", r.Memory.KVCache, kv)
	}
	if r.Memory.Recurrent != rec {
		t.Errorf("inspect recurrent state %d bytes, want %d (24 × (conv [3, 8192] bf16 + delta-rule [32, 128, 128] f32))", r.Memory.Recurrent, rec)
	}
	if r.Params.Used != textParams {
		t.Errorf("used parameters %d, want the text model's %d", r.Params.Used, textParams)
	}
	if r.Memory.Weights != 2*textParams {
		t.Errorf("weights %d bytes, want %d", r.Memory.Weights, 2*textParams)
	}
	kinds := fmt.Sprint(r.Skipped)
	if len(r.Skipped) != 2 {
		t.Errorf("skipped groups %s, want vision and mtp", kinds)
	}
	if notes := fmt.Sprint(r.Notes); !strings.Contains(notes, "is loaded by generate --mtp and chat --mtp") {
		t.Errorf("notes %s: none says what the MTP head is for", notes)
	}
	found := false
	for _, f := range r.Fit {
		if f.Generation != "v5e" {
			continue
		}
		found = true
		if f.Fits && f.Chips == 1 {
			t.Errorf("v5e row %+v: Qwen3.5-9B in bf16 (%d bytes of weights) must not fit one 16 GiB chip", f, r.Memory.Weights)
		}
		if f.Chips < 2 {
			t.Errorf("v5e row %+v: want at least 2 chips", f)
		}
		t.Logf("v5e: %d chips (TP %d), %d bytes per chip of %d", f.Chips, f.TP, f.PerChipBytes, f.HBMBytes)
	}
	if !found {
		t.Error("no v5e row in the fit table")
	}
	t.Logf("text params %d; KV %d B; recurrent %d B", textParams, kv, rec)
}

// TestQwen35MoE35B inspects the Qwen3.5-35B-A3B config
// (testdata/configs/qwen3_5_35b_a3b, see its SOURCE.md) with a header-only
// checkpoint of the text model's tensors in the release's layout (fused,
// suffix-less expert stacks) plus vision-tower tensors: the tower is
// skipped, the text model holds 34.7B parameters (the card's 35B counts
// the vision tower and the MTP layer too) and 3.5B are active per token
// (8 of 256 experts beside the attention, DeltaNet and shared experts; the
// card's name says A3B).
func TestQwen35MoE35B(t *testing.T) {
	dir, model := realConfig(t, "qwen3_5_35b_a3b")
	var names []string
	shapes := map[string][]int{}
	var params int64
	for _, w := range lm.Weights(model) {
		names = append(names, w.Name)
		shapes[w.Name] = w.Shape
		params += elements(w.Shape)
	}
	names = append(names, "model.visual.blocks.0.attn.qkv.weight")
	shapes["model.visual.blocks.0.attn.qkv.weight"] = []int{3456, 1152}
	writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), names, shapes)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 8192, DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Params.Used != params {
		t.Errorf("used %d, the architecture reads %d", r.Params.Used, params)
	}
	if b := float64(params) / 1e9; b < 34.5 || b > 34.8 {
		t.Errorf("text model %.3fB parameters, want 34.7B", b)
	}
	if a := float64(r.Params.Active) / 1e9; a < 3.4 || a > 3.5 {
		t.Errorf("active %.3fB, want 3.46B", a)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 256 || r.Text.MoE.ExpertsPerToken != 8 {
		t.Errorf("MoE %+v, want 256 experts, 8 per token", r.Text.MoE)
	}
	t.Logf("%.3fB, active %.3fB, weights %d GiB in bf16, KV at 8192 %d MiB", float64(params)/1e9, float64(r.Params.Active)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20)
}

// TestQwen3Next80B inspects the Qwen3-Next-80B-A3B config
// (testdata/configs/qwen3_next_80b_a3b, see its SOURCE.md) with a
// header-only checkpoint in the release's layout: 73,728 expert tensors,
// one per expert and projection, the fused DeltaNet projections, and the
// MTP head (mtp.*), which the text path skips and --mtp loads. The
// weights read count 79.67B parameters (the card's 80B; 79B without the
// embedding and head), about 3.9B active per token (10 of 512 experts
// beside the shared one, attention and DeltaNet; the card's A3B counts
// them without the embeddings), and the fit table: its 148 GiB of bf16
// weights fit one v7x chip, or 8 v6e chips at a TP degree of 8, above its
// two KV heads.
func TestQwen3Next80B(t *testing.T) {
	dir, model := realConfig(t, "qwen3_next_80b_a3b")
	var rel released
	params := rel.add(lm.Weights(model)...)
	mt, err := model.(lm.MultiToken).WithMTP()
	if err != nil {
		t.Fatal(err)
	}
	head := rel.add(mt.MTPWeights()...)
	if experts := len(rel.names) - len(lm.Weights(model)); experts < 48*512*3 {
		t.Fatalf("%d tensors beyond the stacks, want the 73,728 experts' parts", experts)
	}
	writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), rel.names, rel.shapes)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fitReq tpu.FitRequest
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 32768, DType: "bf16",
		Fit: func(req tpu.FitRequest) ([]tpu.FitResult, error) { fitReq = req; return tpu.FitAll(req) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Params.Used != params {
		t.Errorf("used %d, the architecture reads %d", r.Params.Used, params)
	}
	// The k/v projections of the 12 attention layers, bf16: whole on
	// every chip at a TP degree above the 2 KV heads.
	if want := int64(12 * 2 * 512 * 2048 * 2); fitReq.KVWeightBytes != want {
		t.Errorf("fit request's k/v projection bytes %d, want %d", fitReq.KVWeightBytes, want)
	}
	// The 36 DeltaNet layers' state is whole on every chip; every KV cache
	// has the model's 2 KV heads.
	if fitReq.WholeStateBytes != r.Memory.State.Recurrent || fitReq.WholeStateBytes == 0 {
		t.Errorf("fit request's whole state %d, want the recurrent state's %d", fitReq.WholeStateBytes, r.Memory.State.Recurrent)
	}
	if b := float64(params) / 1e9; b < 79.6 || b > 79.7 {
		t.Errorf("%.3fB parameters, want 79.67B", b)
	}
	if a := float64(r.Params.Active) / 1e9; a < 3.8 || a > 4.0 {
		t.Errorf("active %.3fB, want about 3.9B", a)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 512 || r.Text.MoE.ExpertsPerToken != 10 {
		t.Errorf("MoE %+v, want 512 experts, 10 per token", r.Text.MoE)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "generate --mtp") {
		t.Errorf("notes %q: want the MTP head's", r.Notes)
	}
	t.Logf("%.3fB, active %.3fB, MTP head %.2fB, weights %d GiB in bf16, KV at 32768 %d MiB", float64(params)/1e9, float64(r.Params.Active)/1e9,
		float64(head)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20)
	// 148 GiB of bf16 weights: one v7x chip (192 GiB) holds them; v6e's
	// 32 GiB chips take 8 (TP 8, above the 2 KV heads: each chip holds
	// the KV projections and caches whole).
	fits := map[string]string{}
	for _, f := range r.Fit {
		t.Logf("%s: fits %v on %d chips (TP %d), %d GiB a chip; %s", f.Generation, f.Fits, f.Chips, f.TP, f.PerChipBytes>>30, f.Reason)
		fits[f.Generation] = fmt.Sprintf("%v %d %d %s", f.Fits, f.Chips, f.TP, f.Reason)
	}
	if fits["v7x"] != "true 1 1 " || fits["v6e"] != "true 8 8 " {
		t.Errorf("fit table %q", fits)
	}
}
