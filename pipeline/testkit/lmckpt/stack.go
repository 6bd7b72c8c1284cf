package lmckpt

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/pipeline/lm"
)

// StackExperts returns ts with the experts of one mixture-of-experts block
// written one by one, as the releases hold them (part+"E."+names.Gate,
// .Up and .Down, [inter, hidden], [inter, hidden], [hidden, inter]),
// replaced by the stacks transformers v5 saves: stack+"gate_up_proj"
// [experts, 2·inter, hidden] (each expert's gate rows, then its up rows)
// in the place of expert 0's gate and stack+"down_proj" [experts, hidden,
// inter] in the place of its down projection; the same values.
func StackExperts(ts []F32Tensor, part, stack string, names lm.ExpertNames, experts, inter, hidden int) []F32Tensor {
	byName := map[string][]float32{}
	for _, t := range ts {
		if strings.HasPrefix(t.Name, part) {
			byName[t.Name] = t.Values
		}
	}
	var gateUp, down []float32
	for e := range experts {
		q := fmt.Sprintf("%s%d.", part, e)
		gateUp = append(append(gateUp, byName[q+names.Gate]...), byName[q+names.Up]...)
		down = append(down, byName[q+names.Down]...)
	}
	out := make([]F32Tensor, 0, len(ts))
	for _, t := range ts {
		switch {
		case t.Name == part+"0."+names.Gate:
			out = append(out, F32Tensor{Name: stack + "gate_up_proj", Shape: []int{experts, 2 * inter, hidden}, Values: gateUp})
		case t.Name == part+"0."+names.Down:
			out = append(out, F32Tensor{Name: stack + "down_proj", Shape: []int{experts, hidden, inter}, Values: down})
		case !strings.HasPrefix(t.Name, part):
			out = append(out, t)
		}
	}
	return out
}

// Unstack is StackExperts' inverse on float64 weights: when w holds the
// stacks stack+"gate_up_proj" and stack+"down_proj", it adds each
// expert's matrices under part+"E."+names (views into the stacks), which
// the references read.
func Unstack(w map[string][]float64, stack, part string, names lm.ExpertNames, experts, inter, hidden int) {
	gateUp, down := w[stack+"gate_up_proj"], w[stack+"down_proj"]
	if gateUp == nil || down == nil {
		return
	}
	I, H := inter, hidden
	for e := range experts {
		q := fmt.Sprintf("%s%d.", part, e)
		g := gateUp[e*2*I*H:]
		w[q+names.Gate] = g[:I*H]
		w[q+names.Up] = g[I*H : 2*I*H]
		w[q+names.Down] = down[e*H*I : (e+1)*H*I]
	}
}
