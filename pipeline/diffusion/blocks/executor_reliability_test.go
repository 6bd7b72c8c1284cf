package blocks

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/internal/reftest"
)

// TestGraphExecutorTrapsAreErrors: the diffusion engine's default
// executor turns what the pure-Go backend cannot run (an op it lacks, a
// conversion to Float16, a panic while building) into errors naming the
// block key and the op, and keeps working afterwards.
func TestGraphExecutorTrapsAreErrors(t *testing.T) {
	x := NewGraphExecutor(reftest.GoBackend(t), nil)
	img := tensors.FromValue(make([]float32, 4*1024))
	cases := map[string]struct {
		fn   func(in []*Node) []*Node
		want string
	}{
		"unet/dus": {func(in []*Node) []*Node {
			return []*Node{DynamicUpdateSlice(in[0], Slice(in[0], AxisRange(0, 4)), []*Node{Const(in[0].Graph(), int32(0))})}
		}, "DynamicUpdateSlice"},
		"vae/f16": {func(in []*Node) []*Node {
			return []*Node{ConvertDType(Neg(in[0]), dtypes.Float16), Abs(in[0])}
		}, "Float16"},
		"clip/panic": {func(in []*Node) []*Node { panic("attention heads do not divide") }, "attention heads do not divide"},
	}
	for key, tc := range cases {
		_, err := x.Call(key, tc.fn, []*tensors.Tensor{img})
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming the key and %q", key, err, tc.want)
		}
	}
	out, err := x.Call("ok", func(in []*Node) []*Node { return []*Node{Neg(in[0])} }, []*tensors.Tensor{tensors.FromValue([]float32{3})})
	if err != nil || out[0].Value().([]float32)[0] != -3 {
		t.Fatalf("the executor broke: %v", err)
	}
}
