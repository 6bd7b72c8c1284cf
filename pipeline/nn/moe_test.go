package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/testkit/phi3ref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// moeCase is a small routed-experts problem: N tokens of width H, E
// experts of width I, each token's k choices and weights.
type moeCase struct {
	n, h, e, i, k  int
	x              []float32 // [N, H]
	gate, up, down []float32 // [E, I, H], [E, I, H], [E, H, I]
	ids            []int32   // [N, k]
	weights        []float32 // [N, k]
}

func newMoECase(n, h, e, i, k int, route func(tok, j int) int32) moeCase {
	c := moeCase{n: n, h: h, e: e, i: i, k: k}
	c.x = values(n*h, 0.05)
	c.gate = values(e*i*h, 0.03)
	c.up = values(e*i*h, 0.02)
	for j := range c.up { // break the pattern shared with gate
		c.up[j] *= float32(1 + j%7)
	}
	c.down = values(e*h*i, 0.04)
	for j := range c.down {
		c.down[j] *= float32(1 + (j/3)%5)
	}
	c.ids = make([]int32, n*k)
	c.weights = make([]float32, n*k)
	for t := 0; t < n; t++ {
		for j := 0; j < k; j++ {
			c.ids[t*k+j] = route(t, j)
			c.weights[t*k+j] = float32(j+1) / float32(k*(k+1)/2) * float32(1+t%3) / 2
		}
	}
	return c
}

// reference computes Σⱼ wⱼ · down·(silu(gate·x) ⊙ up·x) in float64.
func (c moeCase) reference() []float64 { return c.referenceWeighing(false) }

// referenceWeighing is reference, or with inputs Σⱼ down·(silu(gate·wⱼx)
// ⊙ up·wⱼx): each weight applied to its expert's input (Llama 4).
func (c moeCase) referenceWeighing(inputs bool) []float64 {
	out := make([]float64, c.n*c.h)
	for t := 0; t < c.n; t++ {
		for j := 0; j < c.k; j++ {
			e := int(c.ids[t*c.k+j])
			in, after := 1.0, float64(c.weights[t*c.k+j])
			if inputs {
				in, after = after, 1
			}
			mid := make([]float64, c.i)
			for r := 0; r < c.i; r++ {
				var g, u float64
				for q := 0; q < c.h; q++ {
					xv := in * float64(c.x[t*c.h+q])
					g += float64(c.gate[(e*c.i+r)*c.h+q]) * xv
					u += float64(c.up[(e*c.i+r)*c.h+q]) * xv
				}
				mid[r] = g / (1 + math.Exp(-g)) * u
			}
			for q := 0; q < c.h; q++ {
				var y float64
				for r := 0; r < c.i; r++ {
					y += float64(c.down[(e*c.h+q)*c.i+r]) * mid[r]
				}
				out[t*c.h+q] += after * y
			}
		}
	}
	return out
}

// fusedGateUp stacks gate and up per expert as gate_up [E, 2I, H].
func (c moeCase) fusedGateUp() []float32 {
	out := make([]float32, 0, 2*len(c.gate))
	blk := c.i * c.h
	for e := 0; e < c.e; e++ {
		out = append(out, c.gate[e*blk:(e+1)*blk]...)
		out = append(out, c.up[e*blk:(e+1)*blk]...)
	}
	return out
}

// expertsFn is a formulation of routed experts with GatheredExperts'
// arguments.
type expertsFn func(x, ids, weights, gate, up, down *Node, act func(*Node) *Node) *Node

var formulations = map[string]expertsFn{
	"gathered": GatheredExperts,
	"stacked":  StackedExperts,
	"routed": func(x, ids, w, g, u, d *Node, act func(*Node) *Node) *Node {
		return RoutedExperts(x, ids, w, g, u, d, act, false)
	},
}

func (c moeCase) run(t *testing.T, fused bool) []float32 {
	return c.runWith(t, fused, GatheredExperts)
}

func (c moeCase) runWith(t *testing.T, fused bool, f expertsFn) []float32 {
	t.Helper()
	args := []any{
		tensors.FromFlatDataAndDimensions(c.x, c.n, c.h),
		tensors.FromFlatDataAndDimensions(c.ids, c.n, c.k),
		tensors.FromFlatDataAndDimensions(c.weights, c.n, c.k),
		tensors.FromFlatDataAndDimensions(c.down, c.e, c.h, c.i),
	}
	if fused {
		args = append(args, tensors.FromFlatDataAndDimensions(c.fusedGateUp(), c.e, 2*c.i, c.h))
	} else {
		args = append(args, tensors.FromFlatDataAndDimensions(c.gate, c.e, c.i, c.h), tensors.FromFlatDataAndDimensions(c.up, c.e, c.i, c.h))
	}
	return execGraph(t, func(in []*Node) []*Node {
		var up *Node
		if !fused {
			up = in[5]
		}
		return []*Node{f(in[0], in[1], in[2], in[4], up, in[3], SiLU)}
	}, args...)[0]
}

func maxRelErr(got []float32, want []float64) float64 {
	var worst, scale float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for j := range want {
		worst = math.Max(worst, math.Abs(float64(got[j])-want[j])/scale)
	}
	return worst
}

// TestGatheredExpertsMatchesReference checks the in-graph formulation,
// with separate and fused gate/up stacks, against a float64 loop over
// each token's choices: spread routing on an odd token count, and every
// token routed to one expert. A wrong expert id must fail the bound.
func TestGatheredExpertsMatchesReference(t *testing.T) {
	cases := map[string]moeCase{
		"spread":     newMoECase(7, 12, 5, 6, 2, func(tok, j int) int32 { return int32((tok*3 + j*2) % 5) }),
		"one expert": newMoECase(5, 12, 5, 6, 1, func(tok, j int) int32 { return 3 }),
		"top3":       newMoECase(3, 8, 6, 4, 3, func(tok, j int) int32 { return int32((tok + j*2) % 6) }),
	}
	const bound = 2e-6
	for name, c := range cases {
		want := c.reference()
		for fname, f := range formulations {
			for _, fused := range []bool{false, true} {
				if err := maxRelErr(c.runWith(t, fused, f), want); err > bound {
					t.Errorf("%s, %s (fused %v): max error %.3g relative to the largest output, want <= %g", name, fname, fused, err, bound)
				}
			}
			// Mutation: shift one choice to the next expert.
			bad := c
			bad.ids = append([]int32(nil), c.ids...)
			bad.ids[len(bad.ids)-1] = (bad.ids[len(bad.ids)-1] + 1) % int32(c.e)
			if err := maxRelErr(bad.runWith(t, false, f), want); err <= bound {
				t.Errorf("%s, %s: a wrong expert id still matches the reference (error %.3g)", name, fname, err)
			}
		}
	}
}

// TestWeighInputs checks ExpertStack.WeighInputs (each routing weight
// scales its expert's input, not its output) in the gathered and the
// stacked formulation, separate and fused gate/up, against the float64
// loop; the same stack weighing outputs must miss it.
func TestWeighInputs(t *testing.T) {
	c := newMoECase(5, 8, 4, 6, 2, func(tok, j int) int32 { return int32((tok*3 + j) % 4) })
	for j := range c.weights { // weights far from 1, so that scaling a SiLU's input differs from scaling its output
		c.weights[j] = 0.3 + 2*c.weights[j]
	}
	want := c.referenceWeighing(true)
	const bound = 2e-6
	for _, form := range []string{"gathered", "stacked"} {
		for _, fused := range []bool{false, true} {
			for _, weighInputs := range []bool{true, false} {
				got := c.runWith(t, fused, func(x, ids, w, g, u, d *Node, act func(*Node) *Node) *Node {
					s := ExpertStack{Gate: g, Up: u, Down: d, Act: act, WeighInputs: weighInputs}
					if form == "stacked" {
						return s.Stacked(x, ids, w)
					}
					return s.Gathered(x, ids, w)
				})
				err := maxRelErr(got, want)
				if weighInputs && err > bound {
					t.Errorf("%s (fused %v): max error %.3g relative to the largest output, want <= %g", form, fused, err, bound)
				}
				if !weighInputs && err < 1e-3 {
					t.Errorf("%s (fused %v): weighing the outputs matches weighing the inputs (error %.3g)", form, fused, err)
				}
			}
		}
	}
}

// TestRoutedExpertsChoice: RoutedExperts gathers matrices on a host-memory
// backend always, elsewhere only while the pairs are at most a third of
// the experts.
func TestRoutedExpertsChoice(t *testing.T) {
	for _, c := range []struct {
		n, k, e int
		host    bool
		gather  bool
	}{
		{1, 2, 6, false, true},  // 2 pairs of 6 experts
		{1, 2, 5, false, false}, // 2 pairs of 5: 6 > 5
		{8, 2, 6, true, true},   // host memory: always
		{8, 2, 6, false, false},
	} {
		g := NewGraph(testBackend(t), "choice")
		x := Parameter(g, "x", shapes.Make(dtypes.Float32, c.n, 4))
		ids := Parameter(g, "ids", shapes.Make(dtypes.Int32, c.n, c.k))
		w := Parameter(g, "w", shapes.Make(dtypes.Float32, c.n, c.k))
		gu := Parameter(g, "gu", shapes.Make(dtypes.Float32, c.e, 6, 4))
		down := Parameter(g, "down", shapes.Make(dtypes.Float32, c.e, 4, 3))
		out := RoutedExperts(x, ids, w, gu, nil, down, SiLU, c.host)
		if got := gathersMatrices(out); got != c.gather {
			t.Errorf("%+v: gathers matrices %v, want %v", c, got, c.gather)
		}
		g.Finalize()
	}
}

// gathersMatrices reports whether a Gather of a rank-3 operand feeds n.
func gathersMatrices(n *Node) bool {
	seen := map[*Node]bool{}
	var walk func(*Node) bool
	walk = func(n *Node) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		if n.Type() == NodeTypeGather && n.Inputs()[0].Rank() == 3 {
			return true
		}
		for _, in := range n.Inputs() {
			if walk(in) {
				return true
			}
		}
		return false
	}
	return walk(n)
}

// TestGatheredExpertsEqualsDense checks that the gathered and the dense
// formulation agree on the same routing.
func TestGatheredExpertsEqualsDense(t *testing.T) {
	c := newMoECase(6, 8, 4, 4, 2, func(tok, j int) int32 { return int32((tok + j) % 4) })
	args := []any{
		tensors.FromFlatDataAndDimensions(c.x, c.n, c.h),
		tensors.FromFlatDataAndDimensions(c.ids, c.n, c.k),
		tensors.FromFlatDataAndDimensions(c.weights, c.n, c.k),
		tensors.FromFlatDataAndDimensions(c.gate, c.e, c.i, c.h),
		tensors.FromFlatDataAndDimensions(c.up, c.e, c.i, c.h),
		tensors.FromFlatDataAndDimensions(c.down, c.e, c.h, c.i),
	}
	outs := execGraph(t, func(in []*Node) []*Node {
		x, ids, w, gate, up, down := in[0], in[1], in[2], in[3], in[4], in[5]
		dense := DenseExperts(x, ids, w, c.e, func(e int, xe *Node) *Node {
			at := func(s *Node) *Node { return Squeeze(SliceAxis(s, 0, AxisElem(e)), 0) }
			return GatedMLP(xe, at(gate), nil, at(up), nil, at(down), nil, SiLU)
		})
		return []*Node{GatheredExperts(x, ids, w, gate, up, down, SiLU), dense}
	}, args...)
	for j := range outs[0] {
		if d := math.Abs(float64(outs[0][j] - outs[1][j])); d > 1e-6 {
			t.Fatalf("element %d: gathered %g, dense %g", j, outs[0][j], outs[1][j])
		}
	}
}

// TopKRouter against a float64 loop: the k largest softmax probabilities
// per token, ties to the lower index, each weight exactly its expert's
// probability (then renormalized where asked), on the go and cpu
// backends.
func TestTopKRouter(t *testing.T) {
	const n, e, k = 3, 6, 3
	logits := []float32{
		0.1, 2, -1, 2, 0.5, 1.5, // a tie for first: expert 1 before 3
		-3, -3, -3, -3, -3, -3, // all tied: 0, 1, 2
		5, 0, 4, 0, 3, 0,
	}
	for _, be := range []string{"go", "cpu"} {
		backend := refcheck.GoBackend(t)
		if be == "cpu" {
			backend = refcheck.CPUBackend(t)
		}
		for _, normalize := range []bool{false, true} {
			out, err := ExecOnce(backend, func(l *Node) *Node { // [N, 2k]: the ids (exact in f32), then the weights
				ids, w := TopKRouter(l, k, normalize)
				return Concatenate([]*Node{ConvertDType(ids, dtypes.Float32), w}, 1)
			}, tensors.FromFlatDataAndDimensions(logits, n, e))
			if err != nil {
				t.Fatal(err)
			}
			flat := tensors.MustCopyFlatData[float32](out)
			ids, ws := make([]int32, n*k), make([]float32, n*k)
			for tok := range n {
				for j := range k {
					ids[tok*k+j], ws[tok*k+j] = int32(flat[tok*2*k+j]), flat[tok*2*k+k+j]
				}
			}
			for tok := 0; tok < n; tok++ {
				row := logits[tok*e : (tok+1)*e]
				var z float64
				for _, v := range row {
					z += math.Exp(float64(v))
				}
				taken := make([]bool, e)
				var want []int32
				var wantW []float64
				for range k {
					best := -1
					for x := range row {
						if !taken[x] && (best < 0 || row[x] > row[best]) {
							best = x
						}
					}
					taken[best] = true
					want, wantW = append(want, int32(best)), append(wantW, math.Exp(float64(row[best]))/z)
				}
				if normalize {
					var s float64
					for _, w := range wantW {
						s += w
					}
					for j := range wantW {
						wantW[j] /= s
					}
				}
				for j := range k {
					if got := ids[tok*k+j]; got != want[j] {
						t.Fatalf("%s normalize=%v: token %d choice %d is expert %d, want %d", be, normalize, tok, j, got, want[j])
					}
					if got := float64(ws[tok*k+j]); math.Abs(got-wantW[j]) > 1e-6 {
						t.Fatalf("%s normalize=%v: token %d choice %d weighs %v, want %v", be, normalize, tok, j, got, wantW[j])
					}
				}
			}
		}
	}
}

// TestUngatedExperts checks experts without a gate (NemotronH's: down ·
// relu²(up · x), the stack's Gate the up projection) in the gathered and
// the stacked formulation against a float64 loop; reading the same
// stack as a fused gate/up must miss it.
func TestUngatedExperts(t *testing.T) {
	c := newMoECase(5, 8, 4, 6, 2, func(tok, j int) int32 { return int32((tok*3 + j) % 4) })
	relu2 := func(x *Node) *Node { r := Max(x, ZerosLike(x)); return Mul(r, r) }
	want := make([]float64, c.n*c.h)
	for tok := 0; tok < c.n; tok++ {
		for j := 0; j < c.k; j++ {
			e := int(c.ids[tok*c.k+j])
			mid := make([]float64, c.i)
			for r := range mid {
				var u float64
				for q := 0; q < c.h; q++ {
					u += float64(c.up[(e*c.i+r)*c.h+q]) * float64(c.x[tok*c.h+q])
				}
				u = math.Max(u, 0)
				mid[r] = u * u
			}
			for q := 0; q < c.h; q++ {
				var y float64
				for r := range mid {
					y += float64(c.down[(e*c.h+q)*c.i+r]) * mid[r]
				}
				want[tok*c.h+q] += float64(c.weights[tok*c.k+j]) * y
			}
		}
	}
	args := func() []any { // fresh tensors for each run (a tensor is bound to one backend)
		return []any{
			tensors.FromFlatDataAndDimensions(c.x, c.n, c.h),
			tensors.FromFlatDataAndDimensions(c.ids, c.n, c.k),
			tensors.FromFlatDataAndDimensions(c.weights, c.n, c.k),
			tensors.FromFlatDataAndDimensions(c.up, c.e, c.i, c.h),
			tensors.FromFlatDataAndDimensions(c.down, c.e, c.h, c.i),
		}
	}
	for _, form := range []string{"gathered", "stacked"} {
		for _, ungated := range []bool{true, false} {
			got := execGraph(t, func(in []*Node) []*Node {
				s := ExpertStack{Gate: in[3], Down: in[4], Act: relu2, Ungated: ungated}
				if !ungated { // the same [E, I, H] read as a fused gate/up of I/2
					s.Down = SliceAxis(in[4], 2, AxisRange(0, c.i/2))
				}
				if form == "stacked" {
					return []*Node{s.Stacked(in[0], in[1], in[2])}
				}
				return []*Node{s.Gathered(in[0], in[1], in[2])}
			}, args()...)[0]
			err := maxRelErr(got, want)
			if ungated && err > 2e-6 {
				t.Errorf("%s: max error %.3g relative to the largest output", form, err)
			}
			if !ungated && err < 1e-3 {
				t.Errorf("%s: a gated reading matches the ungated experts (error %.3g)", form, err)
			}
		}
	}
}

// TestSparseMixerRouter checks Phi-3.5-MoE's router against phi3ref's
// float64 sparsemixer on rows where its masks matter: a lone winner (weight 1), near
// ties within 2·eps (shared softmax weight), a tie (the lower index
// first), negative logits and an all-zero row (0/0 keeps every expert).
func TestSparseMixerRouter(t *testing.T) {
	const n, e, eps = 5, 6, 0.01
	logits := []float32{
		0.1, 2, -1, 0.5, 0.4, 1.5, // a lone winner each round
		1, 3, 2.99, 2.95, 0.2, 2.97, // within 2% of 3: 2.99 and 2.97 share the first round's weight
		-0.5, -0.2, -0.201, -3, -0.2, -1, // a tie at -0.2 (expert 1 first), negatives
		0, 0, 0, 0, 0, 0, // all zero
		4, -4, 4.1, 0, 1, 4.05,
	}
	for _, be := range []string{"go", "cpu"} {
		backend := refcheck.GoBackend(t)
		if be == "cpu" {
			backend = refcheck.CPUBackend(t)
		}
		out, err := ExecOnce(backend, func(l *Node) *Node {
			ids, w := SparseMixerRouter(l, eps)
			return Concatenate([]*Node{ConvertDType(ids, dtypes.Float32), w}, 1) // [N, 4]
		}, tensors.FromFlatDataAndDimensions(logits, n, e))
		if err != nil {
			t.Fatal(err)
		}
		flat := tensors.MustCopyFlatData[float32](out)
		var shared bool
		for tok := range n {
			row := make([]float64, e)
			for x := range row {
				row[x] = float64(logits[tok*e+x])
			}
			ids, ws := phi3ref.SparseMixer(row, eps)
			for j := range 2 {
				if got := int(flat[tok*4+j]); got != ids[j] {
					t.Fatalf("%s: token %d choice %d is expert %d, want %d", be, tok, j, got, ids[j])
				}
				if got := float64(flat[tok*4+2+j]); math.Abs(got-ws[j]) > 1e-6 {
					t.Fatalf("%s: token %d choice %d weighs %v, want %v", be, tok, j, got, ws[j])
				}
				shared = shared || ws[j] < 0.99
			}
		}
		if !shared {
			t.Fatal("no row shares a weight: the masks are not exercised")
		}
	}
}

// TestGroupRouterMask checks how GroupRouter closes the groups it does
// not keep when every biased score is negative: masked to 0 (DeepSeek-V3
// in transformers) a closed expert beats every open one, masked to −∞
// (MaskInf, Ling 2.0) only open experts win.
func TestGroupRouterMask(t *testing.T) {
	scores := []float32{0.9, 0.8, 0.1, 0.2, 0.7, 0.6, 0.3, 0.35}
	bias := []float32{-1, -1, -1, -1, -1, -1, -1, -1}
	// Biased: groups of two sum to -0.3, -1.7, -0.7, -1.35: 0 and 2 kept.
	for _, c := range []struct {
		maskInf bool
		ids     []int32
		weights []float64
	}{
		{false, []int32{2, 3}, []float64{0.1 / 0.3, 0.2 / 0.3}},
		{true, []int32{0, 1}, []float64{0.9 / 1.7, 0.8 / 1.7}},
	} {
		r := GroupRouter{Experts: 8, TopK: 2, Groups: 4, TopKGroup: 2, NormTopK: true, MaskInf: c.maskInf, Scale: 1}
		out, err := ExecOnce(refcheck.GoBackend(t), func(s, b *Node) *Node {
			ids, w := r.Route(s, b)
			return Concatenate([]*Node{ConvertDType(ids, dtypes.Float32), w}, 1)
		}, tensors.FromFlatDataAndDimensions(scores, 1, 8), tensors.FromFlatDataAndDimensions(bias, 8))
		if err != nil {
			t.Fatal(err)
		}
		flat := tensors.MustCopyFlatData[float32](out)
		for j := range 2 {
			if got := int32(flat[j]); got != c.ids[j] {
				t.Errorf("MaskInf=%v: choice %d is expert %d, want %d", c.maskInf, j, got, c.ids[j])
			}
			if got := float64(flat[2+j]); math.Abs(got-c.weights[j]) > 1e-6 {
				t.Errorf("MaskInf=%v: choice %d weighs %v, want %v", c.maskInf, j, got, c.weights[j])
			}
		}
	}
}

// TestSigmoidTopKRouter checks that SmallThinker's sigmoid router chooses
// by the logits: above about 17 their float32 sigmoids are all 1, and
// choosing by those would take the lowest indices.
func TestSigmoidTopKRouter(t *testing.T) {
	logits := []float32{20, 30, 18, 25, -1, 0, 2, 1}
	out, err := ExecOnce(refcheck.GoBackend(t), func(l *Node) *Node {
		ids, w := SigmoidTopKRouter(l, 3)
		return Concatenate([]*Node{ConvertDType(ids, dtypes.Float32), w}, 1)
	}, tensors.FromFlatDataAndDimensions(logits, 1, 8))
	if err != nil {
		t.Fatal(err)
	}
	flat := tensors.MustCopyFlatData[float32](out)
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	sum := sig(30) + sig(25) + sig(20)
	for j, want := range []struct {
		id int32
		w  float64
	}{{1, sig(30) / sum}, {3, sig(25) / sum}, {0, sig(20) / sum}} {
		if got := int32(flat[j]); got != want.id {
			t.Errorf("choice %d is expert %d, want %d", j, got, want.id)
		}
		if got := float64(flat[3+j]); math.Abs(got-want.w) > 1e-6 {
			t.Errorf("choice %d weighs %v, want %v", j, got, want.w)
		}
	}
}
