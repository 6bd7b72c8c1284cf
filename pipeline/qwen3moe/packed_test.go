package qwen3moe_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// TestPackedExperts: a GPTQ (4 and 8 bits), AWQ, FP8 or NVFP4 checkpoint
// of a Qwen3-MoE that stores each expert on its own (as the Hub's
// quantized MoE releases do: every expert's projections packed, E4M3 with
// block scales, or NVFP4) loads. On the cpu backend the experts stay as
// stored (grouped int4, FP8, int8, NVFP4): as stacks assembled from the
// parts in the graph formulation, and as the parts themselves held apart
// (--experts dense, and host, whose programs take each expert's weights
// with their scales, codes or tables); the go backend decodes them. All
// agree to f32 rounding (the weights are the checkpoint's exactly either
// way), each holds what lm.Loaded.HeldBytes estimates, the cpu backend
// less than decoded, and the logits stay within 4-bit rounding of the
// float64 reference of the original weights; so do the cpu backend's in
// bf16 compute (experts in the graph and on the host), held as stored.
func TestPackedExperts(t *testing.T) {
	for _, format := range []string{"gptq", "awq", "fp8", "gptq8", "nvfp4"} { // AWQ: zero points, so mins; gptq8: 8 bits; nvfp4: stacks as stored, a table a part
		t.Run(format, func(t *testing.T) { checkPackedExperts(t, format) })
	}
}

// writeMoECopy writes the tiny Qwen3-MoE, its experts 32 wide (whole
// groups of 32 in every projection), to a temporary folder and its copy
// by write to another, and returns the model and the two folders.
func writeMoECopy(t *testing.T, write func(src, dir string) error) (c qwenref.MoE, src, dir string) {
	t.Helper()
	c = qwenref.TinyQwen3MoE()
	c.MoEIntermediate = 32
	src, dir = t.TempDir(), t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := write(src, dir); err != nil {
		t.Fatal(err)
	}
	return c, src, dir
}

// nvfp4Copy writes an NVFP4 (compressed-tensors) copy of src to dir.
func nvfp4Copy(src, dir string) error {
	return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "nvfp4"})
}

func checkPackedExperts(t *testing.T, format string) {
	write := func(src, dir string) error {
		return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: format, Group: 32})
	}
	switch format {
	case "fp8":
		write = func(src, dir string) error { return lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{Block: 16}) }
	case "gptq8":
		write = func(src, dir string) error {
			return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "gptq", Group: 32, Bits: 8})
		}
	}
	c, src, dir := writeMoECopy(t, write)
	rm, err := qwenref.LoadMoE(src, c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tables := 0            // NVFP4: the tables of half-scales held, 1 KiB each
	if format == "nvfp4" { // every expert stack as stored, a table a part (gate_up's two, down's one)
		stacks := 0
		for _, w := range l.Weights() {
			if l.StoredNVFP4(w.Name) {
				tables++
			}
			if len(w.Parts) == 0 {
				continue
			}
			parts, ok := l.StoredNVFP4Stack(w.Name)
			if want := len(w.Parts) / w.Shape[0]; !ok || parts != want {
				t.Errorf("%s: held as NVFP4 with %d tables an expert (%v), want %d", w.Name, parts, ok, want)
			}
			tables += len(w.Parts)
			stacks++
		}
		if stacks == 0 {
			t.Error("no expert stack of parts in the NVFP4 checkpoint")
		}
	}
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	var first [][]float32
	held := map[compile.ExpertsMode]int64{}
	for _, run := range []struct {
		backend string
		experts compile.ExpertsMode
		bf16    bool
	}{{"cpu", compile.ExpertsInGraph, false}, {"go", compile.ExpertsInGraph, false}, {"cpu", compile.ExpertsDense, false}, {"cpu", compile.ExpertsHost, false},
		{"cpu", compile.ExpertsInGraph, true}, {"cpu", compile.ExpertsHost, true}} {
		name := fmt.Sprintf("%s --experts %s", run.backend, run.experts)
		if run.bf16 {
			name += " --dtype bf16"
		}
		be, err := backends.NewWithConfig(run.backend)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(be.Finalize)
		opts := compile.Options{Experts: run.experts}
		if run.bf16 {
			opts.DType = dtypes.BFloat16
		}
		r, err := compile.NewRunner(be, l, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.WeightBytes(), l.HeldBytes(compile.HoldingOf(tpu.CapabilitiesOf(be), opts)); got != want {
			t.Errorf("%s: holds %d bytes, HeldBytes estimates %d", name, got, want)
		}
		if run.backend == "cpu" && !run.bf16 {
			held[run.experts] = r.WeightBytes()
		}
		logits, err := r.NewState().Prefill(prompts, 2)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		for b, p := range prompts {
			if e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1]); e > 0.25 {
				t.Errorf("%s row %d: relative error %.3g against the original weights' reference", name, b, e)
			}
		}
		if run.bf16 { // bf16 compute: within the reference's bound above
			continue
		}
		if first == nil {
			first = logits
			continue
		}
		worst, scale := 0.0, 0.0
		for b := range first {
			for i := range first[b] {
				worst = max(worst, math.Abs(float64(logits[b][i]-first[b][i])))
				scale = max(scale, math.Abs(float64(first[b][i])))
			}
		}
		if worst > 1e-4*scale {
			t.Errorf("%s: logits differ from the first run's by %.3g (largest %.3g)", name, worst, scale)
		}
	}
	caps := tpu.CapabilitiesOf(refcheck.CPUBackend(t))
	caps.Int4Groups, caps.FP8, caps.NVFP4 = false, false, false // as a backend that decodes them holds them
	decoded := l.HeldBytes(compile.HoldingOf(caps, compile.Options{}))
	limit := decoded / 2 // 4-bit and FP8 against f16 and f32
	switch format {
	case "gptq8":
		limit = decoded * 2 / 3 // a byte and a bit against f16
	case "nvfp4":
		// 4.5 bits against bf16 (the embedding and norms stay as they
		// are), and the tables: 1 KiB a part, large beside this model's
		// 32×32 parts (the form is checked above).
		limit = decoded*9/20 + 1024*int64(tables)
	}
	if held[compile.ExpertsInGraph] != held[compile.ExpertsDense] || held[compile.ExpertsInGraph] >= limit {
		t.Errorf("experts in the graph take %d bytes, held apart %d, decoded %d: want both as stored", held[compile.ExpertsInGraph], held[compile.ExpertsDense], decoded)
	}
}

// TestNVFP4StackHeld: the expert stacks of an NVFP4 checkpoint that
// stores each expert's projections on their own, each with its own
// global scale, are held as stored with a table per part
// (lm.Loaded.NVFP4StackInto), and 2·fp4 · table[code] is the decoded
// stack (compressed-tensors' dequantisation, lm.Loaded.DecodeInto) to the
// bit; the parts' global scales differ, so a table read for the wrong
// part fails.
func TestNVFP4StackHeld(t *testing.T) {
	c, _, dir := writeMoECopy(t, nvfp4Copy)
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fp4 := [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	stacks := 0
	for _, w := range l.Weights() {
		parts, ok := l.StoredNVFP4Stack(w.Name)
		if !ok {
			continue
		}
		stacks++
		n := w.Shape[0] * w.Shape[1] * w.Shape[2]
		packed, codes, halves := make([]byte, n/2), make([]byte, n/16), make([]float32, len(w.Parts)*256)
		if err := l.NVFP4StackInto(w.Name, packed, codes, halves); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, n)
		if err := l.DecodeInto(w.Name, want); err != nil {
			t.Fatal(err)
		}
		rows := w.Shape[1] / parts // a part's rows
		for i := range n {
			nib := packed[i/2] >> (4 * (i % 2)) & 15
			table := i / w.Shape[2] / rows
			if got := 2 * fp4[nib] * halves[table*256+int(codes[i/16])]; got != want[i] {
				t.Fatalf("%s value %d (part %d): %v, want %v", w.Name, i, table, got, want[i])
			}
		}
		if parts > 1 && slices.Equal(halves[:256], halves[256:512]) {
			t.Errorf("%s: expert 0's parts have one table: the case does not tell them apart", w.Name)
		}
	}
	if stacks != 2*(c.Layers-len(c.MLPOnly)) {
		t.Errorf("%d stacks held as NVFP4 with their tables, want gate_up and down of each sparse layer", stacks)
	}
}

// An NVFP4 expert stack with a NaN scale byte (E4M3 0x7f) in one expert's
// part is not held as stored: the load goes on, decodes that stack and
// reports its non-finite values, as a matrix's NaN scale is; every other
// stack stays as stored.
func TestNVFP4StackNaNScale(t *testing.T) {
	_, _, nv := writeMoECopy(t, nvfp4Copy)
	dir := t.TempDir()
	// The same checkpoint with one scale byte of layer 1's expert 3 up_proj NaN.
	ck, err := safetensors.OpenDir(nv, "")
	if err != nil {
		t.Fatal(err)
	}
	const part = "model.layers.1.mlp.experts.3.up_proj.weight_scale"
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		shape, _ := ck.Shape(name)
		raw, err := ck.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		data := append([]byte(nil), raw...)
		if name == part {
			data[5] = 0x7f
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: shape, Data: data})
	}
	ck.Close()
	cfg, err := lmckpt.ReadConfig(nv)
	if err != nil {
		t.Fatal(err)
	}
	if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var bad []string
	l.OnNonFinite = func(nf safetensors.NonFiniteTensor) { bad = append(bad, nf.Name) }
	be := refcheck.CPUBackend(t)
	caps := tpu.CapabilitiesOf(be)
	r, err := compile.NewRunner(be, l, compile.Options{Caps: &caps})
	if err != nil {
		t.Fatalf("NewRunner: %v, want the stack with the NaN scale decoded", err)
	}
	defer r.Close()
	const stack = "model.layers.1.mlp.experts.gate_up_proj"
	if want := []string{"model.layers.1.mlp.experts.3.up_proj.weight"}; !slices.Equal(bad, want) {
		t.Errorf("non-finite tensors reported: %v, want %v", bad, want)
	}
	h := compile.HoldingOf(caps, compile.Options{})
	var w lm.WeightSpec
	for _, x := range l.Weights() {
		if x.Name == stack {
			w = x
		}
	}
	parts, _ := l.StoredNVFP4Stack(stack)
	want := l.HeldBytes(h) - lm.NVFP4StackBytes(w, parts) + h.HeldBytes(w, l.StoredDType(stack))
	if got := r.WeightBytes(); got != want {
		t.Errorf("holds %d bytes, want %d: every other stack as stored, %s decoded", got, want, stack)
	}
}
