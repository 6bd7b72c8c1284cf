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

// TestPackedExperts: a GPTQ checkpoint of a Qwen3-MoE that stores each
// expert on its own (as the Hub's GPTQ and AWQ MoE releases do: every
// expert's projections packed) loads: the stacks are assembled from the
// packed parts. The cpu and go backends, in-graph experts, and the cpu
// backend with the experts held apart (--experts dense: each expert's
// projections then stay 4-bit, grouped int4) agree within f16's rounding
// of the decoded weights, each holds what lm.Loaded.HeldBytes estimates,
// and the logits stay within 4-bit rounding of the float64 reference of
// the original weights.
func TestPackedExperts(t *testing.T) {
	c := qwenref.TinyQwen3MoE()
	c.MoEIntermediate = 32 // whole groups of 32 in every projection
	src, dir := t.TempDir(), t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := lmckpt.WriteInt4Copy(src, dir, lmckpt.Int4Options{Format: "gptq", Group: 32}); err != nil {
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
		if worst > 2e-3*scale {
			t.Errorf("%s: logits differ from the first run's by %.3g (largest %.3g)", name, worst, scale)
		}
	}
	if held[compile.ExpertsDense] >= held[compile.ExpertsInGraph] {
		t.Errorf("experts held apart take %d bytes, in the graph %d: want the 4-bit parts smaller", held[compile.ExpertsDense], held[compile.ExpertsInGraph])
	}
}
