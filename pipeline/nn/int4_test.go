package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// int4Case is an int4 matrix [out, 32·groups] with values decoded the long
// way (low nibble first, nibble − 8, times the block's table entry).
func int4Case(out, groups int) (packed, codes []uint8, table, dense []float32) {
	packed = make([]uint8, out*groups*16)
	for i := range packed {
		packed[i] = uint8(i*37 + 11)
	}
	codes = make([]uint8, out*groups)
	for i := range codes {
		codes[i] = uint8(i*7%255 + 1)
	}
	table = make([]float32, 256)
	for i := 1; i < 256; i++ {
		table[i] = 0.01 * float32(i)
	}
	dense = make([]float32, out*groups*32)
	for i := range dense {
		nib := int(packed[i/2] & 15)
		if i%2 == 1 {
			nib = int(packed[i/2] >> 4)
		}
		dense[i] = float32(nib-8) * table[codes[i/32]]
	}
	return packed, codes, table, dense
}

// DequantizeInt4 decodes as the format says, and dequantizeInt4Parts
// finds its parts again (Embedding gathers by them); the MXFP4 matcher
// does not take it for MXFP4 (its scale table is no constant).
func TestDequantizeInt4(t *testing.T) {
	const out, groups = 3, 2
	packed, codes, table, dense := int4Case(out, groups)
	var found, mx bool
	res := execGraph(t, func(in []*Node) []*Node {
		w := DequantizeInt4(in[0], in[1], in[2], dtypes.Float32)
		p, c, tb, ok := dequantizeInt4Parts(w)
		found = ok && p == in[0] && c == in[1] && tb == in[2]
		_, _, mx = dequantizeMXFP4Parts(w)
		return []*Node{w}
	}, tensors.FromFlatDataAndDimensions(packed, out, groups, 16), tensors.FromFlatDataAndDimensions(codes, out, groups),
		tensors.FromFlatDataAndDimensions(table, 256, 1))
	if !found {
		t.Error("dequantizeInt4Parts does not find the parts of DequantizeInt4's form")
	}
	if mx {
		t.Error("dequantizeMXFP4Parts takes DequantizeInt4's form for MXFP4")
	}
	for i, want := range dense {
		if got := res[0][i]; got != want {
			t.Fatalf("value %d = %g, want %g", i, got, want)
		}
	}
}

// Embedding of a table in DequantizeInt4's form gathers the packed rows
// and their codes: the rows of the dequantised table.
func TestEmbeddingGathersInt4Rows(t *testing.T) {
	const v, groups = 5, 2
	packed, codes, table, dense := int4Case(v, groups)
	ids := []int32{4, 0, 3, 3}
	var gathered NodeType
	res := execGraph(t, func(in []*Node) []*Node {
		e := Embedding(DequantizeInt4(in[0], in[1], in[2], dtypes.Float32), Reshape(in[3], 2, 2))
		p, _, _, ok := dequantizeInt4Parts(e)
		if ok {
			gathered = p.Type()
		}
		return []*Node{e}
	}, tensors.FromFlatDataAndDimensions(packed, v, groups, 16), tensors.FromFlatDataAndDimensions(codes, v, groups),
		tensors.FromFlatDataAndDimensions(table, 256, 1), tensors.FromFlatDataAndDimensions(ids, 4))
	if gathered != NodeTypeGather {
		t.Errorf("packed rows come from %s, want a gather", gathered)
	}
	const h = groups * 32
	for i, id := range ids {
		for c := 0; c < h; c++ {
			if got, want := res[0][i*h+c], dense[int(id)*h+c]; got != want {
				t.Fatalf("id %d col %d = %g, want %g", id, c, got, want)
			}
		}
	}
}

// DequantizeInt4Groups decodes as its comment says, with and without
// mins.
func TestDequantizeInt4Groups(t *testing.T) {
	const out, blocks, ng = 3, 4, 2 // groups of 64
	packed, _, _, _ := int4Case(out, blocks)
	scales := make([]float32, out*ng)
	mins := make([]float32, out*ng)
	for i := range scales {
		scales[i] = 0.25 * float32(i+1)
		mins[i] = -0.5 * float32(i)
	}
	for _, withMins := range []bool{false, true} {
		args := []any{tensors.FromFlatDataAndDimensions(packed, out, blocks, 16), tensors.FromFlatDataAndDimensions(scales, out, ng)}
		if withMins {
			args = append(args, tensors.FromFlatDataAndDimensions(mins, ng, out)) // [groups, out]
		}
		res := execGraph(t, func(in []*Node) []*Node {
			var m *Node
			if withMins {
				m = in[2]
			}
			return []*Node{DequantizeInt4Groups(in[0], in[1], m, dtypes.Float32)}
		}, args...)
		in := 32 * blocks
		for i := range out * in {
			nib := int(packed[i/2] & 15)
			if i%2 == 1 {
				nib = int(packed[i/2] >> 4)
			}
			o, g := i/in, (i%in)/(in/ng)
			want := float32(nib-8) * scales[o*ng+g]
			if withMins {
				want += mins[g*out+o]
			}
			if got := res[0][i]; got != want {
				t.Fatalf("mins=%v: value %d = %g, want %g", withMins, i, got, want)
			}
		}
	}
}

// GatherColumns picks columns.
func TestGatherColumns(t *testing.T) {
	w := []float32{1, 2, 3, 4, 5, 6} // [2, 3]
	idx := []int32{2, 0, 1}
	res := execGraph(t, func(in []*Node) []*Node { return []*Node{GatherColumns(in[0], in[1])} },
		tensors.FromFlatDataAndDimensions(w, 2, 3), tensors.FromFlatDataAndDimensions(idx, 3))
	want := []float32{3, 1, 2, 6, 4, 5}
	for i, v := range want {
		if res[0][i] != v {
			t.Fatalf("GatherColumns = %v, want %v", res[0], want)
		}
	}
}

// PairDot over a grouped int4 stack (with mins) gathers the chosen
// experts' values, scales and mins, and equals PairDot over the decoded
// f32 stack; the parts are found again, and int4's and MXFP4's forms are
// not taken for it.
func TestPairDotInt4Groups(t *testing.T) {
	const e, out, blocks, ng = 3, 4, 4, 2 // in 128, groups of 64
	in := 32 * blocks
	packed := make([]uint8, e*out*blocks*16)
	for i := range packed {
		packed[i] = uint8(i*53 + 7)
	}
	scales := make([]float32, e*out*ng)
	mins := make([]float32, e*ng*out) // [e, ng, out]
	for i := range scales {
		scales[i] = 0.01 * float32(i%7+1)
	}
	for i := range mins {
		mins[i] = 0.02 * float32(i%5-2)
	}
	dense := make([]float32, e*out*in)
	for x := 0; x < e; x++ {
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				f := (x*out+o)*in + i
				nib := int(packed[f/2] & 15)
				if i%2 == 1 {
					nib = int(packed[f/2] >> 4)
				}
				g := i / (in / ng)
				dense[f] = float32(nib-8)*scales[(x*out+o)*ng+g] + mins[(x*ng+g)*out+o]
			}
		}
	}
	v := values(3*in, 0.1)
	ids := []int32{2, 0, 2}
	var found, wrong bool
	res := execGraph(t, func(x []*Node) []*Node {
		w := DequantizeInt4Groups(x[1], x[2], x[3], dtypes.Float32)
		p, s, m, _, ok := dequantizeInt4GroupsParts(w)
		found = ok && p == x[1] && s == x[2] && m == x[3]
		_, _, _, i4 := dequantizeInt4Parts(w)
		_, _, mx := dequantizeMXFP4Parts(w)
		wrong = i4 || mx
		return []*Node{PairDot(x[0], w, x[5]), PairDot(x[0], x[4], x[5])}
	}, tensors.FromFlatDataAndDimensions(v, 3, in),
		tensors.FromFlatDataAndDimensions(packed, e, out, blocks, 16), tensors.FromFlatDataAndDimensions(scales, e, out, ng),
		tensors.FromFlatDataAndDimensions(mins, e, ng, out), tensors.FromFlatDataAndDimensions(dense, e, out, in),
		tensors.FromFlatDataAndDimensions(ids, 3, 1))
	if !found || wrong {
		t.Errorf("parts found: %v; taken for int4 or MXFP4: %v", found, wrong)
	}
	for i := range res[1] {
		if d := math.Abs(float64(res[0][i] - res[1][i])); d > 1e-5*(1+math.Abs(float64(res[1][i]))) {
			t.Fatalf("output %d: %v, want %v", i, res[0][i], res[1][i])
		}
	}
}

// DequantizeNVFP4 decodes as the format says (2·fp4 times half the
// effective scale of each 16 values' code), and the int4 matcher does not
// take its form for int4's.
func TestDequantizeNVFP4(t *testing.T) {
	const out, in = 3, 64
	packed := make([]uint8, out*in/2)
	for i := range packed {
		packed[i] = uint8(i*37 + 11)
	}
	codes := make([]uint8, out*in/16)
	for i := range codes {
		codes[i] = uint8(i*7%255 + 1)
	}
	half := make([]float32, 256)
	for i := range half {
		half[i] = 0.005 * float32(i)
	}
	var int4 bool
	res := execGraph(t, func(x []*Node) []*Node {
		w := DequantizeNVFP4(x[0], x[1], x[2], dtypes.Float32)
		_, _, _, int4 = dequantizeInt4Parts(w)
		return []*Node{w}
	}, tensors.FromFlatDataAndDimensions(packed, out, in/32, 16), tensors.FromFlatDataAndDimensions(codes, out, in/16),
		tensors.FromFlatDataAndDimensions(half, 256, 1))
	if int4 {
		t.Error("dequantizeInt4Parts takes DequantizeNVFP4's form for int4's")
	}
	for i := range out * in {
		want := float32(float64(e2m1At(packed, i)) * float64(half[codes[i/16]]) * 2)
		if got := res[0][i]; got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) && want != 0 {
			t.Fatalf("value %d = %g, want %g", i, got, want)
		}
	}
}

// PairDot over a grouped FP4 stack (DequantizeFP4Groups: NVFP4 experts,
// groups of 16) gathers the chosen experts' codes and half-scales and
// equals PairDot over the decoded f32 stack (it keeps the form's pairs
// table); the parts are found again, and int4's form is not taken for it.
func TestPairDotFP4Groups(t *testing.T) {
	const e, out, in = 3, 4, 64
	ng := in / 16
	packed := make([]uint8, e*out*in/2)
	for i := range packed {
		packed[i] = uint8(i*53 + 7)
	}
	half := make([]float32, e*out*ng)
	for i := range half {
		half[i] = 0.01 * float32(i%7+1)
	}
	dense := make([]float32, e*out*in)
	for f := range dense {
		dense[f] = 2 * e2m1At(packed, f) * half[f/16]
	}
	v := values(3*in, 0.1)
	ids := []int32{2, 0, 2}
	var found, wrong bool
	res := execGraph(t, func(x []*Node) []*Node {
		w := DequantizeFP4Groups(x[1], x[2], dtypes.Float32)
		p, s, m, _, ok := dequantizeInt4GroupsParts(w)
		found = ok && p == x[1] && s == x[2] && m == nil
		_, _, _, wrong = dequantizeInt4Parts(w)
		return []*Node{PairDot(x[0], w, x[4]), PairDot(x[0], x[3], x[4]), w}
	}, tensors.FromFlatDataAndDimensions(v, 3, in),
		tensors.FromFlatDataAndDimensions(packed, e, out, in/32, 16), tensors.FromFlatDataAndDimensions(half, e, out, ng),
		tensors.FromFlatDataAndDimensions(dense, e, out, in), tensors.FromFlatDataAndDimensions(ids, 3, 1))
	if !found || wrong {
		t.Errorf("parts found: %v; taken for int4: %v", found, wrong)
	}
	checkStackPairDot(t, res, dense)
}

// DequantizeNVFP4Tables decodes each row with its part's table, and PairDot
// over such a stack gathers the chosen experts' codes, scale bytes and
// tables and equals PairDot over the decoded f32 stack; the parts are
// found again, and no other form's matcher takes it.
func TestPairDotNVFP4Tables(t *testing.T) {
	const e, parts, out, in = 3, 2, 4, 64
	packed := make([]uint8, e*out*in/2)
	for i := range packed {
		packed[i] = uint8(i*53 + 7)
	}
	codes := make([]uint8, e*out*in/16)
	for i := range codes {
		codes[i] = uint8(i*11%250 + 3)
	}
	halves := make([]float32, e*parts*256)
	for i := range halves {
		halves[i] = 0.001 * float32(i%256) * float32(1+i/256) // every table its own
	}
	dense := make([]float32, e*out*in)
	for f := range dense {
		row := f / in // over all experts
		table := row / (out / parts)
		dense[f] = 2 * e2m1At(packed, f) * halves[table*256+int(codes[f/16])]
	}
	v := values(3*in, 0.1)
	ids := []int32{2, 0, 2}
	var found, int4, groups bool
	res := execGraph(t, func(x []*Node) []*Node {
		w := DequantizeNVFP4Tables(x[1], x[2], x[3], dtypes.Float32)
		p, c, h, ok := dequantizeNVFP4TablesParts(w)
		found = ok && p == x[1] && c == x[2] && h == x[3]
		_, _, _, int4 = dequantizeInt4Parts(w)
		_, _, _, _, groups = dequantizeInt4GroupsParts(w)
		return []*Node{PairDot(x[0], w, x[5]), PairDot(x[0], x[4], x[5]), w}
	}, tensors.FromFlatDataAndDimensions(v, 3, in),
		tensors.FromFlatDataAndDimensions(packed, e, out, in/32, 16), tensors.FromFlatDataAndDimensions(codes, e, out, in/16),
		tensors.FromFlatDataAndDimensions(halves, e, parts, 256),
		tensors.FromFlatDataAndDimensions(dense, e, out, in), tensors.FromFlatDataAndDimensions(ids, 3, 1))
	if !found || int4 || groups {
		t.Errorf("parts found: %v; taken for int4: %v, for grouped int4: %v", found, int4, groups)
	}
	checkStackPairDot(t, res, dense)
}

// checkStackPairDot checks a stack test's results: res[2] the decoded
// stack, which must be dense exactly, and res[0] and res[1] PairDot over
// the held form and over dense, which must agree to f32 rounding.
func checkStackPairDot(t *testing.T, res [][]float32, dense []float32) {
	t.Helper()
	for i, want := range dense {
		if res[2][i] != want {
			t.Fatalf("weight value %d = %v, want %v", i, res[2][i], want)
		}
	}
	for i := range res[1] {
		if d := math.Abs(float64(res[0][i] - res[1][i])); d > 1e-5*(1+math.Abs(float64(res[1][i]))) {
			t.Fatalf("output %d: %v, want %v", i, res[0][i], res[1][i])
		}
	}
}

// e2m1At is the FP4 E2M1 value of the f-th nibble of packed, low nibble
// first, from the format's table written out here (apart from the
// package's own pairs tables, which the tests check).
func e2m1At(packed []uint8, f int) float32 {
	nib := packed[f/2] & 15
	if f%2 == 1 {
		nib = packed[f/2] >> 4
	}
	return e2m1Values[nib]
}

var e2m1Values = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
