package qwenref

import (
	"slices"
	"testing"
)

// TestFuseNextLayout: the fused rows of a small case, written out by
// hand from Qwen3NextGatedDeltaNet.fix_query_key_value_ordering (view
// [KHeads, 2·KDim + 2·r·VDim] split [KDim, KDim, r·VDim, r·VDim]; view
// [KHeads, 2·r] split [r, r]), with KHeads 2, KDim 2, VHeads 4, VDim 3
// (no two of KDim, VDim and r alike), Hidden 1; and unfuseNext takes them
// back.
func TestFuseNextLayout(t *testing.T) {
	c := Qwen35{Hidden: 1, KHeads: 2, KDim: 2, VHeads: 4, VDim: 3}
	// in_proj_qkv rows: q of key heads 0 and 1 (2 rows each), their k,
	// then v of value heads 0..3 (3 rows each); z likewise; b and a a row
	// per value head.
	qkv := []float32{100, 101, 110, 111, 200, 201, 210, 211,
		300, 301, 302, 310, 311, 312, 320, 321, 322, 330, 331, 332}
	z := []float32{400, 401, 402, 410, 411, 412, 420, 421, 422, 430, 431, 432}
	b, a := []float32{50, 51, 52, 53}, []float32{60, 61, 62, 63}
	qkvz, ba := c.fuseNext(qkv, z, b, a)
	want := []float32{
		100, 101, 200, 201, 300, 301, 302, 310, 311, 312, 400, 401, 402, 410, 411, 412, // key head 0: value heads 0, 1
		110, 111, 210, 211, 320, 321, 322, 330, 331, 332, 420, 421, 422, 430, 431, 432, // key head 1: value heads 2, 3
	}
	if !slices.Equal(qkvz, want) {
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
// the logits of the Qwen3.5-MoE text-only checkpoint of the same draws: the
// writer fuses every tensor it should and the reader takes each back (the
// two share nextGroup, so this checks their plumbing, not the layout,
// which TestFuseNextLayout and the model's test against the reference do).
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
