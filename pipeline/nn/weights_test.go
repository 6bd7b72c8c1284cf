package nn

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// DequantizeInt8 is q·scale per group, as a [out, in] matrix, in the
// fixed form a backend can match: Reshape(Mul(ConvertDType(q),
// BroadcastInDim(scales))).
func TestDequantizeInt8(t *testing.T) {
	const out, groups, g = 3, 2, 4
	q := make([]int8, out*groups*g)
	for i := range q {
		q[i] = int8(i*13%255 - 127)
	}
	scales := []float32{0.5, 2, 0.25, 1, 3, 0.125}
	var form []NodeType
	res := execGraph(t, func(in []*Node) []*Node {
		w := DequantizeInt8(in[0], in[1], dtypes.Float32)
		form = []NodeType{w.Type(), w.Inputs()[0].Type(), w.Inputs()[0].Inputs()[0].Type(), w.Inputs()[0].Inputs()[1].Type()}
		return []*Node{w}
	}, tensors.FromFlatDataAndDimensions(q, out, groups, g), tensors.FromFlatDataAndDimensions(scales, out, groups, 1))
	want := []NodeType{NodeTypeReshape, NodeTypeMul, NodeTypeConvertDType, NodeTypeBroadcastInDim}
	for i := range want {
		if form[i] != want[i] {
			t.Fatalf("form %v, want %v", form, want)
		}
	}
	for r := 0; r < out; r++ {
		for c := 0; c < groups*g; c++ {
			w := float32(q[r*groups*g+c]) * scales[r*groups+c/g]
			if got := res[0][r*groups*g+c]; got != w {
				t.Fatalf("(%d, %d) = %g, want %g", r, c, got, w)
			}
		}
	}
}

// Embedding of a converted narrow table gathers the rows first: the same
// values as gathering from the converted table, and no conversion of the
// whole table in the graph.
func TestEmbeddingGathersBeforeConverting(t *testing.T) {
	const v, h = 5, 3
	table := make([]bfloat16.BFloat16, v*h)
	for i := range table {
		table[i] = bfloat16.FromFloat32(float32(i) * 0.37)
	}
	ids := []int32{4, 0, 2}
	var gathered NodeType
	res := execGraph(t, func(in []*Node) []*Node {
		e := Embedding(ConvertDType(in[0], dtypes.Float32), in[1])
		gathered = e.Inputs()[0].Type()
		return []*Node{e}
	}, tensors.FromFlatDataAndDimensions(table, v, h), tensors.FromFlatDataAndDimensions(ids, 3))
	if gathered != NodeTypeGather {
		t.Errorf("converted node reads %s, want the gather", gathered)
	}
	for i, id := range ids {
		for j := 0; j < h; j++ {
			if got, want := res[0][i*h+j], table[int(id)*h+j].Float32(); got != want {
				t.Fatalf("row %d col %d = %g, want %g", i, j, got, want)
			}
		}
	}
}

// Embedding of a table in DequantizeInt8's form gathers the int8 rows and
// their scales: the rows of the dequantised table.
func TestEmbeddingGathersInt8Rows(t *testing.T) {
	const v, groups, g = 6, 2, 3
	q := make([]int8, v*groups*g)
	for i := range q {
		q[i] = int8(i*29%255 - 127)
	}
	scales := make([]float32, v*groups)
	for i := range scales {
		scales[i] = 0.01 * float32(i+1)
	}
	ids := []int32{5, 0, 3, 3}
	var direct NodeType
	res := execGraph(t, func(in []*Node) []*Node {
		e := Embedding(DequantizeInt8(in[0], in[1], dtypes.Float32), Reshape(in[2], 2, 2))
		direct = e.Inputs()[0].Inputs()[0].Inputs()[0].Type() // Reshape(Mul(ConvertDType(Gather)))
		return []*Node{e}
	}, tensors.FromFlatDataAndDimensions(q, v, groups, g), tensors.FromFlatDataAndDimensions(scales, v, groups, 1),
		tensors.FromFlatDataAndDimensions(ids, 4))
	if direct != NodeTypeGather {
		t.Errorf("int8 rows come from %s, want a gather", direct)
	}
	for i, id := range ids {
		for c := 0; c < groups*g; c++ {
			want := float32(q[int(id)*groups*g+c]) * scales[int(id)*groups+c/g]
			if got := res[0][i*groups*g+c]; got != want {
				t.Fatalf("id %d col %d = %g, want %g", id, c, got, want)
			}
		}
	}
}
