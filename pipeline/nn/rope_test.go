package nn

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

func scaling(t *testing.T, s string) map[string]any {
	t.Helper()
	m, err := ParseRopeScaling(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRopeTypes(t *testing.T) {
	base := func(i, dim int, theta float64) float64 { return 1 / math.Pow(theta, float64(2*i)/float64(dim)) }
	r, err := NewRope(RopeParams{Theta: 10000, HeadDim: 64, MaxPositions: 2048})
	if err != nil || r.RotaryDim != 64 || r.InvFreq[3] != base(3, 64, 10000) || r.AttentionFactor != 1 {
		t.Fatalf("default: %+v %v", r, err)
	}
	r, _ = NewRope(RopeParams{Theta: 10000, HeadDim: 64, MaxPositions: 2048, Scaling: scaling(t, `{"type":"linear","factor":4}`)})
	if r.InvFreq[3] != base(3, 64, 10000)/4 {
		t.Errorf("linear: %v", r.InvFreq[3])
	}
	r, _ = NewRope(RopeParams{Theta: 10000, HeadDim: 64, MaxPositions: 2048, Scaling: scaling(t, `{"rope_type":"dynamic","factor":4}`)})
	if r.InvFreq[3] != base(3, 64, 10000) {
		t.Errorf("dynamic within max positions: %v", r.InvFreq[3])
	}
	r, _ = NewRope(RopeParams{Theta: 10000, HeadDim: 64, MaxPositions: 2048, Scaling: scaling(t, `{"rope_type":"ntk","factor":4}`)})
	if want := base(3, 64, 10000*math.Pow(4, 64.0/62)); math.Abs(r.InvFreq[3]-want) > 1e-15 {
		t.Errorf("ntk: %v, want %v", r.InvFreq[3], want)
	}
	r, _ = NewRope(RopeParams{Theta: 10000, HeadDim: 64, PartialRotaryFactor: 0.25, MaxPositions: 2048})
	if r.RotaryDim != 16 || len(r.InvFreq) != 8 || r.InvFreq[1] != base(1, 16, 10000) {
		t.Errorf("partial: %+v", r)
	}
	if _, err := NewRope(RopeParams{Theta: 10000, HeadDim: 64, Scaling: scaling(t, `{"rope_type":"su2","factor":2}`)}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("an unknown type: %v", err)
	}
}

// LongRoPE (Phi-3's rope_type "longrope") divides plain RoPE's
// frequencies by short_factor, or long_factor past
// original_max_position_embeddings, and scales cos and sin by
// sqrt(1 + ln(factor)/ln(original)) as transformers'
// _compute_longrope_parameters does; the original length falls back to
// the config's top level, and malformed factors are refused.
func TestRopeLongrope(t *testing.T) {
	const theta, head = 10000.0, 8 // rotary dim 6 at factor 0.75: 3 factors
	p := RopeParams{Theta: theta, HeadDim: head, PartialRotaryFactor: 0.75, MaxPositions: 131072, OriginalMaxPositions: 4096, Switched: true,
		Scaling: scaling(t, `{"rope_type":"longrope","short_factor":[1,1.5,2],"long_factor":[3,4,5]}`)}
	r, err := NewRope(p)
	if err != nil {
		t.Fatal(err)
	}
	want := math.Sqrt(1 + math.Log(32)/math.Log(4096))
	if r.RotaryDim != 6 || r.LongAfter != 4096 || r.AttentionFactor != want || r.LongAttentionFactor != want {
		t.Fatalf("longrope: %+v, want rotary 6, switch at 4096, attention factor %v", r, want)
	}
	for i, f := range []float64{1, 1.5, 2} {
		base := math.Pow(theta, float64(2*i)/6)
		if math.Abs(r.InvFreq[i]-1/(f*base)) > 1e-15 || math.Abs(r.LongInvFreq[i]-1/(float64(3+i)*base)) > 1e-15 {
			t.Errorf("frequency %d: short %v long %v", i, r.InvFreq[i], r.LongInvFreq[i])
		}
	}
	p.Scaling = scaling(t, `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1],"original_max_position_embeddings":1024,"attention_factor":1.5}`)
	if r, err = NewRope(p); err != nil || r.LongAfter != 1024 || r.AttentionFactor != 1.5 {
		t.Errorf("the scaling's own original length and attention factor: %+v %v", r, err)
	}
	p.Scaling = scaling(t, `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1],"factor":1}`)
	if r, err = NewRope(p); err != nil || r.AttentionFactor != 1 {
		t.Errorf("factor 1 leaves cos and sin unscaled: %+v %v", r, err)
	}
	for _, bad := range []struct{ name, scaling string }{
		{"a short list", `{"type":"longrope","short_factor":[1,1],"long_factor":[1,1,1]}`},
		{"no long factors", `{"type":"longrope","short_factor":[1,1,1]}`},
		{"a zero factor", `{"type":"longrope","short_factor":[1,0,1],"long_factor":[1,1,1]}`},
		{"a string factor", `{"type":"longrope","short_factor":[1,"x",1],"long_factor":[1,1,1]}`},
		{"a fractional original length", `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1],"original_max_position_embeddings":10.5}`},
		{"a negative attention factor", `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1],"attention_factor":-1}`},
		{"a zero scale factor", `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1],"factor":0}`},
	} {
		q := p
		q.Scaling = scaling(t, bad.scaling)
		if _, err := NewRope(q); err == nil {
			t.Errorf("%s: accepted", bad.name)
		}
	}
	q := p
	q.OriginalMaxPositions = 0
	q.Scaling = scaling(t, `{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1,1]}`)
	if _, err := NewRope(q); err == nil || !strings.Contains(err.Error(), "original_max_position_embeddings") {
		t.Errorf("no original length anywhere: %v", err)
	}
	q = p
	q.Switched = false // a family that does not run the switch
	if _, err := NewRope(q); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("longrope without the switch: %v", err)
	}
}

// CosSin turns a row at the long frequencies, and scales it by the long
// attention factor, once its last position reaches LongAfter: in one
// batch a short row keeps the short ones.
func TestRopeLongropeSwitchesPerRow(t *testing.T) {
	r := &Rope{Type: "longrope", RotaryDim: 4, InvFreq: []float64{1, 0.1}, LongInvFreq: []float64{0.5, 0.01},
		AttentionFactor: 1.25, LongAttentionFactor: 2, LongAfter: 6, key: "test"}
	const bsz, tt, s = 2, 2, 16
	// Row 0 is unpadded: positions 5 and 6, a sequence of 7 > 6, long.
	// Row 1 has 2 pads: positions 3 and 4, short.
	out := execGraph(t, func(in []*Node) []*Node {
		c, sn := r.CosSin(lm.NewStep(bsz, tt, s, in[0], in[1], false), dtypes.Float32)
		return []*Node{c, sn}
	}, tensors.FromFlatDataAndDimensions([]int32{0, 2}, bsz), tensors.FromScalar(int32(5)))
	for b, row := range []struct {
		pos [2]float64
		inv []float64
		att float64
	}{{[2]float64{5, 6}, r.LongInvFreq, 2}, {[2]float64{3, 4}, r.InvFreq, 1.25}} {
		for ti, p := range row.pos {
			for i, f := range row.inv {
				at := (b*tt+ti)*2 + i
				if c, sn := row.att*math.Cos(p*f), row.att*math.Sin(p*f); math.Abs(float64(out[0][at])-c) > 1e-5 || math.Abs(float64(out[1][at])-sn) > 1e-5 {
					t.Errorf("row %d position %v frequency %d: cos %v sin %v, want %v %v", b, p, i, out[0][at], out[1][at], c, sn)
				}
			}
		}
	}
}

// YaRN's factor is the config's, not max_position_embeddings over
// original_max_position_embeddings (transformers since 4.56): Qwen3-8B
// (40960 positions) and Qwen2.5 (32768) with their model cards' factor 4
// over 32768 original positions scale as factor 4 does; without a factor
// the ratio stands in.
func TestRopeYarnExplicitFactor(t *testing.T) {
	want, err := NewRope(RopeParams{Theta: 1e6, HeadDim: 128, MaxPositions: 131072,
		Scaling: scaling(t, `{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, maxPos := range []int{40960, 32768} {
		r, err := NewRope(RopeParams{Theta: 1e6, HeadDim: 128, MaxPositions: maxPos,
			Scaling: scaling(t, `{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}`)})
		if err != nil {
			t.Fatal(err)
		}
		if r.AttentionFactor != want.AttentionFactor || !slices.Equal(r.InvFreq, want.InvFreq) {
			t.Errorf("max_position_embeddings %d: attention factor %v, want %v (factor 4's)", maxPos, r.AttentionFactor, want.AttentionFactor)
		}
	}
	r, err := NewRope(RopeParams{Theta: 1e6, HeadDim: 128, MaxPositions: 131072,
		Scaling: scaling(t, `{"rope_type":"yarn","original_max_position_embeddings":32768}`)})
	if err != nil {
		t.Fatal(err)
	}
	if r.AttentionFactor != want.AttentionFactor || !slices.Equal(r.InvFreq, want.InvFreq) {
		t.Errorf("no factor: attention factor %v, want the ratio 4's %v", r.AttentionFactor, want.AttentionFactor)
	}
	if _, err := NewRope(RopeParams{Theta: 1e6, HeadDim: 128, Scaling: scaling(t, `{"rope_type":"yarn"}`)}); err == nil {
		t.Error("yarn without a factor or positions to derive it: no error")
	}
}

func TestRopeYarn(t *testing.T) {
	// Qwen-style YaRN: factor 4 over 32768 original positions.
	r, err := NewRope(RopeParams{Theta: 1e6, HeadDim: 128, MaxPositions: 131072,
		Scaling: scaling(t, `{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}`)})
	if err != nil {
		t.Fatal(err)
	}
	// factor = max_position_embeddings / original = 4; attention factor
	// 0.1 ln 4 + 1.
	if math.Abs(r.AttentionFactor-(0.1*math.Log(4)+1)) > 1e-12 {
		t.Errorf("attention factor %v", r.AttentionFactor)
	}
	// The highest frequencies extrapolate (unchanged), the lowest
	// interpolate (divided by the factor).
	first := 1.0
	last := 1 / math.Pow(1e6, 126.0/128)
	if r.InvFreq[0] != first || math.Abs(r.InvFreq[63]-last/4) > 1e-20 {
		t.Errorf("yarn ends: %v %v (want %v %v)", r.InvFreq[0], r.InvFreq[63], first, last/4)
	}
	for i := 1; i < 64; i++ {
		if r.InvFreq[i] >= r.InvFreq[i-1] {
			t.Fatalf("yarn frequencies not decreasing at %d", i)
		}
	}
	// An explicit attention_factor wins.
	r, _ = NewRope(RopeParams{Theta: 1e4, HeadDim: 64, MaxPositions: 4096, Scaling: scaling(t, `{"rope_type":"yarn","factor":2,"attention_factor":1.5}`)})
	if r.AttentionFactor != 1.5 {
		t.Errorf("explicit attention factor %v", r.AttentionFactor)
	}
}

func TestConfigRope(t *testing.T) {
	raw := map[string]json.RawMessage{
		"rope_parameters": json.RawMessage(`{"rope_type":"linear","factor":2.0,"rope_theta":5000.0}`),
		"rope_theta":      json.RawMessage(`10000`),
	}
	r, err := ConfigRope(raw, 1, 32, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 / math.Pow(5000, 2.0/32) / 2; r.InvFreq[1] != want {
		t.Errorf("rope_parameters wins: %v, want %v", r.InvFreq[1], want)
	}
}
