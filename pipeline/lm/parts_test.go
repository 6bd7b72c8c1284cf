package lm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// moeDir writes the tiny Qwen3-MoE (layer 0 dense, layers 1-2 with 8
// experts of 24), its experts one by one or stacked.
func moeDir(t *testing.T, stacked bool) string {
	t.Helper()
	c := qwenref.TinyQwen3MoE()
	c.Stacked = stacked
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func flat32(t *testing.T, l *lm.Loaded, name string) ([]int, []float32) {
	t.Helper()
	x, err := l.Tensor(name, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	defer x.FinalizeAll()
	v, err := tensors.CopyFlatData[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return x.Shape().Dimensions, v
}

// TestAssembledWeights loads the same experts from a checkpoint holding
// them one by one (assembled into the stacks) and from one holding the
// stacks (each expert's part read from its range of the stack): every
// stack and every part reads the same in both, a part is its range of the
// stack, and the weight bytes agree.
func TestAssembledWeights(t *testing.T) {
	apart, err := lmckpt.Load(moeDir(t, false))
	if err != nil {
		t.Fatal(err)
	}
	defer apart.Close()
	stacked, err := lmckpt.Load(moeDir(t, true))
	if err != nil {
		t.Fatal(err)
	}
	defer stacked.Close()
	const p = "model.layers.1.mlp.experts."
	for _, name := range []string{p + "gate_up_proj", p + "down_proj", p + "0.gate_proj.weight", p + "3.up_proj.weight", p + "7.down_proj.weight"} {
		sa, a := flat32(t, apart, name)
		sb, b := flat32(t, stacked, name)
		if !slices.Equal(sa, sb) || !slices.Equal(a, b) {
			t.Errorf("%s: %v and %v read differently from the two layouts", name, sa, sb)
		}
	}
	_, gateUp := flat32(t, stacked, p+"gate_up_proj")
	_, up3 := flat32(t, stacked, p+"3.up_proj.weight")
	const I, H = 24, 32
	if at := (3*2 + 1) * I * H; !slices.Equal(up3, gateUp[at:at+I*H]) {
		t.Errorf("expert 3's up_proj is not rows [%d, %d) of its stack", 7*I, 8*I)
	}
	if apart.WeightBytes() != stacked.WeightBytes() {
		t.Errorf("weight bytes %d (per expert) and %d (stacked)", apart.WeightBytes(), stacked.WeightBytes())
	}
	if got := stacked.StoredDType(p + "3.up_proj.weight"); got != dtypes.Float32 {
		t.Errorf("stored dtype of a part of an F32 stack: %s", got)
	}
}

// TestAssembledWeightsStrict: a checkpoint must hold either a stack or
// every one of its parts, each with its own shape.
func TestAssembledWeightsStrict(t *testing.T) {
	const p = "model.layers.2.mlp.experts."
	for _, tc := range []struct {
		name    string
		stacked bool
		edit    func(map[string]safetensors.Tensor)
		want    string
	}{
		{"part missing", false, func(m map[string]safetensors.Tensor) { delete(m, p+"5.down_proj.weight") }, "missing tensors: " + p + "5.down_proj.weight"},
		{"part misshapen", false, func(m map[string]safetensors.Tensor) {
			v := m[p+"1.gate_proj.weight"]
			v.Shape = []int{32, 24}
			m[p+"1.gate_proj.weight"] = v
		}, p + "1.gate_proj.weight: shape [32 24], want [24 32]"},
		{"stack misshapen", true, func(m map[string]safetensors.Tensor) {
			v := m[p+"down_proj"]
			v.Shape = []int{8, 24, 32}
			m[p+"down_proj"] = v
		}, p + "down_proj: shape [8 24 32], want [8 32 24]"},
		{"both layouts", true, func(m map[string]safetensors.Tensor) {
			n := p + "0.down_proj.weight"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{32, 24}, Data: make([]byte, 4*32*24)}
		}, "unused tensors (this architecture does not read them): " + p + "0.down_proj.weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := moeDir(t, tc.stacked)
			rewrite(t, dir, tc.edit)
			l, err := lmckpt.Load(dir)
			if err == nil {
				l.Close()
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errs.ErrUnsupported) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
