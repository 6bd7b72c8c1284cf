package nn

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/internal/errs"
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
	if _, err := NewRope(RopeParams{Theta: 10000, HeadDim: 64, Scaling: scaling(t, `{"rope_type":"longrope","short_factor":[1],"long_factor":[1]}`)}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("longrope: %v", err)
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
