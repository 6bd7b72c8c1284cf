package compile

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestGraphExecutorTrapsAreErrors: the diffusion models' executor turns
// what the pure-Go backend cannot run (an op it lacks, a conversion to
// Float16, a panic while building) into errors naming the block key and
// the op, and keeps working afterwards.
func TestGraphExecutorTrapsAreErrors(t *testing.T) {
	x := NewGraphExecutor(cpuDevice(t), ExecutorOptions{})
	defer x.Finalize()
	img := tensors.FromValue(make([]float32, 4*1024))
	cases := map[string]struct {
		fn   func(in []*graph.Node) []*graph.Node
		want string
	}{
		"unet/dus": {func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.DynamicUpdateSlice(in[0], graph.Slice(in[0], graph.AxisRange(0, 4)), []*graph.Node{graph.Const(in[0].Graph(), int32(0))})}
		}, "DynamicUpdateSlice"},
		"vae/f16": {func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.ConvertDType(graph.Neg(in[0]), dtypes.Float16), graph.Abs(in[0])}
		}, "Float16"},
		"clip/panic": {func(in []*graph.Node) []*graph.Node { panic("attention heads do not divide") }, "attention heads do not divide"},
	}
	for key, tc := range cases {
		_, err := x.Call(key, tc.fn, []*tensors.Tensor{img})
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming the key and %q", key, err, tc.want)
		}
	}
	out, err := x.Call("ok", func(in []*graph.Node) []*graph.Node { return []*graph.Node{graph.Neg(in[0])} }, []*tensors.Tensor{tensors.FromValue([]float32{3})})
	if err != nil || out[0].Value().([]float32)[0] != -3 {
		t.Fatalf("the executor broke: %v", err)
	}
}
