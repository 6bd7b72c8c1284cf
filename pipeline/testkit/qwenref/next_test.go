package qwenref

import (
	"slices"
	"testing"
)

// TestFuseNextLayout: the fused rows of a small case, written out by
// hand from Qwen3NextGatedDeltaNet.fix_query_key_value_ordering (view
// [KHeads, 2·KDim + 2·r·VDim] split [KDim, KDim, r·VDim, r·VDim]; view
// [KHeads, 2·r] split [r, r]), with KHeads 2, KDim 1, VHeads 4, VDim 1,
// Hidden 1; and unfuseNext takes them back.
func TestFuseNextLayout(t *testing.T) {
	c := Qwen35{Hidden: 1, KHeads: 2, KDim: 1, VHeads: 4, VDim: 1}
	// in_proj_qkv rows q0 q1 k0 k1 v0 v1 v2 v3; z, b and a rows 0..3.
	qkv := []float32{10, 11, 20, 21, 30, 31, 32, 33}
	z := []float32{40, 41, 42, 43}
	b, a := []float32{50, 51, 52, 53}, []float32{60, 61, 62, 63}
	qkvz, ba := c.fuseNext(qkv, z, b, a)
	if want := []float32{10, 20, 30, 31, 40, 41, 11, 21, 32, 33, 42, 43}; !slices.Equal(qkvz, want) {
		t.Errorf("in_proj_qkvz rows %v, want %v", qkvz, want)
	}
	if want := []float32{50, 51, 60, 61, 52, 53, 62, 63}; !slices.Equal(ba, want) {
		t.Errorf("in_proj_ba rows %v, want %v", ba, want)
	}
	f64 := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	w := Weights{"l.in_proj_qkvz.weight": f64(qkvz), "l.in_proj_ba.weight": f64(ba)}
	c.unfuseNext(w)
	for name, want := range map[string][]float32{"l.in_proj_qkv.weight": qkv, "l.in_proj_z.weight": z, "l.in_proj_b.weight": b, "l.in_proj_a.weight": a} {
		if !slices.Equal(w[name], f64(want)) {
			t.Errorf("%s: %v, want %v", name, w[name], want)
		}
	}
	if _, ok := w["l.in_proj_qkvz.weight"]; ok || len(w) != 4 {
		t.Errorf("the fused tensors stay: %v", w)
	}
}

// TestNextIsQwen35: a Qwen3-Next checkpoint read by the reference gives
// the logits of the Qwen3.5-MoE text-only checkpoint of the same draws.
func TestNextIsQwen35(t *testing.T) {
	next := TinyQwen3Next()
	plain := next
	plain.Next, plain.CausalLM = false, true
	tokens := []int{1, 9, 14, 60, 3, 5, 41, 27}
	var logits [][][]float64
	for _, c := range []Qwen35{next, plain} {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		m, err := LoadQwen35(dir, c)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, m.Logits(tokens))
	}
	for i := range logits[0] {
		if !slices.Equal(logits[0][i], logits[1][i]) {
			t.Fatalf("position %d: the layouts' logits differ", i)
		}
	}
}
