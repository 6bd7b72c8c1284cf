package dsref

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/cmplx"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

var testTokens = []int{1, 9, 14, 60, 3, 5, 41, 27, 88, 2, 17, 33}

// load writes c's checkpoint into a temporary directory and reads it back.
func load(t *testing.T, c DeepSeek) (string, *Model) {
	t.Helper()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// permuteRope reorders the rope rows of a row-major weight w with in
// columns, in a copy: blocks blocks of R rope rows, block b starting at
// row b*stride+off. toHalves moves the interleaved pairs (2j, 2j+1) to
// rows j and R/2+j (what apply_rotary_pos_emb_interleave does to the
// projected values); otherwise the inverse.
func permuteRope(w []float64, in, blocks, stride, off, R int, toHalves bool) []float64 {
	out := slices.Clone(w)
	row := func(v []float64, r int) []float64 { return v[r*in : (r+1)*in] }
	for b := 0; b < blocks; b++ {
		base := b*stride + off
		for j := 0; j < R/2; j++ {
			even, odd := base+2*j, base+2*j+1
			first, second := base+j, base+R/2+j
			if toHalves {
				copy(row(out, first), row(w, even))
				copy(row(out, second), row(w, odd))
			} else {
				copy(row(out, even), row(w, first))
				copy(row(out, odd), row(w, second))
			}
		}
	}
	return out
}

// flipRope returns m with the other rope_interleave and the q and k_pe
// rope rows permuted to match, so that it computes the same function.
func flipRope(m *Model) *Model {
	c := m.C
	toHalves := c.RopeInterleave
	c.RopeInterleave = !c.RopeInterleave
	w := maps.Clone(m.W)
	qk := c.QKNope + c.QKRope
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.self_attn.", l)
		q, in := p+"q_proj.weight", c.Hidden
		if c.QLoraRank > 0 {
			q, in = p+"q_b_proj.weight", c.QLoraRank
		}
		w[q] = permuteRope(w[q], in, c.Heads, qk, c.QKNope, c.QKRope, toHalves)
		kv := p + "kv_a_proj_with_mqa.weight"
		w[kv] = permuteRope(w[kv], c.Hidden, 1, 0, c.KVLoraRank, c.QKRope, toHalves)
	}
	return &Model{C: c, W: w}
}

func maxAbsDiff(a, b [][]float64) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

// TestRopeInterleaveIsPermutedRotateHalf: a model with rope_interleave
// computes exactly (bit for bit) the logits of the rotate-half model whose
// q and k_pe rope rows hold the even rows first, then the odd ones, and
// back; without the permutation the two differ, so the flag matters.
func TestRopeInterleaveIsPermutedRotateHalf(t *testing.T) {
	for _, c := range []DeepSeek{TinyDeepSeek(), TinyDeepSeekLite()} {
		_, m := load(t, c)
		want := m.Logits(testTokens)
		flipped := flipRope(m)
		got := flipped.Logits(testTokens)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("interleave %v: position %d: permuted logits differ by %g", c.RopeInterleave, i, maxAbsDiff(got, want))
			}
		}
		plain := &Model{C: flipped.C, W: m.W}
		if d := maxAbsDiff(plain.Logits(testTokens), want); d < 1e-3 {
			t.Errorf("interleave %v: flipping the flag alone moves the logits by %g only", c.RopeInterleave, d)
		}
	}
}

// TestRotateHandWorked: the interleaved rotary turns each pair (2j, 2j+1)
// as the complex number v[2j] + i·v[2j+1] times e^{i·pos·inv_j} (the
// original DeepSeek formulation), written to halves; rotate-half turns
// (j, j+R/2) the same way in place. Either way q·k depends only on the
// distance of the positions.
func TestRotateHandWorked(t *testing.T) {
	v := []float64{0.3, -1.2, 0.7, 0.25, -0.5, 1.1, 0.9, -0.4}
	inv := []float64{1, 0.1, 0.01, 0.001}
	const pos, af = 5, 1.25
	for _, interleave := range []bool{true, false} {
		c := DeepSeek{RopeInterleave: interleave}
		got := c.rotate(v, pos, inv, af)
		for j := range inv {
			re, im := v[j], v[j+4]
			if interleave {
				re, im = v[2*j], v[2*j+1]
			}
			rot := complex(re, im) * complex(af*math.Cos(pos*inv[j]), af*math.Sin(pos*inv[j]))
			if math.Abs(got[j]-real(rot)) > 1e-14 || math.Abs(got[j+4]-imag(rot)) > 1e-14 {
				t.Errorf("interleave %v, pair %d: (%g, %g), want (%g, %g)", interleave, j, got[j], got[j+4], real(rot), imag(rot))
			}
		}
		k := []float64{-0.6, 0.2, 0.4, 1.3, 0.8, -0.1, -0.7, 0.5}
		dot := func(a, b []float64) float64 {
			s := 0.0
			for i := range a {
				s += a[i] * b[i]
			}
			return s
		}
		d1 := dot(c.rotate(v, 7, inv, 1), c.rotate(k, 3, inv, 1))
		d2 := dot(c.rotate(v, 13, inv, 1), c.rotate(k, 9, inv, 1))
		if math.Abs(d1-d2) > 1e-12 {
			t.Errorf("interleave %v: q·k at distance 4 is %g and %g", interleave, d1, d2)
		}
	}
}

// TestRopeParameters: the inverse frequencies, attention factor and
// softmax scale worked out by hand from _compute_yarn_parameters and
// DeepseekV3Attention.__init__. Lite: dim 8, base 1e4, 16 original
// positions: the correction dims of 32 and 1 rotations are
// 8·ln(16/(64π))/(2 ln 1e4) ≈ -1.10 (floor -2, clamped to 0) and
// 8·ln(16/(2π))/(2 ln 1e4) ≈ 0.41 (ceil 1), so frequency 0 is kept and
// the others are divided by the factor 4.
func TestRopeParameters(t *testing.T) {
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %.15g, want %.15g", what, got, want)
		}
	}
	inv, af := TinyDeepSeek().RopeFreqs()
	for i, want := range []float64{1, 0.1, 0.01, 0.001} {
		near(fmt.Sprintf("plain inv_freq[%d]", i), inv[i], want)
	}
	near("plain attention factor", af, 1)
	near("plain scale", TinyDeepSeek().SoftmaxScale(), 0.25)

	lite := TinyDeepSeekLite()
	inv, af = lite.RopeFreqs()
	for i, want := range []float64{1, 0.1 / 4, 0.01 / 4, 0.001 / 4} {
		near(fmt.Sprintf("yarn inv_freq[%d]", i), inv[i], want)
	}
	near("yarn attention factor (mscale = mscale_all_dim)", af, 1)
	m := 1 + 0.1*math.Log(4)
	near("yarn scale", lite.SoftmaxScale(), 0.25*m*m)
	lite.MScale = 0
	_, af = lite.RopeFreqs()
	near("yarn attention factor (no mscale)", af, m)
	lite.MScale, lite.MScaleAllDim = 2, 0
	_, af = lite.RopeFreqs()
	near("yarn attention factor (no mscale_all_dim)", af, m)
	near("yarn scale (no mscale_all_dim)", lite.SoftmaxScale(), 0.25)
}

// logit is the inverse of the sigmoid.
func logit(s []float64) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = math.Log(v / (1 - v))
	}
	return out
}

// TestRouteHandMade: DeepseekV3TopkRouter on scores chosen by hand.
func TestRouteHandMade(t *testing.T) {
	check := func(what string, c DeepSeek, scores, bias []float64, wantIDs []int, wantW []float64) {
		t.Helper()
		ids, w := c.Route(logit(scores), bias)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		for j := range w {
			if math.Abs(w[j]-wantW[j]) > 1e-12 {
				t.Errorf("%s: weights %v, want %v", what, w, wantW)
				return
			}
		}
	}
	c := DeepSeek{Experts: 8, TopK: 2, Groups: 4, TopKGroup: 2, NormTopK: true, RoutedScale: 2.5}
	flat := c
	flat.Groups, flat.TopKGroup = 1, 1
	// Groups {0,1} {2,3} {4,5} {6,7} score 1.0, 1.19, 0.9, 0.59: groups 1
	// and 0 stay open, so expert 4 (0.85, second overall) is out.
	s := []float64{0.9, 0.1, 0.6, 0.59, 0.85, 0.05, 0.3, 0.29}
	check("grouped", c, s, nil, []int{0, 2}, []float64{0.9 / 1.5 * 2.5, 0.6 / 1.5 * 2.5})
	check("plain top-k", flat, s, nil, []int{0, 4}, []float64{0.9 / 1.75 * 2.5, 0.85 / 1.75 * 2.5})
	noNorm := c
	noNorm.NormTopK = false
	check("grouped, not renormalised", noNorm, s, nil, []int{0, 2}, []float64{0.9 * 2.5, 0.6 * 2.5})
	// The bias lifts group 3 to 0.8+0.79 = 1.59, the best, and experts 6
	// and 7 win; their weights are their scores without the bias.
	bias := []float64{0, 0, 0, 0, 0, 0, 0.5, 0.5}
	check("grouped, biased", c, s, bias, []int{6, 7}, []float64{0.3 / 0.59 * 2.5, 0.29 / 0.59 * 2.5})
	check("plain top-k, biased", flat, s, bias, []int{0, 4}, []float64{0.9 / 1.75 * 2.5, 0.85 / 1.75 * 2.5})
	// Closed groups' choice values are 0, not -inf: the open group {0,1}
	// holds choice values 0.7 and -0.2, so the second expert comes from
	// the closed group (both at 0; the lower index).
	c = DeepSeek{Experts: 4, TopK: 2, Groups: 2, TopKGroup: 1, NormTopK: true, RoutedScale: 1}
	check("masked to zero", c, []float64{0.7, 0.2, 0.1, 0.2}, []float64{0, -0.4, -0.4, -0.4},
		[]int{0, 2}, []float64{0.7 / 0.8, 0.1 / 0.8})
}

// TestRoutingOnActivations: in the tiny checkpoints the correction bias
// and (for TinyDeepSeek) the group limit each change the experts chosen
// for some of the real MoE inputs, and Experts is what the block uses.
func TestRoutingOnActivations(t *testing.T) {
	for _, c := range []DeepSeek{TinyDeepSeek(), TinyDeepSeekLite()} {
		_, m := load(t, c)
		checkRouting(t, c, c.Seed, m.W, &m.moeInput, m.Experts, m.Logits)
	}
}

// wantTensors is the tensor list of the brief, written out for the tiny
// shapes: TinyDeepSeek (q LoRA) or TinyDeepSeekLite (q_proj); with mtp
// also the head's layer 3 (wantMTP).
func wantTensors(qLora, tied, mtp bool) map[string][]int {
	w := map[string][]int{
		"model.embed_tokens.weight": {96, 32},
		"model.norm.weight":         {32},
	}
	if !tied {
		w["lm_head.weight"] = []int{96, 32}
	}
	layers := 3
	if mtp {
		layers++
		wantMTP(w)
	}
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm.weight"] = []int{32}
		w[p+"post_attention_layernorm.weight"] = []int{32}
		if qLora {
			w[p+"self_attn.q_a_proj.weight"] = []int{24, 32}
			w[p+"self_attn.q_a_layernorm.weight"] = []int{24}
			w[p+"self_attn.q_b_proj.weight"] = []int{64, 24}
		} else {
			w[p+"self_attn.q_proj.weight"] = []int{64, 32}
		}
		w[p+"self_attn.kv_a_proj_with_mqa.weight"] = []int{24, 32}
		w[p+"self_attn.kv_a_layernorm.weight"] = []int{16}
		w[p+"self_attn.kv_b_proj.weight"] = []int{80, 16}
		w[p+"self_attn.o_proj.weight"] = []int{32, 48}
		if l == 0 {
			w[p+"mlp.gate_proj.weight"] = []int{48, 32}
			w[p+"mlp.up_proj.weight"] = []int{48, 32}
			w[p+"mlp.down_proj.weight"] = []int{32, 48}
			continue
		}
		w[p+"mlp.gate.weight"] = []int{8, 32}
		w[p+"mlp.gate.e_score_correction_bias"] = []int{8}
		for e := 0; e < 8; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			w[q+"gate_proj.weight"] = []int{16, 32}
			w[q+"up_proj.weight"] = []int{16, 32}
			w[q+"down_proj.weight"] = []int{32, 16}
		}
		w[p+"mlp.shared_experts.gate_proj.weight"] = []int{16, 32}
		w[p+"mlp.shared_experts.up_proj.weight"] = []int{16, 32}
		w[p+"mlp.shared_experts.down_proj.weight"] = []int{32, 16}
	}
	return w
}

// TestCheckpoint: the written model.safetensors holds exactly the
// tensors of the brief (names, shapes, float32) and no others, and
// config.json and generation_config.json say what DeepSeek-V3's do.
func TestCheckpoint(t *testing.T) {
	tied := TinyDeepSeekLite()
	tied.Tied = true
	for _, tc := range []struct {
		c           DeepSeek
		qLora, tied bool
	}{{TinyDeepSeek(), true, false}, {TinyDeepSeekLite(), false, false}, {tied, false, true}} {
		dir := t.TempDir()
		if err := tc.c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantTensors(tc.qLora, tc.tied, false)
		if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("tensors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
				t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
			}
		}
		ck.Close()

		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]any{
			"model_type": "deepseek_v3", "scoring_func": "sigmoid", "topk_method": "noaux_tc",
			"num_key_value_heads": 4.0, "kv_lora_rank": 16.0, "qk_rope_head_dim": 8.0, "n_group": float64(tc.c.Groups),
			"rope_interleave": tc.c.RopeInterleave, "tie_word_embeddings": tc.tied, "bos_token_id": 0.0, "eos_token_id": 1.0,
			"num_nextn_predict_layers": 0.0,
		} {
			if cfg[key] != want {
				t.Errorf("config %s = %v, want %v", key, cfg[key], want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "DeepseekV3ForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		if tc.qLora != (cfg["q_lora_rank"] != nil) {
			t.Errorf("q_lora_rank %v", cfg["q_lora_rank"])
		}
		rs, _ := cfg["rope_scaling"].(map[string]any)
		if (tc.c.Factor > 0) != (rs != nil) || rs != nil && (rs["type"] != "yarn" || rs["factor"] != 4.0 ||
			rs["original_max_position_embeddings"] != 16.0 || rs["mscale_all_dim"] != 1.0 || cfg["max_position_embeddings"] != 64.0) {
			t.Errorf("rope_scaling %v, max_position_embeddings %v", cfg["rope_scaling"], cfg["max_position_embeddings"])
		}
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		var gen map[string]any
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil || gen["bos_token_id"] != 0.0 || gen["eos_token_id"] != 1.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}
}

// TestCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's, and every row is finite, O(1) and not constant.
func TestCausal(t *testing.T) {
	for _, c := range []DeepSeek{TinyDeepSeek(), TinyDeepSeekLite()} {
		_, m := load(t, c)
		all := m.Logits(testTokens)
		for _, n := range []int{1, 5, 9} {
			prefix := m.Logits(testTokens[:n])
			for i := range prefix {
				if !slices.Equal(prefix[i], all[i]) {
					t.Errorf("seed %d: prefix of %d, position %d: logits differ by %g", c.Seed, n, i, maxAbsDiff(prefix[i:i+1], all[i:i+1]))
				}
			}
		}
		for i, row := range all {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range row {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("seed %d, position %d: logit %g", c.Seed, i, v)
				}
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			if hi-lo < 0.1 || hi-lo > 100 {
				t.Errorf("seed %d, position %d: logits span [%g, %g]", c.Seed, i, lo, hi)
			}
		}
	}
}

// TestLoadChecks: reading a checkpoint with another description fails
// on the first tensor it lacks instead of running.
func TestLoadChecks(t *testing.T) {
	dir, _ := load(t, TinyDeepSeek())
	_, err := TinyDeepSeekLite().Load(dir)
	if err == nil || !strings.Contains(err.Error(), "q_proj") {
		t.Errorf("loading a q-LoRA checkpoint without q LoRA: %v", err)
	}
}

// TestShiftInvariance: the rotary is the only position signal, and it
// enters q·k through the distance of the positions alone, so starting
// the sequence at position 37 leaves the logits unchanged (to rounding):
// q_pe and k_pe are each rotated by their own position.
func TestShiftInvariance(t *testing.T) {
	for _, c := range []DeepSeek{TinyDeepSeek(), TinyDeepSeekLite()} {
		_, m := load(t, c)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
	}
}

// TestDeepSeekV3Yarn: DeepSeek-V3's own rope parameters (rope dim 64,
// base 1e4, factor 40 over 4096 positions, beta 32 and 1, mscale and
// mscale_all_dim 1). The correction dims are
// 64·ln(4096/(64π))/(2 ln 1e4) ≈ 10.47 (floor 10) and
// 64·ln(4096/(2π))/(2 ln 1e4) ≈ 22.51 (ceil 23): frequencies up to 10
// are kept, from 23 on divided by 40, and in between blended with
// weight (i-10)/13 on the divided one.
func TestDeepSeekV3Yarn(t *testing.T) {
	c := DeepSeek{QKNope: 128, QKRope: 64, Theta: 10000, Factor: 40, OrigMax: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}
	inv, af := c.RopeFreqs()
	for _, i := range []int{0, 5, 10, 11, 16, 22, 23, 31} {
		ramp := math.Min(math.Max(float64(i-10)/13, 0), 1)
		want := math.Pow(10000, -float64(i)/32) * (1 - ramp + ramp/40)
		if math.Abs(inv[i]-want) > 1e-12*want {
			t.Errorf("inv_freq[%d] = %g, want %g", i, inv[i], want)
		}
	}
	if af != 1 {
		t.Errorf("attention factor %g, want 1", af)
	}
	m := 1 + 0.1*math.Log(40)
	if got, want := c.SoftmaxScale(), m*m/math.Sqrt(192); math.Abs(got-want) > 1e-15 {
		t.Errorf("softmax scale %g, want %g", got, want)
	}
}

// TestFirstPositionAttention: the first position attends to itself
// alone, so its attention output is its value heads: for head h the rows
// h·(QKNope+VHead)+QKNope … +VHead of kv_b_proj applied to the normed
// compressed kv (the first KVLoraRank of kv_a_proj_with_mqa's outputs).
func TestFirstPositionAttention(t *testing.T) {
	c := TinyDeepSeek()
	_, m := load(t, c)
	x := m.W["model.embed_tokens.weight"][5*c.Hidden : 6*c.Hidden]
	p := "model.layers.1."
	got := m.attention(p, [][]float64{x}, 0)[0]
	h := lmckpt.RMSNorm64(x, m.W[p+"input_layernorm.weight"], c.Eps)
	kva := m.W[p+"self_attn.kv_a_proj_with_mqa.weight"]
	comp := make([]float64, c.KVLoraRank)
	for r := range comp {
		for i, v := range h {
			comp[r] += kva[r*c.Hidden+i] * v
		}
	}
	comp = lmckpt.RMSNorm64(comp, m.W[p+"self_attn.kv_a_layernorm.weight"], 1e-6)
	kvb := m.W[p+"self_attn.kv_b_proj.weight"]
	for hd := 0; hd < c.Heads; hd++ {
		for j := 0; j < c.VHead; j++ {
			row := hd*(c.QKNope+c.VHead) + c.QKNope + j
			want := 0.0
			for r, v := range comp {
				want += kvb[row*c.KVLoraRank+r] * v
			}
			if g := got[hd*c.VHead+j]; math.Abs(g-want) > 1e-12 {
				t.Fatalf("head %d, value %d: %g, want %g", hd, j, g, want)
			}
		}
	}
}

// TestMoEBlockHandMade: DeepseekV3MoE on a hand-built block of 4 experts
// of width 1 in 2 groups (top 1 group, top 2 experts, renormalised,
// scale 2) with a shared expert: expert e computes
// (d_e·silu(g_e·x0)·(x0+x1), 0), the shared one (0, silu(x1)·x1), and the
// block returns Σ w·expert + shared.
func TestMoEBlockHandMade(t *testing.T) {
	c := DeepSeek{Hidden: 2, MoEIntermediate: 1, Layers: 1, Experts: 4, TopK: 2, Shared: 1, Groups: 2, TopKGroup: 1,
		NormTopK: true, RoutedScale: 2}
	p := "model.layers.0.mlp."
	w := map[string][]float64{
		// router logits (x0, x1, -x0, -x1) with bias (0, 0, 0, 0).
		p + "gate.weight":                     {1, 0, 0, 1, -1, 0, 0, -1},
		p + "gate.e_score_correction_bias":    {0, 0, 0, 0},
		p + "shared_experts.gate_proj.weight": {0, 1},
		p + "shared_experts.up_proj.weight":   {0, 1},
		p + "shared_experts.down_proj.weight": {0, 1},
	}
	g, d := []float64{0.5, -1, 2, 1.5}, []float64{1, 2, 3, 4}
	for e := range 4 {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		w[q+"gate_proj.weight"] = []float64{g[e], 0}
		w[q+"up_proj.weight"] = []float64{1, 1}
		w[q+"down_proj.weight"] = []float64{d[e], 0}
	}
	m := &Model{C: c, W: w}
	x := []float64{0.8, 0.3}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	// Scores sigmoid(0.8), sigmoid(0.3) in group 0 (sum 1.89...), the
	// group of the larger sum; both its experts win.
	s0, s1 := sig(0.8), sig(0.3)
	w0, w1 := 2*s0/(s0+s1), 2*s1/(s0+s1)
	want := []float64{
		w0*d[0]*silu(g[0]*0.8)*1.1 + w1*d[1]*silu(g[1]*0.8)*1.1,
		silu(0.3) * 0.3,
	}
	got := m.moe(0, p, x)
	if math.Abs(got[0]-want[0]) > 1e-12 || math.Abs(got[1]-want[1]) > 1e-12 {
		t.Errorf("moe %v, want %v", got, want)
	}
	if ids := m.Experts(0, x); !slices.Equal(ids, []int{0, 1}) {
		t.Errorf("experts %v, want [0 1]", ids)
	}
}

// ----------------------------------------------------------------------------
// Glm4MoeForCausalLM

// loadGLM writes c's checkpoint into a temporary directory and reads it
// back.
func loadGLM(t *testing.T, c GLM) (string, *GLMModel) {
	t.Helper()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// TestGLMRotaryHandWorked: TinyGLM's head dim is 16 (set, not
// Hidden/Heads = 8) and partial_rotary_factor 0.5 rotates its first 8
// dims with inverse frequencies 1e4^(-2i/8) = 1, 0.1, 0.01, 0.001:
// pair (j, j+4) turns as the complex number v[j] + i·v[j+4] times
// e^{i·pos·inv_j}, dims 8…15 pass through untouched, and q·k over the
// rotated dims depends only on the distance of the positions.
func TestGLMRotaryHandWorked(t *testing.T) {
	c := TinyGLM()
	if c.HeadSize() != 16 || c.RotaryDim() != 8 {
		t.Fatalf("head size %d, rotary dim %d; want 16, 8", c.HeadSize(), c.RotaryDim())
	}
	inv := c.RopeFreqs()
	for i, want := range []float64{1, 0.1, 0.01, 0.001} {
		if math.Abs(inv[i]-want) > 1e-15 {
			t.Errorf("inv_freq[%d] = %.17g, want %g", i, inv[i], want)
		}
	}
	v := []float64{0.3, -1.2, 0.7, 0.25, -0.5, 1.1, 0.9, -0.4, 2.5, -3, 0.125, 7, -0.75, 1.5, 4, -2}
	const pos = 5
	got := c.rotate(v, pos, inv)
	if !slices.Equal(got[8:], v[8:]) {
		t.Errorf("pass-through dims %v, want %v", got[8:], v[8:])
	}
	for j := range 4 {
		rot := complex(v[j], v[j+4]) * complex(math.Cos(pos*inv[j]), math.Sin(pos*inv[j]))
		if math.Abs(got[j]-real(rot)) > 1e-14 || math.Abs(got[j+4]-imag(rot)) > 1e-14 {
			t.Errorf("pair (%d, %d): (%g, %g), want (%g, %g)", j, j+4, got[j], got[j+4], real(rot), imag(rot))
		}
	}
	if !slices.Equal(c.rotate(v, 0, inv), v) {
		t.Errorf("position 0 moves the head: %v", c.rotate(v, 0, inv))
	}
	k := []float64{-0.6, 0.2, 0.4, 1.3, 0.8, -0.1, -0.7, 0.5, 1, 2, 3, 4, 5, 6, 7, 8}
	dot := func(a, b []float64) float64 {
		s := 0.0
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	if d1, d2 := dot(c.rotate(v, 7, inv), c.rotate(k, 3, inv)), dot(c.rotate(v, 13, inv), c.rotate(k, 9, inv)); math.Abs(d1-d2) > 1e-12 {
		t.Errorf("q·k at distance 4 is %g and %g", d1, d2)
	}

	// Without head_dim the head is hidden_size/num_attention_heads; the
	// rotary dim is int(head_dim·factor), truncated.
	c.HeadDim = 0
	if c.HeadSize() != 8 || c.RotaryDim() != 4 {
		t.Errorf("no head_dim: head size %d, rotary dim %d; want 8, 4", c.HeadSize(), c.RotaryDim())
	}
	c.HeadDim, c.PartialRotary = 20, 0.25
	if c.RotaryDim() != 5 || c.check() == nil {
		t.Errorf("head dim 20 at 0.25: rotary dim %d (want 5), check %v (want an error: odd)", c.RotaryDim(), c.check())
	}
	c.HeadDim, c.PartialRotary = 16, 1
	if got := c.rotate(v, pos, c.RopeFreqs()); slices.Equal(got[8:], v[8:]) {
		t.Errorf("factor 1 leaves dims 8… alone")
	}
}

// TestGLMFirstPositionAttention: the first position attends to itself
// alone, so query head h outputs value head h/(Heads/KVHeads), that is
// rows (h/2)·16 … +16 of v_proj applied to the normed input, plus v_proj's
// bias when there is one.
func TestGLMFirstPositionAttention(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		x := m.W["model.embed_tokens.weight"][5*c.Hidden : 6*c.Hidden]
		p := "model.layers.1."
		got := m.attention(p, [][]float64{x}, 0)[0]
		h := lmckpt.RMSNorm64(x, m.W[p+"input_layernorm.weight"], c.Eps)
		vp, vb := m.W[p+"self_attn.v_proj.weight"], m.W[p+"self_attn.v_proj.bias"]
		if (vb != nil) != c.AttentionBias {
			t.Fatalf("seed %d: v_proj.bias %v with attention_bias %v", c.Seed, vb != nil, c.AttentionBias)
		}
		for hd := 0; hd < c.Heads; hd++ {
			for j := 0; j < 16; j++ {
				row := (hd/2)*16 + j
				want := 0.0
				if vb != nil {
					want = vb[row]
				}
				for i, v := range h {
					want += vp[row*c.Hidden+i] * v
				}
				if g := got[hd*16+j]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g (value head %d's)", c.Seed, hd, j, g, want, hd/2)
				}
			}
		}
	}
}

// TestGLMSecondPositionAttention: at position 1 query head h weighs the
// value heads of positions 0 and 1 of its KV head h/2 by the softmax of
// q·k/sqrt(16) (head_dim^-0.5, the set head dim, not Hidden/Heads), with
// the heads as project gives them.
func TestGLMSecondPositionAttention(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		emb := m.W["model.embed_tokens.weight"]
		x := [][]float64{emb[5*c.Hidden : 6*c.Hidden], emb[9*c.Hidden : 10*c.Hidden]}
		p := "model.layers.1."
		got := m.attention(p, x, 0)[1]
		var q, k, v [2][][]float64
		for pos := range x {
			h := lmckpt.RMSNorm64(x[pos], m.W[p+"input_layernorm.weight"], c.Eps)
			q[pos], k[pos], v[pos] = m.project(p, h, pos, c.RopeFreqs())
		}
		for hd := 0; hd < c.Heads; hd++ {
			var s [2]float64
			for pos := range s {
				for i := range 16 {
					s[pos] += q[1][hd][i] * k[pos][hd/2][i] / 4
				}
			}
			p0 := 1 / (1 + math.Exp(s[1]-s[0]))
			for i := range 16 {
				want := p0*v[0][hd/2][i] + (1-p0)*v[1][hd/2][i]
				if g := got[hd*16+i]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g", c.Seed, hd, i, g, want)
				}
			}
		}
	}
}

// permuteBlocks returns w [len(perm)·D rows of cols] with row block i
// taken from block perm[i]; rows false permutes column blocks of width D
// instead (w [len(w)/cols rows of cols]).
func permuteBlocks(w []float64, cols, D int, perm []int, rows bool) []float64 {
	out := slices.Clone(w)
	if rows {
		for i, j := range perm {
			copy(out[i*D*cols:(i+1)*D*cols], w[j*D*cols:(j+1)*D*cols])
		}
		return out
	}
	for r := 0; r < len(w)/cols; r++ {
		for i, j := range perm {
			copy(out[r*cols+i*D:r*cols+(i+1)*D], w[r*cols+j*D:r*cols+(j+1)*D])
		}
	}
	return out
}

// relabel returns m with key/value heads 0 and 1 swapped (k_proj and
// v_proj rows and biases) and the query heads permuted by qPerm (q_proj
// rows and bias, o_proj columns).
func relabel(m *GLMModel, qPerm []int) *GLMModel {
	c := m.C
	D := c.HeadSize()
	w := maps.Clone(m.W)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.self_attn.", l)
		for _, proj := range []string{"k_proj", "v_proj"} {
			w[p+proj+".weight"] = permuteBlocks(w[p+proj+".weight"], c.Hidden, D, []int{1, 0}, true)
			if b, ok := w[p+proj+".bias"]; ok {
				w[p+proj+".bias"] = permuteBlocks(b, 1, D, []int{1, 0}, true)
			}
		}
		w[p+"q_proj.weight"] = permuteBlocks(w[p+"q_proj.weight"], c.Hidden, D, qPerm, true)
		if b, ok := w[p+"q_proj.bias"]; ok {
			w[p+"q_proj.bias"] = permuteBlocks(b, 1, D, qPerm, true)
		}
		w[p+"o_proj.weight"] = permuteBlocks(w[p+"o_proj.weight"], c.Heads*D, D, qPerm, false)
	}
	return &GLMModel{C: c, W: w}
}

// TestGLMGQAGrouping: query heads 0, 1 share key/value head 0 and heads
// 2, 3 head 1 (repeat_kv: consecutive query heads per KV head), so
// swapping the two KV heads along with query heads {0,1} and {2,3}
// computes the same logits, while swapping them along with 0↔1 and 2↔3
// (the pairing h mod KVHeads would need) does not.
func TestGLMGQAGrouping(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		want := m.Logits(testTokens)
		if d := maxAbsDiff(relabel(m, []int{2, 3, 0, 1}).Logits(testTokens), want); d > 1e-12 {
			t.Errorf("seed %d: relabelled heads move the logits by %g", c.Seed, d)
		}
		if d := maxAbsDiff(relabel(m, []int{1, 0, 3, 2}).Logits(testTokens), want); d < 1e-3 {
			t.Errorf("seed %d: pairing the query heads modulo KVHeads moves the logits by %g only", c.Seed, d)
		}
	}
}

// TestGLMQKNormBeforeRope: with use_qk_norm each query head at position
// 5 is its q_proj rows, RMS-normed over the head (eps rms_norm_eps) and
// scaled by q_norm.weight, then rotated; rotating first and norming after
// gives something else (q_norm's weights differ within a rotated pair),
// so the order is tested. Keys the same with k_norm.
func TestGLMQKNormBeforeRope(t *testing.T) {
	c := TinyGLMQKNorm()
	_, m := loadGLM(t, c)
	p := "model.layers.2."
	h := lmckpt.RMSNorm64(m.W["model.embed_tokens.weight"][7*c.Hidden:8*c.Hidden], m.W[p+"input_layernorm.weight"], c.Eps)
	inv := c.RopeFreqs()
	const pos = 5
	q, k, _ := m.project(p, h, pos, inv)
	for _, tc := range []struct {
		name  string
		heads [][]float64
	}{{"q", q}, {"k", k}} {
		proj, norm := m.W[p+"self_attn."+tc.name+"_proj.weight"], m.W[p+"self_attn."+tc.name+"_norm.weight"]
		for hd, got := range tc.heads {
			raw := make([]float64, 16)
			ss := 0.0
			for j := range raw {
				for i, v := range h {
					raw[j] += proj[(hd*16+j)*c.Hidden+i] * v
				}
				ss += raw[j] * raw[j]
			}
			normed := make([]float64, 16)
			for j := range normed {
				normed[j] = raw[j] / math.Sqrt(ss/16+1e-5) * norm[j]
			}
			want := slices.Clone(normed)
			for j := range 4 {
				rot := complex(normed[j], normed[j+4]) * complex(math.Cos(pos*inv[j]), math.Sin(pos*inv[j]))
				want[j], want[j+4] = real(rot), imag(rot)
			}
			for j := range want {
				if math.Abs(got[j]-want[j]) > 1e-12 {
					t.Fatalf("%s head %d, dim %d: %g, want %g", tc.name, hd, j, got[j], want[j])
				}
			}
			after := lmckpt.RMSNorm64(c.rotate(raw, pos, inv), norm, c.Eps)
			if d := maxAbsDiff([][]float64{after}, [][]float64{got}); d < 1e-3 {
				t.Errorf("%s head %d: norming after the rotary moves it by %g only", tc.name, hd, d)
			}
		}
	}
}

// wantGLMTensors is the tensor list of a Glm4MoeForCausalLM checkpoint,
// written out for TinyGLM's shapes.
func wantGLMTensors(bias, qkNorm, tied, mtp bool) map[string][]int {
	w := map[string][]int{
		"model.embed_tokens.weight": {96, 32},
		"model.norm.weight":         {32},
	}
	if !tied {
		w["lm_head.weight"] = []int{96, 32}
	}
	layers := 3
	if mtp {
		layers++
		wantMTP(w)
	}
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm.weight"] = []int{32}
		w[p+"post_attention_layernorm.weight"] = []int{32}
		w[p+"self_attn.q_proj.weight"] = []int{64, 32}
		w[p+"self_attn.k_proj.weight"] = []int{32, 32}
		w[p+"self_attn.v_proj.weight"] = []int{32, 32}
		w[p+"self_attn.o_proj.weight"] = []int{32, 64}
		if bias {
			w[p+"self_attn.q_proj.bias"] = []int{64}
			w[p+"self_attn.k_proj.bias"] = []int{32}
			w[p+"self_attn.v_proj.bias"] = []int{32}
		}
		if qkNorm {
			w[p+"self_attn.q_norm.weight"] = []int{16}
			w[p+"self_attn.k_norm.weight"] = []int{16}
		}
		if l == 0 {
			w[p+"mlp.gate_proj.weight"] = []int{48, 32}
			w[p+"mlp.up_proj.weight"] = []int{48, 32}
			w[p+"mlp.down_proj.weight"] = []int{32, 48}
			continue
		}
		w[p+"mlp.gate.weight"] = []int{8, 32}
		w[p+"mlp.gate.e_score_correction_bias"] = []int{8}
		for e := 0; e < 8; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			w[q+"gate_proj.weight"] = []int{16, 32}
			w[q+"up_proj.weight"] = []int{16, 32}
			w[q+"down_proj.weight"] = []int{32, 16}
		}
		w[p+"mlp.shared_experts.gate_proj.weight"] = []int{16, 32}
		w[p+"mlp.shared_experts.up_proj.weight"] = []int{16, 32}
		w[p+"mlp.shared_experts.down_proj.weight"] = []int{32, 16}
	}
	return w
}

// TestGLMCheckpoint: the written model.safetensors holds exactly the
// tensors of a GLM-4.5 checkpoint (biases iff attention_bias, q_norm and
// k_norm iff use_qk_norm, never an o_proj bias, lm_head iff untied), in
// float32, and config.json says what GLM-4.5-Air's does.
func TestGLMCheckpoint(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantGLMTensors(c.AttentionBias, c.QKNorm, c.Tied, false)
		if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("seed %d: tensors:\n%s\nwant:\n%s", c.Seed, strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
				t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
			}
		}
		for _, name := range ck.Names() {
			if strings.Contains(name, "o_proj.bias") {
				t.Errorf("seed %d: %s", c.Seed, name)
			}
		}
		ck.Close()

		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		wantCfg := map[string]any{
			"model_type": "glm4_moe", "vocab_size": 96.0, "hidden_size": 32.0, "intermediate_size": 48.0,
			"moe_intermediate_size": 16.0, "num_hidden_layers": 3.0, "num_attention_heads": 4.0,
			"num_key_value_heads": 2.0, "head_dim": 16.0, "partial_rotary_factor": 0.5,
			"attention_bias": c.AttentionBias, "use_qk_norm": c.QKNorm, "n_routed_experts": 8.0,
			"num_experts_per_tok": 2.0, "n_shared_experts": 1.0, "n_group": float64(c.Groups),
			"topk_group": float64(c.TopKGroup), "first_k_dense_replace": 1.0, "norm_topk_prob": true,
			"routed_scaling_factor": c.RoutedScale, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
			"max_position_embeddings": 256.0, "tie_word_embeddings": c.Tied, "hidden_act": "silu",
			"bos_token_id": 0.0, "eos_token_id": 1.0, "num_nextn_predict_layers": 0.0,
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "Glm4MoeForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		var gen map[string]any
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil || gen["bos_token_id"] != 0.0 || gen["eos_token_id"] != 1.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}
	noHeadDim := TinyGLM()
	noHeadDim.HeadDim = 0
	if _, ok := noHeadDim.ConfigJSON()["head_dim"]; ok {
		t.Errorf("HeadDim 0 writes head_dim")
	}
}

// TestGLMRoundTrip: Load reads back exactly the float32 values Write drew
// (fill over lmckpt.NewRand(Seed) in the order of Tensors), nothing more,
// and a checkpoint of the other flavour fails on the first tensor it
// lacks.
func TestGLMRoundTrip(t *testing.T) {
	dirs := map[uint64]string{}
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		dir, m := loadGLM(t, c)
		dirs[c.Seed] = dir
		r := lmckpt.NewRand(c.Seed)
		ts := c.Tensors()
		if len(m.W) != len(ts) {
			t.Errorf("seed %d: %d tensors read, %d written", c.Seed, len(m.W), len(ts))
		}
		for _, tn := range ts {
			want := fill(r, tn)
			got := m.W[tn.Name]
			if len(got) != len(want) {
				t.Fatalf("%s: %d values, want %d", tn.Name, len(got), len(want))
			}
			for i := range want {
				if got[i] != float64(want[i]) {
					t.Fatalf("%s[%d] = %g, written %g", tn.Name, i, got[i], want[i])
				}
			}
		}
		if b := m.W["model.layers.1.mlp.gate.e_score_correction_bias"]; slices.Max(b)-slices.Min(b) < 0.1 {
			t.Errorf("seed %d: correction bias %v", c.Seed, b)
		}
	}
	if _, err := TinyGLMQKNorm().Load(dirs[50]); err == nil || !strings.Contains(err.Error(), "q_norm") {
		t.Errorf("loading a checkpoint without q_norm as use_qk_norm: %v", err)
	}
	if _, err := TinyGLM().Load(dirs[51]); err == nil || !strings.Contains(err.Error(), "q_proj.bias") {
		t.Errorf("loading a checkpoint without biases as attention_bias: %v", err)
	}
}

// TestGLMCausal runs checkCausal on both GLM flavours.
func TestGLMCausal(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		checkCausal(t, c.Seed, c.Vocab, m.Logits)
	}
}

// TestGLMShiftInvariance: the partial rotary is the only position signal
// and enters q·k through the distance alone, so starting at position 37
// leaves the logits unchanged to rounding.
func TestGLMShiftInvariance(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
	}
}

// TestGLMSwitchesMatter: the tiny checkpoints are sensitive to each
// feature the reference computes: rotating all of each head instead of
// half, dropping the attention biases (TinyGLM) or skipping q_norm and
// k_norm (TinyGLMQKNorm) each moves the logits.
func TestGLMSwitchesMatter(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		want := m.Logits(testTokens)
		check := func(what string, mm *GLMModel) {
			t.Helper()
			if d := maxAbsDiff(mm.Logits(testTokens), want); d < 1e-3 {
				t.Errorf("seed %d: %s moves the logits by %g only", c.Seed, what, d)
			}
		}
		full := *m
		full.C.PartialRotary = 1
		check("partial_rotary_factor 1", &full)
		if c.AttentionBias {
			nb := &GLMModel{C: c, W: maps.Clone(m.W)}
			nb.C.AttentionBias = false
			check("no attention bias", nb)
		}
		if c.QKNorm {
			nn := *m
			nn.C.QKNorm = false
			check("no q/k norm", &nn)
		}
	}
}

// TestGLMRoutingOnActivations: in the tiny GLM checkpoints the correction
// bias and (for TinyGLMQKNorm) the group limit each change the experts
// chosen for some of the real MoE inputs, and Experts is what Route
// chooses from the layer's router.
func TestGLMRoutingOnActivations(t *testing.T) {
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		_, m := loadGLM(t, c)
		checkRouting(t, c.router(), c.Seed, m.W, &m.moeInput, m.Experts, m.Logits)
	}
}

// ----------------------------------------------------------------------------
// MiniMaxM2ForCausalLM

// loadMiniMax writes c's checkpoint into a temporary directory and reads
// it back.
func loadMiniMax(t *testing.T, c MiniMax) (string, *MiniMaxModel) {
	t.Helper()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func miniMaxFlavours() []MiniMax { return []MiniMax{TinyMiniMax(), TinyMiniMaxWholeRotary()} }

// nearAll fails unless got and want agree to tol everywhere.
func nearAll(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// TestMiniMaxQKNormHandWorked: two heads of two dims, eps 0, on the input
// h = (1, 7). q_proj copies h0 into head 0 and h1 into head 1, so
// q = (1, 1, 7, 7); its RMS over the whole projection is
// sqrt((1+1+49+49)/4) = 5, and q_norm = (1, 2, 0.5, 1) gives
// (0.2, 0.4, 0.7, 1.4). Norming per head would give (1, 2, 0.5, 1)
// instead (each head's RMS is its own entry). k_proj the other way round:
// k = (7, 7, 1, 1) → (1.4, 1.4, 0.2, 0.2) · (0.5, 1, 1, 2). v is v_proj's
// output, not normed. At position 1 the rotary (dim 2, inverse frequency
// 1) turns each normed head by 1 rad; norming after the rotary gives
// something else, because the norm's weights differ within the pair.
func TestMiniMaxQKNormHandWorked(t *testing.T) {
	c := MiniMax{Hidden: 2, Heads: 2, KVHeads: 2, HeadDim: 2, RotaryDim: 2, Theta: 10000}
	p := "model.layers.0."
	m := &MiniMaxModel{C: c, W: map[string][]float64{
		p + "self_attn.q_proj.weight": {1, 0, 1, 0, 0, 1, 0, 1},
		p + "self_attn.k_proj.weight": {0, 1, 0, 1, 1, 0, 1, 0},
		p + "self_attn.v_proj.weight": {1, 2, 3, 4, 5, 6, 7, 8},
		p + "self_attn.q_norm.weight": {1, 2, 0.5, 1},
		p + "self_attn.k_norm.weight": {0.5, 1, 1, 2},
	}}
	h := []float64{1, 7}
	inv := c.RopeFreqs()
	if !slices.Equal(inv, []float64{1}) {
		t.Fatalf("inv_freq %v, want [1]", inv)
	}
	q, k, v := m.project(p, h, 0, inv)
	nearAll(t, "q", slices.Concat(q...), []float64{0.2, 0.4, 0.7, 1.4}, 1e-15)
	nearAll(t, "k", slices.Concat(k...), []float64{0.7, 1.4, 0.2, 0.4}, 1e-15)
	nearAll(t, "v", slices.Concat(v...), []float64{15, 31, 47, 63}, 0)

	m.perHeadNorm = true
	q, k, _ = m.project(p, h, 0, inv)
	nearAll(t, "per-head q (the mistake)", slices.Concat(q...), []float64{1, 2, 0.5, 1}, 1e-15)
	nearAll(t, "per-head k (the mistake)", slices.Concat(k...), []float64{0.5, 1, 1, 2}, 1e-15)
	m.perHeadNorm = false

	cs, sn := math.Cos(1), math.Sin(1)
	turn := func(a, b float64) []float64 { return []float64{a*cs - b*sn, b*cs + a*sn} }
	q, k, _ = m.project(p, h, 1, inv)
	nearAll(t, "q at position 1", slices.Concat(q...), slices.Concat(turn(0.2, 0.4), turn(0.7, 1.4)), 1e-15)
	nearAll(t, "k at position 1", slices.Concat(k...), slices.Concat(turn(0.7, 1.4), turn(0.2, 0.4)), 1e-15)
	// Rotating (1, 1) first keeps the RMS 5, then the weights (1, 2)
	// scale the turned pair: not what the model computes.
	after := turn(1, 1)
	after[0], after[1] = after[0]/5*1, after[1]/5*2
	if d := maxAbsDiff([][]float64{after}, [][]float64{q[0]}); d < 0.1 {
		t.Errorf("norming after the rotary moves query head 0 by %g only", d)
	}
}

// TestMiniMaxQKNormOnCheckpoint: in TinyMiniMax's layer 1 the query
// heads at position 0 (no rotation) are q_proj's 64 outputs RMS-normed
// together (eps 1e-6) and scaled by the 64 weights of q_norm, the key
// heads k_proj's 32 outputs with k_norm; norming each head on its own
// would differ. At position 5 dims 8…15 of every query and key head are
// exactly those of position 0 and dims 0…7 are not (TinyMiniMaxWholeRotary:
// all 16 turn).
func TestMiniMaxQKNormOnCheckpoint(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		p := "model.layers.1."
		h := lmckpt.RMSNorm64(m.W["model.embed_tokens.weight"][7*c.Hidden:8*c.Hidden], m.W[p+"input_layernorm.weight"], c.Eps)
		inv := c.RopeFreqs()
		q, k, _ := m.project(p, h, 0, inv)
		for _, tc := range []struct {
			name  string
			heads [][]float64
		}{{"q", q}, {"k", k}} {
			proj, norm := m.W[p+"self_attn."+tc.name+"_proj.weight"], m.W[p+"self_attn."+tc.name+"_norm.weight"]
			raw := make([]float64, len(norm))
			ss := 0.0
			for j := range raw {
				for i, v := range h {
					raw[j] += proj[j*c.Hidden+i] * v
				}
				ss += raw[j] * raw[j]
			}
			want := make([]float64, len(raw))
			for j := range want {
				want[j] = raw[j] / math.Sqrt(ss/float64(len(raw))+1e-6) * norm[j]
			}
			got := slices.Concat(tc.heads...)
			nearAll(t, fmt.Sprintf("seed %d: %s at position 0", c.Seed, tc.name), got, want, 1e-12)
			per := *m
			per.perHeadNorm = true
			pq, pk, _ := per.project(p, h, 0, inv)
			perHead := map[string][][]float64{"q": pq, "k": pk}[tc.name]
			if d := maxAbsDiff([][]float64{slices.Concat(perHead...)}, [][]float64{got}); d < 1e-3 {
				t.Errorf("seed %d: %s normed per head moves by %g only", c.Seed, tc.name, d)
			}
		}
		q5, k5, _ := m.project(p, h, 5, inv)
		for _, tc := range []struct {
			name     string
			at0, at5 [][]float64
		}{{"q", q, q5}, {"k", k, k5}} {
			for hd := range tc.at0 {
				if !slices.Equal(tc.at5[hd][c.RotaryDim:], tc.at0[hd][c.RotaryDim:]) {
					t.Errorf("seed %d: %s head %d: the rotary moves dims %d…", c.Seed, tc.name, hd, c.RotaryDim)
				}
				for j := range c.RotaryDim / 2 {
					a, b := tc.at0[hd][j], tc.at0[hd][j+c.RotaryDim/2]
					rot := complex(a, b) * complex(math.Cos(5*inv[j]), math.Sin(5*inv[j]))
					if math.Abs(tc.at5[hd][j]-real(rot)) > 1e-12 || math.Abs(tc.at5[hd][j+c.RotaryDim/2]-imag(rot)) > 1e-12 {
						t.Errorf("seed %d: %s head %d, pair %d: (%g, %g), want (%g, %g)", c.Seed, tc.name, hd, j,
							tc.at5[hd][j], tc.at5[hd][j+c.RotaryDim/2], real(rot), imag(rot))
					}
				}
			}
		}
	}
}

// TestMiniMaxRotaryHandWorked: TinyMiniMax turns the first 8 of 16 dims
// with inverse frequencies 1e4^(-2i/8) = 1, 0.1, 0.01, 0.001, pairing
// (j, j+4), and leaves dims 8…15 alone; TinyMiniMaxWholeRotary turns all
// 16 with 5e6^(-2i/16), pairing (j, j+8). q·k depends on the distance
// only. rotary_dim becomes partial_rotary_factor = rotary_dim/head_dim
// and the rotary takes int(head_dim·factor) dims, which Python's float
// rounding can put one below rotary_dim (44·(30/44) = 29.999…).
func TestMiniMaxRotaryHandWorked(t *testing.T) {
	v := []float64{0.3, -1.2, 0.7, 0.25, -0.5, 1.1, 0.9, -0.4, 2.5, -3, 0.125, 7, -0.75, 1.5, 4, -2}
	k := []float64{-0.6, 0.2, 0.4, 1.3, 0.8, -0.1, -0.7, 0.5, 1, 2, 3, 4, 5, 6, 7, 8}
	dot := func(a, b []float64) float64 {
		s := 0.0
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	const pos = 5
	for _, c := range miniMaxFlavours() {
		R := c.RotaryDim
		if c.RopeDim() != R {
			t.Fatalf("seed %d: rope dim %d, want %d", c.Seed, c.RopeDim(), R)
		}
		inv := c.RopeFreqs()
		if len(inv) != R/2 {
			t.Fatalf("seed %d: %d frequencies", c.Seed, len(inv))
		}
		for i := range inv {
			want := math.Pow(c.Theta, -2*float64(i)/float64(R))
			if math.Abs(inv[i]-want) > 1e-15 {
				t.Errorf("seed %d: inv_freq[%d] = %g, want %g", c.Seed, i, inv[i], want)
			}
		}
		if R == 8 && (math.Abs(inv[1]-0.1) > 1e-15 || math.Abs(inv[3]-0.001) > 1e-15) {
			t.Errorf("inv_freq %v, want 1, 0.1, 0.01, 0.001", inv)
		}
		got := c.rotate(v, pos, inv)
		if !slices.Equal(got[R:], v[R:]) {
			t.Errorf("seed %d: dims %d… %v, want %v", c.Seed, R, got[R:], v[R:])
		}
		for j := range R / 2 {
			rot := complex(v[j], v[j+R/2]) * complex(math.Cos(pos*inv[j]), math.Sin(pos*inv[j]))
			if math.Abs(got[j]-real(rot)) > 1e-14 || math.Abs(got[j+R/2]-imag(rot)) > 1e-14 {
				t.Errorf("seed %d: pair (%d, %d): (%g, %g), want (%g, %g)", c.Seed, j, j+R/2, got[j], got[j+R/2], real(rot), imag(rot))
			}
		}
		if !slices.Equal(c.rotate(v, 0, inv), v) {
			t.Errorf("seed %d: position 0 moves the head", c.Seed)
		}
		if d1, d2 := dot(c.rotate(v, 7, inv), c.rotate(k, 3, inv)), dot(c.rotate(v, 13, inv), c.rotate(k, 9, inv)); math.Abs(d1-d2) > 1e-12 {
			t.Errorf("seed %d: q·k at distance 4 is %g and %g", c.Seed, d1, d2)
		}
	}
	odd := TinyMiniMax()
	odd.HeadDim, odd.RotaryDim = 44, 30
	if odd.RopeDim() != 29 || odd.check() == nil {
		t.Errorf("head dim 44, rotary_dim 30: rope dim %d (want 29), check %v (want an error: odd)", odd.RopeDim(), odd.check())
	}
}

// TestMiniMaxRouteHandMade: MiniMaxM2TopKRouter on scores chosen by hand.
// The bias only chooses; the weights are the chosen unbiased scores over
// their sum, whatever TopK.
func TestMiniMaxRouteHandMade(t *testing.T) {
	check := func(what string, c MiniMax, scores, bias []float64, wantIDs []int, wantW []float64) {
		t.Helper()
		ids, w := c.Route(logit(scores), bias)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		nearAll(t, what, w, wantW, 1e-12)
	}
	c := MiniMax{Experts: 4, TopK: 2}
	s := []float64{0.9, 0.6, 0.85, 0.3}
	check("top 2", c, s, nil, []int{0, 2}, []float64{0.9 / 1.75, 0.85 / 1.75})
	check("top 2, biased", c, s, []float64{0, 0, 0, 0.7}, []int{3, 0}, []float64{0.3 / 1.2, 0.9 / 1.2})
	check("top 2, bias pushes down", c, s, []float64{-0.5, 0, 0, 0}, []int{2, 1}, []float64{0.85 / 1.45, 0.6 / 1.45})
	c.TopK = 3
	check("top 3", c, s, []float64{0, 0, 0, 0.7}, []int{3, 0, 2}, []float64{0.3 / 2.05, 0.9 / 2.05, 0.85 / 2.05})
}

// TestMiniMaxMoEBlockHandMade: MiniMaxM2SparseMoeBlock on a hand-built
// block of 4 experts of width 1: router logits (h0, h1, -h0, -h1);
// expert e computes (d_e·silu(g_e·h0)·(h0+h1), 0) (w1 = (g_e, 0) is the
// gate, w3 = (1, 1) the up projection, w2 = (d_e, 0)). On h = (0.8, 0.3)
// the scores are σ(0.8), σ(0.3), σ(-0.8), σ(-0.3); the block's
// correction bias (0, 0, 0, 0.5) lifts expert 3 to the top, and experts 3
// and 0 share weights σ(-0.3) : σ(0.8), renormalised. A bias stored under
// the gate (block_sparse_moe.gate.e_score_correction_bias, which the
// release does not have) would pick experts 1 and 2, and is not read.
func TestMiniMaxMoEBlockHandMade(t *testing.T) {
	c := MiniMax{Hidden: 2, Intermediate: 1, Layers: 1, Experts: 4, TopK: 2}
	p := "model.layers.0.block_sparse_moe."
	w := map[string][]float64{
		p + "gate.weight":                  {1, 0, 0, 1, -1, 0, 0, -1},
		p + "e_score_correction_bias":      {0, 0, 0, 0.5},
		p + "gate.e_score_correction_bias": {0, 2, 2, 0},
	}
	g, d := []float64{0.5, -1, 2, 1.5}, []float64{1, 2, 3, 4}
	for e := range 4 {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		w[q+"w1.weight"] = []float64{g[e], 0}
		w[q+"w3.weight"] = []float64{1, 1}
		w[q+"w2.weight"] = []float64{d[e], 0}
	}
	m := &MiniMaxModel{C: c, W: w}
	h := []float64{0.8, 0.3}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	s0, s3 := sig(0.8), sig(-0.3)
	w0, w3 := s0/(s0+s3), s3/(s0+s3)
	want := []float64{w3*d[3]*silu(g[3]*0.8)*1.1 + w0*d[0]*silu(g[0]*0.8)*1.1, 0}
	nearAll(t, "moe", m.moe(0, h), want, 1e-12)
	if ids := m.Experts(0, h); !slices.Equal(ids, []int{3, 0}) {
		t.Errorf("experts %v, want [3 0]", ids)
	}
}

// wantMiniMaxTensors is the tensor list of a MiniMax-M2 checkpoint as the
// Hub release names it, written out for TinyMiniMax's shapes.
func wantMiniMaxTensors(tied bool) map[string][]int {
	w := map[string][]int{
		"model.embed_tokens.weight": {96, 32},
		"model.norm.weight":         {32},
	}
	if !tied {
		w["lm_head.weight"] = []int{96, 32}
	}
	for l := 0; l < 2; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm.weight"] = []int{32}
		w[p+"post_attention_layernorm.weight"] = []int{32}
		w[p+"self_attn.q_proj.weight"] = []int{64, 32}
		w[p+"self_attn.k_proj.weight"] = []int{32, 32}
		w[p+"self_attn.v_proj.weight"] = []int{32, 32}
		w[p+"self_attn.o_proj.weight"] = []int{32, 64}
		w[p+"self_attn.q_norm.weight"] = []int{64}
		w[p+"self_attn.k_norm.weight"] = []int{32}
		w[p+"block_sparse_moe.gate.weight"] = []int{8, 32}
		w[p+"block_sparse_moe.e_score_correction_bias"] = []int{8}
		for e := 0; e < 8; e++ {
			q := fmt.Sprintf("%sblock_sparse_moe.experts.%d.", p, e)
			w[q+"w1.weight"] = []int{16, 32}
			w[q+"w3.weight"] = []int{16, 32}
			w[q+"w2.weight"] = []int{32, 16}
		}
	}
	return w
}

// TestMiniMaxCheckpoint: the written model.safetensors holds exactly the
// tensors of the MiniMax-M2 release (q_norm and k_norm as wide as the
// whole projections, the correction bias on the block, w1/w3/w2 experts,
// lm_head iff untied), in float32, and config.json holds exactly the
// keys of the brief with their values.
func TestMiniMaxCheckpoint(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantMiniMaxTensors(c.Tied)
		if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("seed %d: tensors:\n%s\nwant:\n%s", c.Seed, strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
				t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
			}
		}
		ck.Close()

		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		wantCfg := map[string]any{
			"model_type": "minimax_m2", "vocab_size": 96.0, "hidden_size": 32.0, "intermediate_size": 16.0,
			"num_hidden_layers": 2.0, "num_attention_heads": 4.0, "num_key_value_heads": 2.0, "head_dim": 16.0,
			"rotary_dim": float64(c.RotaryDim), "rope_theta": c.Theta, "rms_norm_eps": 1e-6,
			"max_position_embeddings": 256.0, "num_local_experts": 8.0, "num_experts_per_tok": float64(c.TopK),
			"scoring_func": "sigmoid", "use_routing_bias": true, "use_qk_norm": true, "qk_norm_type": "per_layer",
			"shared_intermediate_size": 0.0, "tie_word_embeddings": c.Tied, "hidden_act": "silu",
			"bos_token_id": 0.0, "eos_token_id": 1.0, "torch_dtype": "float32",
		}
		for key, want := range wantCfg {
			if v, ok := cfg[key]; !ok || v != want {
				t.Errorf("seed %d: config %s = %v (present %v), want %v", c.Seed, key, v, ok, want)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "MiniMaxM2ForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		for key := range cfg {
			if _, ok := wantCfg[key]; !ok && key != "architectures" {
				t.Errorf("seed %d: config has %s = %v", c.Seed, key, cfg[key])
			}
		}
		b, err = os.ReadFile(filepath.Join(dir, "generation_config.json"))
		var gen map[string]any
		if err == nil {
			err = json.Unmarshal(b, &gen)
		}
		if err != nil || gen["bos_token_id"] != 0.0 || gen["eos_token_id"] != 1.0 {
			t.Errorf("generation_config.json %s (%v)", b, err)
		}
	}
	bad := TinyMiniMax()
	bad.KVHeads = 3
	if err := bad.Write(t.TempDir()); err == nil {
		t.Errorf("4 query heads on 3 key/value heads written")
	}
}

// TestMiniMaxRoundTrip: Load reads back exactly the float32 values Write
// drew (fill over lmckpt.NewRand(Seed) in the order of Tensors), nothing
// more; the norms (q_norm and k_norm included) are not all 1 and the
// correction biases spread; an untied description fails on a tied
// checkpoint's missing lm_head, and a GLM-4.5 checkpoint on its missing
// q_norm.
func TestMiniMaxRoundTrip(t *testing.T) {
	dirs := map[uint64]string{}
	for _, c := range miniMaxFlavours() {
		dir, m := loadMiniMax(t, c)
		dirs[c.Seed] = dir
		r := lmckpt.NewRand(c.Seed)
		ts := c.Tensors()
		if len(m.W) != len(ts) {
			t.Errorf("seed %d: %d tensors read, %d written", c.Seed, len(m.W), len(ts))
		}
		for _, tn := range ts {
			want := fill(r, tn)
			got := m.W[tn.Name]
			if len(got) != len(want) {
				t.Fatalf("%s: %d values, want %d", tn.Name, len(got), len(want))
			}
			for i := range want {
				if got[i] != float64(want[i]) {
					t.Fatalf("%s[%d] = %g, written %g", tn.Name, i, got[i], want[i])
				}
			}
		}
		for _, name := range []string{"self_attn.q_norm.weight", "self_attn.k_norm.weight", "input_layernorm.weight", "block_sparse_moe.e_score_correction_bias"} {
			if b := m.W["model.layers.1."+name]; slices.Max(b)-slices.Min(b) < 0.1 {
				t.Errorf("seed %d: %s %v", c.Seed, name, b)
			}
		}
	}
	if _, err := TinyMiniMax().Load(dirs[61]); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("loading a tied checkpoint untied: %v", err)
	}
	glmDir := t.TempDir()
	if err := TinyGLM().Write(glmDir); err != nil {
		t.Fatal(err)
	}
	if _, err := TinyMiniMax().Load(glmDir); err == nil || !strings.Contains(err.Error(), "q_norm") {
		t.Errorf("loading a GLM-4.5 checkpoint: %v", err)
	}
}

// TestMiniMaxCausal runs checkCausal on both MiniMax flavours.
func TestMiniMaxCausal(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		checkCausal(t, c.Seed, c.Vocab, m.Logits)
	}
}

// TestMiniMaxShiftInvariance: the rotary is the only position signal and
// enters q·k through the distance alone, so starting at position 37
// leaves the logits unchanged to rounding.
func TestMiniMaxShiftInvariance(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
	}
}

// TestMiniMaxFirstPositionAttention: the first position attends to itself
// alone, so query head h outputs value head h/(Heads/KVHeads): rows
// (h/2)·16 … +16 of v_proj applied to the normed input.
func TestMiniMaxFirstPositionAttention(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		x := m.W["model.embed_tokens.weight"][5*c.Hidden : 6*c.Hidden]
		p := "model.layers.1."
		got := m.attention(p, [][]float64{x}, 0)[0]
		h := lmckpt.RMSNorm64(x, m.W[p+"input_layernorm.weight"], c.Eps)
		vp := m.W[p+"self_attn.v_proj.weight"]
		for hd := 0; hd < c.Heads; hd++ {
			for j := 0; j < 16; j++ {
				row := (hd/2)*16 + j
				want := 0.0
				for i, v := range h {
					want += vp[row*c.Hidden+i] * v
				}
				if g := got[hd*16+j]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g (value head %d's)", c.Seed, hd, j, g, want, hd/2)
				}
			}
		}
	}
}

// TestMiniMaxSecondPositionAttention: at position 1 query head h weighs
// the value heads of positions 0 and 1 of its KV head h/2 by the softmax
// of q·k/sqrt(16) (head_dim^-0.5), with the heads as project gives them.
func TestMiniMaxSecondPositionAttention(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		emb := m.W["model.embed_tokens.weight"]
		x := [][]float64{emb[5*c.Hidden : 6*c.Hidden], emb[9*c.Hidden : 10*c.Hidden]}
		p := "model.layers.0."
		got := m.attention(p, x, 0)[1]
		var q, k, v [2][][]float64
		for pos := range x {
			h := lmckpt.RMSNorm64(x[pos], m.W[p+"input_layernorm.weight"], c.Eps)
			q[pos], k[pos], v[pos] = m.project(p, h, pos, c.RopeFreqs())
		}
		for hd := 0; hd < c.Heads; hd++ {
			var s [2]float64
			for pos := range s {
				for i := range 16 {
					s[pos] += q[1][hd][i] * k[pos][hd/2][i] / 4
				}
			}
			p0 := 1 / (1 + math.Exp(s[1]-s[0]))
			for i := range 16 {
				want := p0*v[0][hd/2][i] + (1-p0)*v[1][hd/2][i]
				if g := got[hd*16+i]; math.Abs(g-want) > 1e-12 {
					t.Fatalf("seed %d, head %d, dim %d: %g, want %g", c.Seed, hd, i, g, want)
				}
			}
		}
	}
}

// TestMiniMaxSwitchesMatter: the tiny checkpoints are sensitive to each
// feature the reference computes: norming q and k per head instead of
// over the whole projection, rotating the whole head (TinyMiniMax) or
// half of it (TinyMiniMaxWholeRotary), and dropping the correction bias
// each move the logits.
func TestMiniMaxSwitchesMatter(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		want := m.Logits(testTokens)
		check := func(what string, mm *MiniMaxModel) {
			t.Helper()
			if d := maxAbsDiff(mm.Logits(testTokens), want); d < 1e-3 {
				t.Errorf("seed %d: %s moves the logits by %g only", c.Seed, what, d)
			}
		}
		per := *m
		per.perHeadNorm = true
		check("per-head q/k norm", &per)
		rot := *m
		if c.RotaryDim == c.HeadDim {
			rot.C.RotaryDim = c.HeadDim / 2
			check("half-head rotary", &rot)
		} else {
			rot.C.RotaryDim = c.HeadDim
			check("whole-head rotary", &rot)
		}
		nb := &MiniMaxModel{C: c, W: maps.Clone(m.W)}
		for l := 0; l < c.Layers; l++ {
			nb.W[fmt.Sprintf("model.layers.%d.block_sparse_moe.e_score_correction_bias", l)] = make([]float64, c.Experts)
		}
		check("no correction bias", nb)
	}
}

// TestMiniMaxRoutingOnActivations: every layer is sparse; Experts is what
// Route chooses (TopK experts) from the layer's block_sparse_moe.gate
// and the block's correction bias, and in the tiny checkpoints the bias
// changes the experts chosen for some of the real MoE inputs.
func TestMiniMaxRoutingOnActivations(t *testing.T) {
	for _, c := range miniMaxFlavours() {
		_, m := loadMiniMax(t, c)
		var n, byBias int
		m.moeInput = func(l int, h []float64) {
			n++
			p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
			logits := make([]float64, c.Experts)
			for e := range logits {
				for i, v := range h {
					logits[e] += m.W[p+"gate.weight"][e*c.Hidden+i] * v
				}
			}
			bias := m.W[p+"e_score_correction_bias"]
			ids, _ := c.Route(logits, bias)
			if got := m.Experts(l, h); !slices.Equal(got, ids) || len(got) != c.TopK {
				t.Fatalf("seed %d: Experts %v, Route %v, top %d", c.Seed, got, ids, c.TopK)
			}
			set := func(v []int) []int { v = slices.Clone(v); slices.Sort(v); return v }
			if unbiased, _ := c.Route(logits, nil); !slices.Equal(set(unbiased), set(ids)) {
				byBias++
			}
		}
		m.Logits(testTokens)
		if want := len(testTokens) * c.Layers; n != want {
			t.Errorf("%d MoE inputs, want %d", n, want)
		}
		if byBias == 0 {
			t.Errorf("seed %d: the correction bias changes no token's experts", c.Seed)
		}
		t.Logf("seed %d: of %d MoE inputs, the bias changes %d choices", c.Seed, n, byBias)
	}
}

// checkCausal: the logits of a prefix are exactly the first rows of the
// whole sequence's, other tokens after position 5 leave rows 0…5 exactly
// as they were (and change the later ones), and every row is finite,
// O(1) and not constant.
func checkCausal(t *testing.T, seed uint64, vocab int, logits func(tokens []int) [][]float64) {
	t.Helper()
	all := logits(testTokens)
	for _, n := range []int{1, 5, 9} {
		prefix := logits(testTokens[:n])
		for i := range prefix {
			if !slices.Equal(prefix[i], all[i]) {
				t.Errorf("seed %d: prefix of %d, position %d: logits differ by %g", seed, n, i, maxAbsDiff(prefix[i:i+1], all[i:i+1]))
			}
		}
	}
	other := slices.Clone(testTokens)
	for i := 6; i < len(other); i++ {
		other[i] = (other[i] + 31) % vocab
	}
	changed := logits(other)
	for i := range changed {
		same := slices.Equal(changed[i], all[i])
		if i <= 5 && !same {
			t.Errorf("seed %d: a later token changes position %d's logits", seed, i)
		}
		if i > 5 && same {
			t.Errorf("seed %d: another token at position %d leaves its logits alone", seed, i)
		}
	}
	for i, row := range all {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("seed %d, position %d: logit %g", seed, i, v)
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if hi-lo < 0.1 || hi-lo > 100 {
			t.Errorf("seed %d, position %d: logits span [%g, %g]", seed, i, lo, hi)
		}
	}
}

// checkRouting: on the real MoE inputs of a model routing as c (whose
// moeInput hook is hook, weights w), the correction bias and (where the
// groups are limited) the group limit each change the experts chosen for
// some of them, and experts is what c's Route chooses from the layer's
// router.
func checkRouting(t *testing.T, c DeepSeek, seed uint64, w map[string][]float64, hook *func(int, []float64),
	experts func(int, []float64) []int, logits func([]int) [][]float64) {
	t.Helper()
	flat := c
	flat.Groups, flat.TopKGroup = 1, 1
	var n, byBias, byGroups int
	*hook = func(l int, h []float64) {
		n++
		p := fmt.Sprintf("model.layers.%d.mlp.gate.", l)
		logits := make([]float64, c.Experts)
		for e := range logits {
			for i, v := range h {
				logits[e] += w[p+"weight"][e*c.Hidden+i] * v
			}
		}
		bias := w[p+"e_score_correction_bias"]
		ids, _ := c.Route(logits, bias)
		if got := experts(l, h); !slices.Equal(got, ids) {
			t.Fatalf("Experts %v, Route %v", got, ids)
		}
		set := func(v []int) []int { v = slices.Clone(v); slices.Sort(v); return v }
		if unbiased, _ := c.Route(logits, nil); !slices.Equal(set(unbiased), set(ids)) {
			byBias++
		}
		if plain, _ := flat.Route(logits, bias); !slices.Equal(set(plain), set(ids)) {
			byGroups++
		}
	}
	logits(testTokens)
	if want := len(testTokens) * (c.Layers - c.FirstDense); n != want {
		t.Errorf("%d MoE inputs, want %d", n, want)
	}
	if byBias == 0 {
		t.Errorf("seed %d: the correction bias changes no token's experts", seed)
	}
	if c.TopKGroup < c.Groups && byGroups == 0 {
		t.Errorf("seed %d: the group limit changes no token's experts", seed)
	}
	t.Logf("seed %d: of %d MoE inputs, the bias changes %d choices, the group limit %d", seed, n, byBias, byGroups)
}

// ----------------------------------------------------------------------------
// Multi-token prediction (DeepSeek-V3 and GLM-4.5)

// wantMTP adds the multi-token-prediction head's own tensors of layer 3
// (the tiny models' N) to w; its decoder layer is listed with the others.
func wantMTP(w map[string][]int) {
	p := "model.layers.3."
	w[p+"enorm.weight"] = []int{32}
	w[p+"hnorm.weight"] = []int{32}
	w[p+"eh_proj.weight"] = []int{32, 64}
	w[p+"shared_head.norm.weight"] = []int{32}
	w[p+"shared_head.head.weight"] = []int{96, 32}
	w[p+"embed_tokens.weight"] = []int{96, 32}
}

// mtpRef is what the MTP tests call on either architecture.
type mtpRef interface {
	Logits(tokens []int) [][]float64
	Final(tokens []int) [][]float64
	MTPLogits(tokens []int) [][]float64
	MTPLogitsFrom(tokens []int, from int) [][]float64
	MTPDraft(tokens []int, k int) []int
	stack() stack
}

// mtpFlavour is one tiny model with its head: a DeepSeek (glm nil) or a
// GLM.
type mtpFlavour struct {
	name string
	ds   DeepSeek
	glm  *GLM
}

// mtpFlavours are TinyDeepSeek (q LoRA, interleaved rotary),
// TinyDeepSeekLite (q_proj, YaRN) untied and tied, TinyGLM (biases) and
// TinyGLMQKNorm (q/k norms, tied), each with MTP.
func mtpFlavours() []mtpFlavour {
	tied := TinyDeepSeekLite()
	tied.Tied = true
	var out []mtpFlavour
	for _, c := range []DeepSeek{TinyDeepSeek(), TinyDeepSeekLite(), tied} {
		c.MTP = true
		out = append(out, mtpFlavour{name: fmt.Sprintf("deepseek seed %d tied %v", c.Seed, c.Tied), ds: c})
	}
	for _, c := range []GLM{TinyGLM(), TinyGLMQKNorm()} {
		g := c
		g.MTP = true
		out = append(out, mtpFlavour{name: fmt.Sprintf("glm seed %d tied %v", g.Seed, g.Tied), glm: &g})
	}
	return out
}

func (f mtpFlavour) tied() bool {
	if f.glm != nil {
		return f.glm.Tied
	}
	return f.ds.Tied
}

// tensors is Tensors with MTP.
func (f mtpFlavour) tensors() []Tensor {
	if f.glm != nil {
		return f.glm.Tensors()
	}
	return f.ds.Tensors()
}

// want is the tensor list written out, with the head or without.
func (f mtpFlavour) want(mtp bool) map[string][]int {
	if f.glm != nil {
		return wantGLMTensors(f.glm.AttentionBias, f.glm.QKNorm, f.glm.Tied, mtp)
	}
	return wantTensors(f.ds.QLoraRank > 0, f.ds.Tied, mtp)
}

// write writes the checkpoint, with the head or without.
func (f mtpFlavour) write(t *testing.T, mtp bool) string {
	t.Helper()
	dir := t.TempDir()
	var err error
	if f.glm != nil {
		c := *f.glm
		c.MTP = mtp
		err = c.Write(dir)
	} else {
		c := f.ds
		c.MTP = mtp
		err = c.Write(dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// load reads dir's checkpoint with the head or without.
func (f mtpFlavour) load(dir string, mtp bool) (mtpRef, map[string][]float64, error) {
	if f.glm != nil {
		c := *f.glm
		c.MTP = mtp
		m, err := c.Load(dir)
		if err != nil {
			return nil, nil, err
		}
		return m, m.W, nil
	}
	c := f.ds
	c.MTP = mtp
	m, err := c.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	return m, m.W, nil
}

// model writes and loads the checkpoint with the head.
func (f mtpFlavour) model(t *testing.T) (mtpRef, map[string][]float64) {
	t.Helper()
	m, w, err := f.load(f.write(t, true), true)
	if err != nil {
		t.Fatal(err)
	}
	return m, w
}

// with is the model with the head over the weights w.
func (f mtpFlavour) with(w map[string][]float64) mtpRef {
	if f.glm != nil {
		return &GLMModel{C: *f.glm, W: w}
	}
	return &Model{C: f.ds, W: w}
}

// perturbed returns a copy of w whose tensor name is moved by 0.5·sin.
func perturbed(w map[string][]float64, name string) map[string][]float64 {
	out := maps.Clone(w)
	v := slices.Clone(w[name])
	for i := range v {
		v[i] += 0.5 * math.Sin(float64(i)+1)
	}
	out[name] = v
	return out
}

// TestMTPCheckpoint: with MTP the checkpoint holds the brief's tensors
// plus the head's layer 3 (its decoder layer sparse, enorm, hnorm,
// eh_proj [H, 2H], shared_head.norm and the copies), in float32; the
// copies hold exactly the embedding's and lm_head's (the embedding's when
// tied) values; every other tensor keeps the value it has without the
// head; Load reads back what draw drew; config.json says
// num_nextn_predict_layers 1 (0 without); and a checkpoint without the
// head does not load as one with it.
func TestMTPCheckpoint(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			plainDir, dir := f.write(t, false), f.write(t, true)
			ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			want := f.want(true)
			if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
				t.Errorf("tensors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(names, "\n"))
			}
			for name, shape := range want {
				info, ok := ck.Info(name)
				if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
					t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
				}
			}
			ck.Close()
			// The head's decoder layer is laid out as the last sparse one.
			n := 0
			for name, shape := range want {
				if rest, ok := strings.CutPrefix(name, "model.layers.2."); ok {
					n++
					if !slices.Equal(want["model.layers.3."+rest], shape) {
						t.Errorf("the head's layer has no %s %v", rest, shape)
					}
				}
			}
			if got := countPrefix(want, "model.layers.3."); got != n+6 {
				t.Errorf("the head's layer has %d tensors, want %d and its 6", got, n)
			}

			for d, layers := range map[string]float64{plainDir: 0, dir: 1} {
				var cfg map[string]any
				b, err := os.ReadFile(filepath.Join(d, "config.json"))
				if err == nil {
					err = json.Unmarshal(b, &cfg)
				}
				if err != nil {
					t.Fatal(err)
				}
				if cfg["num_nextn_predict_layers"] != layers {
					t.Errorf("num_nextn_predict_layers %v, want %v", cfg["num_nextn_predict_layers"], layers)
				}
			}

			_, plain, err := f.load(plainDir, false)
			if err != nil {
				t.Fatal(err)
			}
			_, w, err := f.load(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			p := "model.layers.3."
			if !slices.Equal(w[p+"embed_tokens.weight"], w["model.embed_tokens.weight"]) {
				t.Error("the head's embed_tokens is not the embedding")
			}
			head := "lm_head.weight"
			if f.tied() {
				head = "model.embed_tokens.weight"
			}
			if !slices.Equal(w[p+"shared_head.head.weight"], w[head]) {
				t.Errorf("shared_head.head is not %s", head)
			}
			for n, v := range plain {
				if !slices.Equal(w[n], v) {
					t.Errorf("%s differs with the head", n)
				}
			}
			// The values are draw's over Tensors, from the seed.
			seed := f.ds.Seed
			if f.glm != nil {
				seed = f.glm.Seed
			}
			r, drawn := lmckpt.NewRand(seed), map[string][]float32{}
			ts := f.tensors()
			if len(w) != len(ts) {
				t.Errorf("%d tensors read, %d written", len(w), len(ts))
			}
			for _, tn := range ts {
				v := draw(r, tn, drawn)
				for i := range v {
					if w[tn.Name][i] != float64(v[i]) {
						t.Fatalf("%s[%d] = %g, drawn %g", tn.Name, i, w[tn.Name][i], v[i])
					}
				}
			}
			if _, _, err := f.load(plainDir, true); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("loading a checkpoint without the head as one with it: %v", err)
			}
		})
	}
	dense := TinyDeepSeek()
	dense.MTP, dense.FirstDense = true, 4
	if err := dense.Write(t.TempDir()); err == nil {
		t.Error("a head whose layer would be dense is written")
	}
}

// countPrefix counts the names in w that begin with prefix.
func countPrefix(w map[string][]int, prefix string) int {
	n := 0
	for name := range w {
		if strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

// TestMTPCausal: MTPLogits has a row of Vocab finite, O(1), non-constant
// logits for each MTP position 0..T-2; a prefix of the text gives its
// leading rows exactly; row i depends only on tokens ≤ i+1 (other tokens
// from 6 on leave rows 0..4 exactly as they were and change rows 5..);
// and, the embedding at position 0 being masked, another token 1 leaves
// row 0 exactly as it was (and changes row 1), while another token 0
// changes row 0 through the model's hidden state.
func TestMTPCausal(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, _ := f.model(t)
			tokens := testTokens
			T := len(tokens)
			all := m.MTPLogits(tokens)
			if len(all) != T-1 {
				t.Fatalf("%d rows, want %d", len(all), T-1)
			}
			for i, row := range all {
				if len(row) != 96 {
					t.Fatalf("row %d has %d logits", i, len(row))
				}
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, v := range row {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("row %d: logit %g", i, v)
					}
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
				if hi-lo < 0.1 || hi-lo > 100 {
					t.Errorf("row %d: logits span [%g, %g]", i, lo, hi)
				}
			}
			for _, n := range []int{2, 5, 9} {
				prefix := m.MTPLogits(tokens[:n])
				if len(prefix) != n-1 {
					t.Fatalf("prefix of %d: %d rows", n, len(prefix))
				}
				for i := range prefix {
					if !slices.Equal(prefix[i], all[i]) {
						t.Errorf("prefix of %d, row %d differs by %g", n, i, maxAbsDiff(prefix[i:i+1], all[i:i+1]))
					}
				}
			}
			changed := func(at ...int) [][]float64 {
				other := slices.Clone(tokens)
				for _, i := range at {
					other[i] = (other[i] + 31) % 96
				}
				return m.MTPLogits(other)
			}
			later := changed(6, 7, 8, 9, 10, 11)
			for i := range later {
				if same := slices.Equal(later[i], all[i]); same != (i <= 4) {
					t.Errorf("other tokens from 6 on: row %d unchanged %v", i, same)
				}
			}
			one := changed(1)
			if !slices.Equal(one[0], all[0]) {
				t.Errorf("another token 1 moves row 0 by %g: its embedding is not masked", maxAbsDiff(one[:1], all[:1]))
			}
			if maxAbsDiff(one[1:2], all[1:2]) < 1e-6 {
				t.Error("another token 1 leaves row 1 alone")
			}
			if maxAbsDiff(changed(0)[:1], all[:1]) < 1e-6 {
				t.Error("another token 0 leaves row 0 alone: the head does not read the hidden state")
			}
		})
	}
}

// TestMTPLogitsFrom: MTPLogitsFrom(tokens, 0) is MTPLogits; from 4 on it
// has rows for positions 4..T-2, causal, the last differing from
// MTPLogits' (the head's attention begins at 4); and its first row, at
// position 4 and so not masked, reads token 5's embedding.
func TestMTPLogitsFrom(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, _ := f.model(t)
			tokens := testTokens
			T := len(tokens)
			all := m.MTPLogits(tokens)
			if d := maxAbsDiff(m.MTPLogitsFrom(tokens, 0), all); d != 0 {
				t.Errorf("MTPLogitsFrom(0) differs from MTPLogits by %g", d)
			}
			from := m.MTPLogitsFrom(tokens, 4)
			if len(from) != T-1-4 {
				t.Fatalf("MTPLogitsFrom(4): %d rows, want %d", len(from), T-5)
			}
			if d := maxAbsDiff(from[len(from)-1:], all[T-2:]); d < 1e-6 {
				t.Errorf("the head begun at 4 matches the whole head's last row (%g)", d)
			}
			if prefix := m.MTPLogitsFrom(tokens[:9], 4); maxAbsDiff(prefix, from[:4]) != 0 {
				t.Error("MTPLogitsFrom(4) of a prefix differs from the leading rows")
			}
			other := slices.Clone(tokens)
			other[5] = (other[5] + 31) % 96
			if d := maxAbsDiff(m.MTPLogitsFrom(other, 4)[:1], from[:1]); d < 1e-6 {
				t.Errorf("another token 5 moves position 4's row by %g only: masked away from position 0", d)
			}
		})
	}
}

// TestMTPDraft: MTPDraft's first draft is the argmax of MTPLogits' last
// row and MTPDraft(k=1) is its first; the second step is the head rerun
// with the first draft at position T-1 and, as its hidden state, the
// head's own output at T-2 before shared_head.norm, built here by hand
// (the logits exactly, the draft its argmax); the normed output would
// give other logits, so the check tells them apart.
func TestMTPDraft(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, w := f.model(t)
			tokens := testTokens
			T := len(tokens)
			drafts := m.MTPDraft(tokens, 3)
			if len(drafts) != 3 {
				t.Fatalf("%d drafts, want 3", len(drafts))
			}
			all := m.MTPLogits(tokens)
			if want := argmax(all[T-2]); drafts[0] != want {
				t.Errorf("first draft %d, want argmax of the last MTP row %d", drafts[0], want)
			}
			if one := m.MTPDraft(tokens, 1); !slices.Equal(one, drafts[:1]) {
				t.Errorf("MTPDraft(k=1) = %v, want %v", one, drafts[:1])
			}
			for _, d := range drafts {
				if d < 0 || d >= 96 {
					t.Errorf("draft %d out of the vocabulary", d)
				}
			}

			s := m.stack()
			ids := slices.Clone(tokens[1:])
			hidden := m.Final(tokens)[:T-1]
			out := s.mtp(ids, hidden, 0)
			// MTPLogits' last row is the model's head on shared_head.norm
			// of the head's last output, worked out here.
			head := "lm_head.weight"
			if f.tied() {
				head = "model.embed_tokens.weight"
			}
			byHand := handLinear(handNorm(out[T-2], w["model.layers.3.shared_head.norm.weight"], s.eps), w[head])
			if d := maxAbsDiff([][]float64{byHand}, all[T-2:]); d > 1e-12 {
				t.Fatalf("MTPLogits' last row is %g off %s(shared_head.norm(output))", d, head)
			}
			step := func(h []float64) []float64 {
				x := s.mtp(append(slices.Clone(ids), drafts[0]), append(slices.Clone(hidden), h), 0)
				return s.mtpHead(x[T-1])
			}
			want := step(out[T-2])
			got := s.mtpDraft(tokens, 2)
			if d := maxAbsDiff(got[1:], [][]float64{want}); d != 0 {
				t.Errorf("second step's logits differ by %g from the head chained on its pre-norm output", d)
			}
			if drafts[1] != argmax(want) {
				t.Errorf("second draft %d, want %d", drafts[1], argmax(want))
			}
			normed := step(lmckpt.RMSNorm64(out[T-2], w["model.layers.3.shared_head.norm.weight"], s.eps))
			if d := maxAbsDiff([][]float64{normed}, [][]float64{want}); d < 1e-6 {
				t.Errorf("chaining the normed output moves the second step by %g only", d)
			}
		})
	}
}

// handNorm is RMSNorm worked out: x / sqrt(mean x² + eps) · g.
func handNorm(x, g []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = v / math.Sqrt(ss/float64(len(x))+eps) * g[j]
	}
	return out
}

// handLinear is w·x for a row-major w [len(w)/len(x), len(x)].
func handLinear(x, w []float64) []float64 {
	out := make([]float64, len(w)/len(x))
	for r := range out {
		for j, v := range x {
			out[r] += w[r*len(x)+j] * v
		}
	}
	return out
}

// TestMTPFinal: Final is the hidden state after model.norm, the one the
// head reads: divided by model.norm's weight it has a mean square of 1
// (less eps's share), and the model's head on it, worked out here, gives
// Logits.
func TestMTPFinal(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, w := f.model(t)
			head := "lm_head.weight"
			if f.tied() {
				head = "model.embed_tokens.weight"
			}
			final, logits := m.Final(testTokens), m.Logits(testTokens)
			g := w["model.norm.weight"]
			for i := range final {
				ms := 0.0
				for j, v := range final[i] {
					ms += (v / g[j]) * (v / g[j]) / float64(len(g))
				}
				if math.Abs(ms-1) > 1e-3 {
					t.Errorf("position %d: Final/model.norm has mean square %g, not 1", i, ms)
				}
				if d := maxAbsDiff([][]float64{handLinear(final[i], w[head])}, logits[i:i+1]); d > 1e-12 {
					t.Errorf("position %d: %s·Final is %g off Logits", i, head, d)
				}
			}
		})
	}
}

// TestMTPReadsHiddenAndEmbedding: on the model's real hidden states,
// zeroing hnorm's input (the hidden state) changes every row of the
// head's logits; another token at MTP position 3 changes rows 3.. and
// leaves rows 0..2; another token at position 0 changes nothing (its
// embedding is masked).
func TestMTPReadsHiddenAndEmbedding(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, _ := f.model(t)
			s := m.stack()
			tokens := testTokens
			T := len(tokens)
			ids, hidden := slices.Clone(tokens[1:]), m.Final(tokens)[:T-1]
			logits := func(ids []int, hidden [][]float64) [][]float64 {
				out := s.mtp(ids, hidden, 0)
				for i := range out {
					out[i] = s.mtpHead(out[i])
				}
				return out
			}
			base := logits(ids, hidden)
			zero := make([][]float64, len(hidden))
			for i := range zero {
				zero[i] = make([]float64, len(hidden[i]))
			}
			z := logits(ids, zero)
			for i := range z {
				if d := maxAbsDiff(z[i:i+1], base[i:i+1]); d < 1e-3 {
					t.Errorf("zero hidden states move row %d by %g only", i, d)
				}
			}
			other := slices.Clone(ids)
			other[3] = (other[3] + 31) % 96
			o := logits(other, hidden)
			for i := range o {
				if same := slices.Equal(o[i], base[i]); same != (i < 3) {
					t.Errorf("another token at position 3: row %d unchanged %v", i, same)
				}
			}
			other = slices.Clone(ids)
			other[0] = (other[0] + 31) % 96
			if d := maxAbsDiff(logits(other, hidden), base); d != 0 {
				t.Errorf("another token at position 0 moves the logits by %g: not masked", d)
			}
		})
	}
}

// TestMTPInputHandWorked: with eh_proj = [I | 0] the head's input at MTP
// position i is enorm's RMSNorm of token ids[i]'s embedding, worked out
// here (x / sqrt(mean x² + eps) · enorm), and 0 at position 0; with
// eh_proj = [0 | I] it is hnorm's RMSNorm of the hidden state: the
// embedding comes first in the concatenation, enorm norms it and hnorm
// the hidden state.
func TestMTPInputHandWorked(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			m, w := f.model(t)
			const H = 32
			eps := m.stack().eps
			tokens := testTokens
			T := len(tokens)
			ids, hidden := tokens[1:], m.Final(tokens)[:T-1]
			norm := func(x, g []float64) []float64 { return handNorm(x, g, eps) }
			p := "model.layers.3."
			for _, half := range []int{0, 1} {
				proj := make([]float64, H*2*H)
				for r := 0; r < H; r++ {
					proj[r*2*H+half*H+r] = 1
				}
				ww := maps.Clone(w)
				ww[p+"eh_proj.weight"] = proj
				got := f.with(ww).stack().mtpInput(ids, hidden, 0)
				for i := range got {
					var want []float64
					if half == 0 {
						e := w["model.embed_tokens.weight"][ids[i]*H : (ids[i]+1)*H]
						want = norm(e, w[p+"enorm.weight"])
						if i == 0 {
							want = make([]float64, H)
						}
					} else {
						want = norm(hidden[i], w[p+"hnorm.weight"])
					}
					if d := maxAbsDiff([][]float64{got[i]}, [][]float64{want}); d > 1e-12 {
						t.Errorf("eh_proj half %d, position %d: off by %g", half, i, d)
					}
				}
			}
		})
	}
}

// TestMTPReadsModelHeadAndEmbedding: the head reads the model's own
// embedding and head, as vLLM's proposer shares them in: moving lm_head
// moves every row of MTPLogits, moving shared_head.head or the layer's
// embed_tokens copy moves nothing, and moving the embedding of the
// text's last token (33, nowhere else in it) moves the last row (its
// MTP embedding) and, beyond that token's own logit when tied, no other.
func TestMTPReadsModelHeadAndEmbedding(t *testing.T) {
	for _, f := range mtpFlavours() {
		t.Run(f.name, func(t *testing.T) {
			_, w := f.model(t)
			tokens := testTokens
			T := len(tokens)
			base := f.with(w).MTPLogits(tokens)
			p := "model.layers.3."
			for _, name := range []string{p + "shared_head.head.weight", p + "embed_tokens.weight"} {
				if d := maxAbsDiff(f.with(perturbed(w, name)).MTPLogits(tokens), base); d != 0 {
					t.Errorf("moving %s moves the logits by %g: the head reads the copy", name, d)
				}
			}
			if !f.tied() {
				got := f.with(perturbed(w, "lm_head.weight")).MTPLogits(tokens)
				for i := range got {
					if d := maxAbsDiff(got[i:i+1], base[i:i+1]); d < 1e-3 {
						t.Errorf("moving lm_head moves row %d by %g only", i, d)
					}
				}
			}
			last := tokens[T-1]
			if slices.Contains(tokens[:T-1], last) {
				t.Fatal("the last token occurs earlier")
			}
			ww := maps.Clone(w)
			e := slices.Clone(w["model.embed_tokens.weight"])
			for j := last * 32; j < (last+1)*32; j++ {
				e[j] += 0.5 * math.Sin(float64(j))
			}
			ww["model.embed_tokens.weight"] = e
			got := f.with(ww).MTPLogits(tokens)
			drop := func(rows [][]float64) [][]float64 {
				out := make([][]float64, len(rows))
				for i, r := range rows {
					out[i] = slices.Delete(slices.Clone(r), last, last+1)
				}
				return out
			}
			if d := maxAbsDiff(drop(got[:T-2]), drop(base[:T-2])); d != 0 {
				t.Errorf("moving token %d's embedding moves the earlier rows by %g", last, d)
			}
			if d := maxAbsDiff(drop(got[T-2:]), drop(base[T-2:])); d < 1e-3 {
				t.Errorf("moving token %d's embedding moves the last row by %g only", last, d)
			}
		})
	}
}

// ----------------------------------------------------------------------------
// DeepseekV2ForCausalLM

// v2Flavours are the tiny DeepSeek-V2 descriptions.
func v2Flavours() []DeepSeek { return []DeepSeek{TinyDeepSeekV2(), TinyDeepSeekV2Greedy()} }

// TestRouteV2HandMade: DeepseekV2Moe.route_tokens_to_experts on softmax
// scores chosen by hand (logits ln s + 3: the shift leaves the softmax
// alone). Groups {0,1} {2,3} {4,5} {6,7} hold (0.30, 0.01) (0.14, 0.13)
// (0.20, 0.02) (0.10, 0.10); 3 experts are taken from the 2 best groups.
//
//   - unrestricted ("greedy"): 0, 4, 2;
//   - groups scored by their best expert (0.30, 0.14, 0.20, 0.10): groups
//     0 and 2 stay open and the third expert is 5 (0.02), not 2;
//   - DeepSeek-V3's rule on the same scores (sum of the two best: 0.31,
//     0.27, 0.22, 0.20) would open groups 0 and 1 and take 0, 2, 3.
//
// The weights are the scores times routed_scaling_factor 1.5 with no
// renormalisation (they sum to 0.96 or 0.78, not 1.5), norm_topk_prob
// or not.
func TestRouteV2HandMade(t *testing.T) {
	check := func(what string, ids []int, w []float64, wantIDs []int, wantW []float64) {
		t.Helper()
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: experts %v, want %v", what, ids, wantIDs)
			return
		}
		for j := range w {
			if math.Abs(w[j]-wantW[j]) > 1e-12 {
				t.Errorf("%s: weights %v, want %v", what, w, wantW)
				return
			}
		}
	}
	s := []float64{0.30, 0.01, 0.14, 0.13, 0.20, 0.02, 0.10, 0.10}
	logits := make([]float64, len(s))
	for i, v := range s {
		logits[i] = math.Log(v) + 3
	}
	grouped := DeepSeek{V2: true, TopKMethod: "group_limited_greedy", Experts: 8, TopK: 3, Groups: 4, TopKGroup: 2, RoutedScale: 1.5}
	greedy := grouped
	greedy.TopKMethod = "greedy"
	ids, w := grouped.Route(logits, nil)
	check("group_limited_greedy", ids, w, []int{0, 4, 5}, []float64{0.30 * 1.5, 0.20 * 1.5, 0.02 * 1.5})
	ids, w = greedy.Route(logits, nil)
	check("greedy", ids, w, []int{0, 4, 2}, []float64{0.30 * 1.5, 0.20 * 1.5, 0.14 * 1.5})
	// norm_topk_prob changes nothing in V2.
	normed := grouped
	normed.NormTopK = true
	ids, w = normed.Route(logits, nil)
	check("norm_topk_prob ignored", ids, w, []int{0, 4, 5}, []float64{0.30 * 1.5, 0.20 * 1.5, 0.02 * 1.5})
	// RouteV2 routes as V2 whatever V2 says; Route without V2 is V3's.
	v3 := grouped
	v3.V2 = false
	ids, w = v3.RouteV2(logits)
	check("RouteV2 without V2", ids, w, []int{0, 4, 5}, []float64{0.30 * 1.5, 0.20 * 1.5, 0.02 * 1.5})
	ids, w = v3.Route(logit(s), nil)
	check("V3's sum of two on the same scores", ids, w, []int{0, 2, 3}, []float64{0.30 * 1.5, 0.14 * 1.5, 0.13 * 1.5})
	// Top 2 from one of 2 groups of 4, (0.30, 0.01, 0.02, 0.03) and
	// (0.20, 0.19, 0.15, 0.10): the group-max rule opens group 0 (0.30
	// against 0.20) and takes 0 and 3; V3's sum of two opens group 1
	// (0.39 against 0.33) and takes 4 and 5; greedy takes 0 and 4.
	s2 := []float64{0.30, 0.01, 0.02, 0.03, 0.20, 0.19, 0.15, 0.10}
	logits2 := make([]float64, len(s2))
	for i, v := range s2 {
		logits2[i] = math.Log(v)
	}
	g2 := DeepSeek{V2: true, TopKMethod: "group_limited_greedy", Experts: 8, TopK: 2, Groups: 2, TopKGroup: 1, RoutedScale: 1}
	ids, w = g2.Route(logits2, nil)
	check("one of two groups", ids, w, []int{0, 3}, []float64{0.30, 0.03})
	g2.TopKMethod = "greedy"
	ids, w = g2.Route(logits2, nil)
	check("one of two groups, greedy", ids, w, []int{0, 4}, []float64{0.30, 0.20})
	g2.V2 = false
	ids, _ = g2.Route(logit(s2), nil)
	check("one of two groups, V3's rule", ids, nil, []int{4, 5}, nil)
	// One open group of 2 and TopK 3: the third expert is a closed one,
	// masked to 0, so its weight is 0.
	one := grouped
	one.TopKGroup = 1
	ids, w = one.Route(logits, nil)
	if !slices.Equal(ids[:2], []int{0, 1}) || ids[2] < 2 || w[2] != 0 || math.Abs(w[1]-0.015) > 1e-12 {
		t.Errorf("one open group: experts %v weights %v, want 0, 1, a closed one at weight 0", ids, w)
	}
	// A real V2 scale: DeepSeek-V2's routed_scaling_factor 16 multiplies
	// the softmax scores as they are.
	full := greedy
	full.RoutedScale = 16
	ids, w = full.Route(logits, nil)
	check("scale 16", ids, w, []int{0, 4, 2}, []float64{0.30 * 16, 0.20 * 16, 0.14 * 16})
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("Route took a correction bias for DeepSeek-V2")
			}
		}()
		grouped.Route(logits, make([]float64, 8))
	}()
}

// TestV2MoEBlockHandMade: DeepseekV2Moe on a hand-built block of 4
// experts of width 1 in 2 groups, one open, top 2, scale 2, with a
// shared expert and no correction bias tensor: router logits
// (x0, x1, -x0, -x1) at x = (0.8, 0.3) give softmax scores with the best
// in group 0, so experts 0 and 1 win with weights 2·s0 and 2·s1, not
// renormalised.
func TestV2MoEBlockHandMade(t *testing.T) {
	c := DeepSeek{V2: true, TopKMethod: "group_limited_greedy", Hidden: 2, MoEIntermediate: 1, Layers: 1,
		Experts: 4, TopK: 2, Shared: 1, Groups: 2, TopKGroup: 1, RoutedScale: 2}
	p := "model.layers.0.mlp."
	w := map[string][]float64{
		p + "gate.weight":                     {1, 0, 0, 1, -1, 0, 0, -1},
		p + "shared_experts.gate_proj.weight": {0, 1},
		p + "shared_experts.up_proj.weight":   {0, 1},
		p + "shared_experts.down_proj.weight": {0, 1},
	}
	g, d := []float64{0.5, -1, 2, 1.5}, []float64{1, 2, 3, 4}
	for e := range 4 {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		w[q+"gate_proj.weight"] = []float64{g[e], 0}
		w[q+"up_proj.weight"] = []float64{1, 1}
		w[q+"down_proj.weight"] = []float64{d[e], 0}
	}
	m := &Model{C: c, W: w}
	x := []float64{0.8, 0.3}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	z := math.Exp(0.8) + math.Exp(0.3) + math.Exp(-0.8) + math.Exp(-0.3)
	s0, s1 := math.Exp(0.8)/z, math.Exp(0.3)/z
	want := []float64{
		2*s0*d[0]*silu(g[0]*0.8)*1.1 + 2*s1*d[1]*silu(g[1]*0.8)*1.1,
		silu(0.3) * 0.3,
	}
	got := m.moe(0, p, x)
	if math.Abs(got[0]-want[0]) > 1e-12 || math.Abs(got[1]-want[1]) > 1e-12 {
		t.Errorf("moe %v, want %v", got, want)
	}
	if ids := m.Experts(0, x); !slices.Equal(ids, []int{0, 1}) {
		t.Errorf("experts %v, want [0 1]", ids)
	}
}

// TestV2RotaryIsAdjacentPairs: DeepSeek-V2's apply_rotary_emb turns each
// pair (2j, 2j+1) in place as the complex number v[2j] + i·v[2j+1] times
// attention_factor·e^{i·pos·inv_j}. rotate gives the same numbers in
// the regrouped order (evens' results first), so every q·k is the same;
// V2 takes that path even where RopeInterleave is false.
func TestV2RotaryIsAdjacentPairs(t *testing.T) {
	c := TinyDeepSeekV2()
	c.RopeInterleave = false
	inv, af := c.RopeFreqs()
	R := c.QKRope
	pairs := func(v []float64, pos int) []float64 {
		out := make([]float64, R)
		for j := 0; j < R/2; j++ {
			z := complex(v[2*j], v[2*j+1]) * complex(af, 0) * cmplx.Exp(complex(0, float64(pos)*inv[j]))
			out[2*j], out[2*j+1] = real(z), imag(z)
		}
		return out
	}
	dot := func(a, b []float64) float64 {
		s := 0.0
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	q, k := make([]float64, R), make([]float64, R)
	for i := range q {
		q[i], k[i] = math.Sin(float64(3*i+1)), math.Cos(float64(5*i+2))
	}
	for _, pos := range [][2]int{{0, 0}, {7, 3}, {40, 1}, {63, 62}} {
		rq, rk := c.rotate(q, pos[0], inv, af), c.rotate(k, pos[1], inv, af)
		pq, pk := pairs(q, pos[0]), pairs(k, pos[1])
		for j := 0; j < R/2; j++ {
			if math.Abs(rq[j]-pq[2*j]) > 1e-12 || math.Abs(rq[R/2+j]-pq[2*j+1]) > 1e-12 {
				t.Fatalf("positions %v: rotate %v, adjacent pairs %v", pos, rq, pq)
			}
		}
		if d := dot(rq, rk) - dot(pq, pk); math.Abs(d) > 1e-12 {
			t.Errorf("positions %v: q·k differs by %g", pos, d)
		}
	}
	// And on the whole model: RopeInterleave does not matter for V2.
	_, m := load(t, TinyDeepSeekV2())
	flip := *m
	flip.C.RopeInterleave = false
	if d := maxAbsDiff(flip.Logits(testTokens[:6]), m.Logits(testTokens[:6])); d != 0 {
		t.Errorf("V2 with rope_interleave false differs by %g", d)
	}
}

// TestV2RopeParameters: V2-Lite's mscale and mscale_all_dim are equal
// (0.707), so the attention factor of cos and sin is 1 and the softmax
// scale is (8+8)^-0.5·(1 + 0.1·0.707·ln 4)²: DeepSeek's released code
// (and vLLM's), not transformers' DeepseekV2Attention, which leaves the
// mscale² out. Without YaRN it is 16^-0.5.
func TestV2RopeParameters(t *testing.T) {
	c := TinyDeepSeekV2()
	if _, af := c.RopeFreqs(); af != 1 {
		t.Errorf("attention factor %g, want 1", af)
	}
	m := 1 + 0.0707*math.Log(4)
	if got, want := c.SoftmaxScale(), m*m/4; math.Abs(got-want) > 1e-15 {
		t.Errorf("softmax scale %g, want %g", got, want)
	}
	if got := TinyDeepSeekV2Greedy().SoftmaxScale(); got != 0.25 {
		t.Errorf("softmax scale without YaRN %g, want 0.25", got)
	}
}

// wantV2Tensors is wantTensors for the tiny V2 models: no
// mlp.gate.e_score_correction_bias, and 2 shared experts (width 32).
func wantV2Tensors(qLora bool) map[string][]int {
	w := wantTensors(qLora, false, false)
	for _, l := range []int{1, 2} {
		p := fmt.Sprintf("model.layers.%d.mlp.", l)
		delete(w, p+"gate.e_score_correction_bias")
		w[p+"shared_experts.gate_proj.weight"] = []int{32, 32}
		w[p+"shared_experts.up_proj.weight"] = []int{32, 32}
		w[p+"shared_experts.down_proj.weight"] = []int{32, 32}
	}
	return w
}

// TestV2Checkpoint: the tiny V2 checkpoints hold exactly the tensors of
// DeepSeek-V2's releases (no correction bias), and config.json says what
// DeepSeek-V2(-Lite)'s do: DeepseekV2ForCausalLM, deepseek_v2, softmax
// scoring, the topk_method, norm_topk_prob false, n_group and
// topk_group, and neither rope_interleave nor num_nextn_predict_layers.
// Write refuses MTP and unknown or uneven routing with V2.
func TestV2Checkpoint(t *testing.T) {
	for _, c := range v2Flavours() {
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		for _, tn := range c.Tensors() {
			if strings.Contains(tn.Name, "e_score_correction_bias") {
				t.Errorf("Tensors lists %s", tn.Name)
			}
		}
		ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := wantV2Tensors(c.QLoraRank > 0)
		if got, names := ck.Names(), slices.Sorted(maps.Keys(want)); !slices.Equal(got, names) {
			t.Errorf("seed %d: tensors:\n%s\nwant:\n%s", c.Seed, strings.Join(got, "\n"), strings.Join(names, "\n"))
		}
		for name, shape := range want {
			info, ok := ck.Info(name)
			if ok && (!slices.Equal(info.Shape, shape) || info.DType != safetensors.F32) {
				t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
			}
		}
		ck.Close()

		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]any{
			"model_type": "deepseek_v2", "scoring_func": "softmax", "topk_method": c.TopKMethod,
			"norm_topk_prob": false, "n_group": float64(c.Groups), "topk_group": float64(c.TopKGroup),
			"num_experts_per_tok": float64(c.TopK), "n_routed_experts": 8.0, "n_shared_experts": 2.0,
			"moe_intermediate_size": 16.0, "first_k_dense_replace": 1.0, "routed_scaling_factor": 1.5,
			"kv_lora_rank": 16.0, "qk_nope_head_dim": 8.0, "qk_rope_head_dim": 8.0, "v_head_dim": 12.0,
			"num_key_value_heads": 4.0, "tie_word_embeddings": false,
		} {
			if cfg[key] != want {
				t.Errorf("seed %d: config %s = %v, want %v", c.Seed, key, cfg[key], want)
			}
		}
		for _, key := range []string{"rope_interleave", "num_nextn_predict_layers"} {
			if _, ok := cfg[key]; ok {
				t.Errorf("seed %d: config has %s", c.Seed, key)
			}
		}
		if archs, _ := cfg["architectures"].([]any); len(archs) != 1 || archs[0] != "DeepseekV2ForCausalLM" {
			t.Errorf("architectures %v", cfg["architectures"])
		}
		if (c.QLoraRank > 0) != (cfg["q_lora_rank"] != nil) {
			t.Errorf("q_lora_rank %v", cfg["q_lora_rank"])
		}
		rs, _ := cfg["rope_scaling"].(map[string]any)
		if (c.Factor > 0) != (rs != nil) || rs != nil && (rs["type"] != "yarn" || rs["factor"] != 4.0 ||
			rs["original_max_position_embeddings"] != 16.0 || rs["mscale"] != 0.707 || rs["mscale_all_dim"] != 0.707 ||
			cfg["max_position_embeddings"] != 64.0) {
			t.Errorf("rope_scaling %v, max_position_embeddings %v", cfg["rope_scaling"], cfg["max_position_embeddings"])
		}
	}
	for what, c := range map[string]DeepSeek{
		"MTP":                  func() DeepSeek { c := TinyDeepSeekV2(); c.MTP = true; return c }(),
		"noaux_tc":             func() DeepSeek { c := TinyDeepSeekV2(); c.TopKMethod = "noaux_tc"; return c }(),
		"no topk_method":       func() DeepSeek { c := TinyDeepSeekV2(); c.TopKMethod = ""; return c }(),
		"3 groups of 8":        func() DeepSeek { c := TinyDeepSeekV2(); c.Groups = 3; return c }(),
		"more open than there": func() DeepSeek { c := TinyDeepSeekV2(); c.TopKGroup = 5; return c }(),
	} {
		if err := c.Write(t.TempDir()); err == nil {
			t.Errorf("Write took DeepSeek-V2 with %s", what)
		}
	}
}

// TestV2Logits: the tiny V2 models write, load and run causally with
// finite, O(1) logits, independent of the starting position; and a V2
// checkpoint is read back by the V2 description only (the V3 one wants
// the correction bias).
func TestV2Logits(t *testing.T) {
	for _, c := range v2Flavours() {
		dir, m := load(t, c)
		checkCausal(t, c.Seed, c.Vocab, m.Logits)
		if d := maxAbsDiff(m.logits(testTokens, 37), m.Logits(testTokens)); d > 1e-9 {
			t.Errorf("seed %d: shifting the positions moves the logits by %g", c.Seed, d)
		}
		v3 := c
		v3.V2 = false
		if _, err := v3.Load(dir); err == nil || !strings.Contains(err.Error(), "e_score_correction_bias") {
			t.Errorf("seed %d: loading a V2 checkpoint as V3: %v", c.Seed, err)
		}
	}
}

// TestV2RoutingMatters: on the real MoE inputs of TinyDeepSeekV2,
// Experts is RouteV2 on the layer's router logits, and both the group
// limit (against "greedy") and the group-max rule (against V3's sum of
// the two best, on the same scores) change the experts of some inputs.
// The logits then differ from the same weights routed as DeepSeek-V3
// (sigmoid scores, sum-of-two groups, zero correction bias, not
// renormalised) and from the same weights routed greedily, so the V2
// router is what the logits test.
func TestV2RoutingMatters(t *testing.T) {
	c := TinyDeepSeekV2()
	_, m := load(t, c)
	greedy := c
	greedy.TopKMethod = "greedy"
	sumOfTwo := c
	sumOfTwo.V2 = false
	var n, byGroups, byRule int
	set := func(v []int) []int { v = slices.Clone(v); slices.Sort(v); return v }
	m.moeInput = func(l int, h []float64) {
		n++
		logits := lmckpt.Linear64(h, m.W[fmt.Sprintf("model.layers.%d.mlp.gate.weight", l)], nil)
		ids, _ := c.RouteV2(logits)
		if got := m.Experts(l, h); !slices.Equal(got, ids) {
			t.Fatalf("Experts %v, RouteV2 %v", got, ids)
		}
		if g, _ := greedy.RouteV2(logits); !slices.Equal(set(g), set(ids)) {
			byGroups++
		}
		// V3's Route on logit(softmax) sees the same scores through its
		// sigmoid and groups them by the sum of the two best.
		if v3, _ := sumOfTwo.Route(logit(lmckpt.Softmax64(logits)), nil); !slices.Equal(set(v3), set(ids)) {
			byRule++
		}
	}
	v2Logits := m.Logits(testTokens)
	m.moeInput = nil
	if want := len(testTokens) * (c.Layers - c.FirstDense); n != want {
		t.Errorf("%d MoE inputs, want %d", n, want)
	}
	if byGroups == 0 || byRule == 0 {
		t.Errorf("of %d MoE inputs the group limit changes %d choices, the group-max rule %d", n, byGroups, byRule)
	}
	t.Logf("of %d MoE inputs the group limit changes %d choices, the group-max rule (against V3's) %d", n, byGroups, byRule)

	w := maps.Clone(m.W)
	for l := c.FirstDense; l < c.Layers; l++ {
		w[fmt.Sprintf("model.layers.%d.mlp.gate.e_score_correction_bias", l)] = make([]float64, c.Experts)
	}
	asV3 := &Model{C: sumOfTwo, W: w}
	if d := maxAbsDiff(asV3.Logits(testTokens), v2Logits); d < 1e-3 {
		t.Errorf("routing as DeepSeek-V3 moves the logits by %g only", d)
	}
	asGreedy := &Model{C: greedy, W: m.W}
	if d := maxAbsDiff(asGreedy.Logits(testTokens), v2Logits); d < 1e-3 {
		t.Errorf("routing greedily moves the logits by %g only", d)
	}
}
