package qwen3moe_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// TestPackedExperts: a GPTQ (4 and 8 bits), AWQ or FP8 checkpoint of a
// Qwen3-MoE that
// stores each expert on its own (as the Hub's quantized MoE releases do:
// every expert's projections packed, or E4M3 with block scales) loads.
// On the cpu backend the experts stay as stored (grouped int4, FP8, int8)
// in both formulations. On the cpu backend the experts stay
// 4-bit (grouped int4), as stacks assembled from the packed parts in the
// graph formulation and as the parts themselves held apart (--experts
// dense); the go backend decodes them. All agree to f32 rounding (the
// weights are the checkpoint's exactly either way), each holds what
// lm.Loaded.HeldBytes estimates, the cpu backend less than decoded, and
// the logits stay within 4-bit rounding of the float64 reference of the
// original weights.
func TestPackedExperts(t *testing.T) {
	for _, format := range []string{"gptq", "awq", "fp8", "gptq8", "nvfp4"} { // AWQ: zero points, so mins; gptq8: 8 bits; nvfp4: grouped FP4 stacks
		t.Run(format, func(t *testing.T) { checkPackedExperts(t, format) })
	}
}

func checkPackedExperts(t *testing.T, format string) {
	c := qwenref.TinyQwen3MoE()
	c.MoEIntermediate = 32 // whole groups of 32 in every projection
	src, dir := t.TempDir(), t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	write := func() error { return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: format, Group: 32}) }
	switch format {
	case "fp8":
		write = func() error { return lmckpt.WriteFP8Copy(src, dir, lmckpt.FP8Options{Block: 16}) }
	case "gptq8":
		write = func() error {
			return lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "gptq", Group: 32, Bits: 8})
		}
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	rm, err := qwenref.LoadMoE(src, c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if format == "nvfp4" { // every expert stack as grouped FP4, in groups of 16
		stacks := 0
		for _, w := range l.Weights() {
			if len(w.Parts) == 0 {
				continue
			}
			lay, ok := l.StoredInt4Groups(w.Name)
			if !ok || !lay.FP4 || lay.Group != 16 || lay.Mins {
				t.Errorf("%s: held as %+v (%v), want grouped FP4 by 16", w.Name, lay, ok)
			}
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
	}{{"cpu", compile.ExpertsInGraph}, {"go", compile.ExpertsInGraph}, {"cpu", compile.ExpertsDense}} {
		name := fmt.Sprintf("%s --experts %s", run.backend, run.experts)
		be, err := backends.NewWithConfig(run.backend)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(be.Finalize)
		opts := compile.Options{Experts: run.experts}
		r, err := compile.NewRunner(be, l, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.WeightBytes(), l.HeldBytes(compile.HoldingOf(tpu.CapabilitiesOf(be), opts)); got != want {
			t.Errorf("%s: holds %d bytes, HeldBytes estimates %d", name, got, want)
		}
		if run.backend == "cpu" {
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
		limit = decoded * 3 / 5 // stacks at 6 bits, matrices at 4.5, against bf16; the embedding stays bf16
	}
	if held[compile.ExpertsInGraph] != held[compile.ExpertsDense] || held[compile.ExpertsInGraph] >= limit {
		t.Errorf("experts in the graph take %d bytes, held apart %d, decoded %d: want both as stored", held[compile.ExpertsInGraph], held[compile.ExpertsDense], decoded)
	}
}
