package nn

import (
	"math"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestActQuant8, in float32: each row is scaled by 127 over its largest
// magnitude, rounded, clamped and scaled back; an all-zero row stays
// zero (the 1e-5 floor).
func TestActQuant8(t *testing.T) {
	x := []float32{0.5, -1, 0.2, 0.004, 0, 0, 0, 0, 3, 1.5, -0.7, 0.01}
	got := execGraph(t, func(in []*Node) []*Node { return []*Node{ActQuant8(in[0])} }, tensors.FromFlatDataAndDimensions(x, 3, 4))[0]
	for r := 0; r < 3; r++ {
		row := x[4*r : 4*r+4]
		mx := 0.0
		for _, v := range row {
			mx = math.Max(mx, math.Abs(float64(v)))
		}
		s := 127 / math.Max(mx, 1e-5)
		for i, v := range row {
			want := float32(math.Max(-128, math.Min(127, math.RoundToEven(float64(v)*s))) / s)
			if d := math.Abs(float64(got[4*r+i] - want)); d > 1e-7 {
				t.Errorf("row %d, %g: got %g, want %g", r, v, got[4*r+i], want)
			}
		}
	}
	if got[1] != -1 || got[3] != float32(math.RoundToEven(0.004*127)/127) || got[4] != 0 {
		t.Errorf("levels %v", got[:5])
	}
}
