package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

// RopeParams are the config.json facts that shape a rotary embedding
// (transformers' modeling_rope_utils.py).
type RopeParams struct {
	// Theta is rope_theta, the base.
	Theta float64
	// HeadDim is the attention head size.
	HeadDim int
	// PartialRotaryFactor rotates only the first HeadDim*factor dims of each
	// head (0 means 1).
	PartialRotaryFactor float64
	// MaxPositions is max_position_embeddings.
	MaxPositions int
	// Scaling is the rope_scaling object (nil or rope_type "default" for
	// plain RoPE).
	Scaling map[string]any
	// OriginalMaxPositions is the config's top-level
	// original_max_position_embeddings (Phi-3's), which LongRoPE reads when
	// Scaling does not hold one; 0 when absent.
	OriginalMaxPositions float64
	// Switched lets Scaling be LongRoPE, whose frequencies switch past a
	// sequence length: the caller sets lm.Spec.RopeSwitch from the Rope
	// (LongAfter), which compile, generate and serve need to run the
	// switch as transformers does. Without it "longrope" is refused.
	Switched bool
}

// Rope is a resolved rotary embedding: inverse frequencies for the first
// RotaryDim dims of each head and the attention factor that scales cos and
// sin (yarn).
type Rope struct {
	Type            string
	InvFreq         []float64 // [RotaryDim/2]
	AttentionFactor float64
	RotaryDim       int
	// LongInvFreq, when set, takes InvFreq's place and LongAttentionFactor
	// AttentionFactor on the rows whose sequence is longer than LongAfter
	// positions (LongRoPE's long factors, rope_type "longrope").
	LongInvFreq         []float64
	LongAttentionFactor float64
	LongAfter           int
	key                 string
}

// ParseRopeScaling decodes a rope_scaling (or rope_parameters) JSON object;
// null gives nil.
func ParseRopeScaling(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("rope_scaling: %w", err)
	}
	return m, nil
}

func num(m map[string]any, key string) (float64, bool) {
	v, ok := m[key]
	if !ok || v == nil {
		return 0, false
	}
	f, ok := v.(float64)
	return f, ok
}

// NewRope resolves the inverse frequencies of a rotary embedding. Supported
// rope_type values: default, linear, dynamic (identical to default for
// positions below max_position_embeddings, the only ones tputool uses;
// with an alpha, HunYuan's NTK base theta · alpha^(dim/(dim−2))), ntk,
// llama3, yarn, longrope and proportional. Others are errs.ErrUnsupported.
func NewRope(p RopeParams) (*Rope, error) {
	if p.Theta <= 0 {
		return nil, fmt.Errorf("rope_theta must be positive, got %v", p.Theta)
	}
	factor := p.PartialRotaryFactor
	if factor == 0 {
		factor = 1
	}
	dim := int(float64(p.HeadDim) * factor)
	if dim <= 0 || dim%2 != 0 || dim > p.HeadDim {
		return nil, fmt.Errorf("rotary dim %d (head_dim %d x partial_rotary_factor %v) must be even and in (0, head_dim]", dim, p.HeadDim, factor)
	}
	typ := "default"
	if p.Scaling != nil {
		if t, ok := p.Scaling["rope_type"].(string); ok {
			typ = t
		} else if t, ok := p.Scaling["type"].(string); ok {
			typ = t
		}
	}
	base := p.Theta
	r := &Rope{Type: typ, RotaryDim: dim, AttentionFactor: 1}
	need := func(key string) (float64, error) {
		v, ok := num(p.Scaling, key)
		if !ok {
			return 0, fmt.Errorf("rope_scaling (rope_type %q) needs a numeric %q", typ, key)
		}
		return v, nil
	}
	defaultFreq := func(base float64) []float64 {
		f := make([]float64, dim/2)
		for i := range f {
			f[i] = 1 / math.Pow(base, float64(2*i)/float64(dim))
		}
		return f
	}
	switch typ {
	case "default":
		r.InvFreq = defaultFreq(base)
	case "dynamic":
		// HunYuan's DynamicNTKAlphaRotary: with an alpha, the base grows
		// to theta · alpha^(dim/(dim−2)) at every position.
		// Only HunYuan's configs carry an alpha; 0 is none, as
		// transformers tests it for truth.
		a, ok := num(p.Scaling, "alpha")
		switch v := p.Scaling["alpha"]; {
		case v != nil && !ok:
			return nil, fmt.Errorf("rope_scaling (rope_type \"dynamic\") alpha must be a number, got %v", v)
		case a < 0:
			return nil, fmt.Errorf("rope_scaling (rope_type \"dynamic\") alpha must be positive, got %v", a)
		case a != 0 && dim <= 2:
			return nil, fmt.Errorf("rope_scaling (rope_type \"dynamic\") alpha needs a rotary wider than 2 dimensions, got %d", dim)
		case a != 0:
			base *= math.Pow(a, float64(dim)/float64(dim-2))
		}
		r.InvFreq = defaultFreq(base)
	case "linear":
		f, err := need("factor")
		if err != nil {
			return nil, err
		}
		r.InvFreq = defaultFreq(base)
		for i := range r.InvFreq {
			r.InvFreq[i] /= f
		}
	case "ntk":
		f, err := need("factor")
		if err != nil {
			return nil, err
		}
		r.InvFreq = defaultFreq(base * math.Pow(f, float64(dim)/float64(dim-2)))
	case "llama3":
		f, err := need("factor")
		if err != nil {
			return nil, err
		}
		low, err := need("low_freq_factor")
		if err != nil {
			return nil, err
		}
		high, err := need("high_freq_factor")
		if err != nil {
			return nil, err
		}
		old, err := need("original_max_position_embeddings")
		if err != nil {
			return nil, err
		}
		r.InvFreq = llama3Freq(defaultFreq(base), f, low, high, old)
	case "yarn":
		inv, att, err := yarnFreq(p, dim)
		if err != nil {
			return nil, err
		}
		r.InvFreq, r.AttentionFactor = inv, att
	case "longrope":
		if !p.Switched {
			return nil, errs.Unsupportedf("rope_scaling rope_type \"longrope\" is supported for Phi-3's architectures only (its switch between short and long factors needs lm.Spec.RopeSwitch)")
		}
		if err := longRope(p, dim, r); err != nil {
			return nil, err
		}
		r.key = fmt.Sprintf("rope/longrope/%d/%v/%v/%v/%v/%v/%d", dim, base, r.InvFreq, r.LongInvFreq, r.AttentionFactor, r.LongAttentionFactor, r.LongAfter)
		return r, nil
	case "proportional":
		// Gemma 4's full-attention layers (transformers'
		// _compute_proportional_rope_parameters): the rotation pairs dims
		// i and i + head_dim/2 over the whole head, as plain RoPE does, but
		// only the first int(partial_rotary_factor·head_dim/2) pairs turn,
		// at the frequencies of a head_dim-wide RoPE; the others have
		// frequency zero (cos 1, sin 0). factor (default 1) divides them.
		f := 1.0
		if v, ok := num(p.Scaling, "factor"); ok && v > 0 {
			f = v
		}
		factor := p.PartialRotaryFactor
		if factor == 0 {
			factor = 1
		}
		angles := int(math.Floor(factor * float64(p.HeadDim) / 2))
		r.RotaryDim = p.HeadDim
		r.InvFreq = make([]float64, p.HeadDim/2)
		for i := 0; i < angles && i < len(r.InvFreq); i++ {
			r.InvFreq[i] = 1 / math.Pow(base, float64(2*i)/float64(p.HeadDim)) / f
		}
		r.key = fmt.Sprintf("rope/proportional/%d/%d/%v/%v", p.HeadDim, angles, base, f)
		return r, nil
	default:
		return nil, errs.Unsupportedf("rope_scaling rope_type %q is not supported (supported: default, linear, dynamic, ntk, llama3, yarn, longrope, proportional)", typ)
	}
	r.key = fmt.Sprintf("rope/%s/%d/%v/%v", typ, dim, base, r.InvFreq[len(r.InvFreq)-1])
	return r, nil
}

// WithScales returns a copy of r whose cos and sin are scaled by short on
// the rows at the short frequencies and by long on those at the long ones
// (Phi-3.5-MoE's short_mscale and long_mscale, which replace LongRoPE's
// attention factor).
func (r *Rope) WithScales(short, long float64) *Rope {
	out := *r
	out.AttentionFactor, out.LongAttentionFactor = short, long
	out.key = fmt.Sprintf("%s/scales/%v/%v", r.key, short, long)
	return &out
}

// llama3Freq is Llama 3.1's frequency-dependent scaling: long wavelengths
// are divided by factor, short ones kept, and the band between blended.
func llama3Freq(inv []float64, factor, lowFactor, highFactor, oldCtx float64) []float64 {
	lowWavelen := oldCtx / lowFactor
	highWavelen := oldCtx / highFactor
	out := make([]float64, len(inv))
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen < highWavelen:
			out[i] = f
		case wavelen > lowWavelen:
			out[i] = f / factor
		default:
			smooth := (oldCtx/wavelen - lowFactor) / (highFactor - lowFactor)
			out[i] = (1-smooth)*f/factor + smooth*f
		}
	}
	return out
}

// longRope is LongRoPE (arXiv:2402.13753) as transformers'
// _compute_longrope_parameters and its longrope frequency update give it
// (Phi-3, Phi-3.5, Phi-4-mini): each frequency of plain RoPE divided by its
// short_factor, or by its long_factor on a sequence longer than
// original_max_position_embeddings (rope_scaling's, else the config's),
// and cos and sin scaled by attention_factor, by default
// sqrt(1 + ln(factor)/ln(original)) where factor (default
// max_position_embeddings/original) exceeds 1. It fills r.
func longRope(p RopeParams, dim int, r *Rope) error {
	s := p.Scaling
	factors := func(key string) ([]float64, error) {
		list, ok := s[key].([]any)
		if !ok {
			return nil, fmt.Errorf("rope_scaling (rope_type \"longrope\") needs %q, a list of %d numbers", key, dim/2)
		}
		if len(list) != dim/2 {
			return nil, fmt.Errorf("rope_scaling %q has %d numbers; the rotary dim %d needs %d", key, len(list), dim, dim/2)
		}
		out := make([]float64, len(list))
		for i, v := range list {
			f, ok := v.(float64)
			if !ok || !(f > 0) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("rope_scaling %q[%d] is %v; want a positive number", key, i, v)
			}
			out[i] = f
		}
		return out, nil
	}
	short, err := factors("short_factor")
	if err != nil {
		return err
	}
	long, err := factors("long_factor")
	if err != nil {
		return err
	}
	orig, where := p.OriginalMaxPositions, "config.json's"
	if v, ok := num(s, "original_max_position_embeddings"); ok {
		orig, where = v, "rope_scaling's"
	}
	if !(orig >= 1) || orig != math.Trunc(orig) || orig > math.MaxInt32 {
		return fmt.Errorf("rope_type \"longrope\" needs a positive whole original_max_position_embeddings (in rope_scaling or config.json), got %v from %s", orig, where)
	}
	factor, ok := num(s, "factor")
	if !ok {
		factor = float64(p.MaxPositions) / orig
	} else if !(factor > 0) {
		return fmt.Errorf("rope_scaling \"factor\" must be positive, got %v", factor)
	}
	att, ok := num(s, "attention_factor")
	if ok && !(att > 0) {
		return fmt.Errorf("rope_scaling \"attention_factor\" must be positive, got %v", att)
	}
	if !ok {
		att = 1
		if factor > 1 {
			att = math.Sqrt(1 + math.Log(factor)/math.Log(orig))
		}
	}
	freqs := func(ext []float64) []float64 {
		f := make([]float64, dim/2)
		for i := range f {
			f[i] = 1 / (ext[i] * math.Pow(p.Theta, float64(2*i)/float64(dim)))
		}
		return f
	}
	r.InvFreq, r.LongInvFreq = freqs(short), freqs(long)
	r.AttentionFactor, r.LongAttentionFactor = att, att
	r.LongAfter = int(orig)
	return nil
}

// yarnFreq is YaRN (arXiv:2309.00071) as transformers implements it.
func yarnFreq(p RopeParams, dim int) ([]float64, float64, error) {
	s := p.Scaling
	// The factor is the config's; only without one is it the ratio of
	// max_position_embeddings to original_max_position_embeddings (as
	// transformers has read it since 4.56: Qwen's model cards add factor 4
	// over 32768 original positions to configs whose
	// max_position_embeddings is 32768 or 40960).
	factor, hasFactor := num(s, "factor")
	origMax := float64(p.MaxPositions)
	if v, ok := num(s, "original_max_position_embeddings"); ok {
		origMax = v
		if !hasFactor && p.MaxPositions > 0 && v > 0 {
			factor, hasFactor = float64(p.MaxPositions)/v, true
		}
	}
	if !hasFactor {
		return nil, 0, fmt.Errorf("rope_scaling (rope_type \"yarn\") needs a numeric \"factor\" (or original_max_position_embeddings and max_position_embeddings to derive it)")
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	att, ok := num(s, "attention_factor")
	if !ok {
		ms, ok1 := num(s, "mscale")
		msAll, ok2 := num(s, "mscale_all_dim")
		if ok1 && ok2 && ms != 0 && msAll != 0 {
			att = mscale(factor, ms) / mscale(factor, msAll)
		} else {
			att = mscale(factor, 1)
		}
	}
	betaFast, ok := num(s, "beta_fast")
	if !ok || betaFast == 0 {
		betaFast = 32
	}
	betaSlow, ok := num(s, "beta_slow")
	if !ok || betaSlow == 0 {
		betaSlow = 1
	}
	truncate := true
	if v, ok := s["truncate"].(bool); ok {
		truncate = v
	}
	base := p.Theta
	corrDim := func(rot float64) float64 {
		return float64(dim) * math.Log(origMax/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := corrDim(betaFast), corrDim(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low = math.Max(low, 0)
	high = math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	inv := make([]float64, dim/2)
	for i := range inv {
		pos := math.Pow(base, float64(2*i)/float64(dim))
		extra := 1 / pos
		inter := 1 / (factor * pos)
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extraFactor := 1 - ramp
		inv[i] = inter*(1-extraFactor) + extra*extraFactor
	}
	return inv, att, nil
}

// CosSin returns cos and sin tables [B, T, RotaryDim/2] for the step's
// positions, computed in float32 and cast to dtype, once per graph. With
// LongInvFreq, a row whose last position is LongAfter or more (its
// sequence is longer than LongAfter) turns at the long frequencies and
// scales by LongAttentionFactor, as transformers' forward picks them from
// its positions' maximum (per row here, where transformers takes the
// batch's). Keys already cached keep the rotation they were written with.
func (r *Rope) CosSin(step *lm.Step, dtype dtypes.DType) (cos, sin *Node) {
	key := fmt.Sprintf("%s/%s", r.key, dtype)
	build := func() *Node {
		g := step.Positions.Graph()
		f32 := func(fs []float64) *Node {
			out := make([]float32, len(fs))
			for i, f := range fs {
				out[i] = float32(f)
			}
			return ExpandLeftToRank(Const(g, out), 3) // [1, 1, rot/2]
		}
		pos := ConvertDType(step.Positions, dtypes.Float32) // [B, T]
		inv, att := f32(r.InvFreq), Scalar(g, dtypes.Float32, r.AttentionFactor)
		if r.LongInvFreq != nil {
			dims := step.Positions.Shape().Dimensions
			last := SliceAxis(step.Positions, 1, AxisElem(dims[1]-1))                          // [B, 1]
			long := InsertAxes(GreaterOrEqual(last, Scalar(g, dtypes.Int32, r.LongAfter)), -1) // [B, 1, 1]
			half := len(r.InvFreq)
			inv = Where(BroadcastToDims(long, dims[0], 1, half), BroadcastToDims(f32(r.LongInvFreq), dims[0], 1, half), BroadcastToDims(inv, dims[0], 1, half))
			att = Where(long, BroadcastToDims(Scalar(g, dtypes.Float32, r.LongAttentionFactor), dims[0], 1, 1), BroadcastToDims(att, dims[0], 1, 1))
		}
		freqs := Mul(InsertAxes(pos, -1), inv) // [B, T, rot/2]
		c, s := Cos(freqs), Sin(freqs)
		if r.LongInvFreq != nil || r.AttentionFactor != 1 {
			c, s = Mul(c, att), Mul(s, att)
		}
		return Stack([]*Node{ConvertDType(c, dtype), ConvertDType(s, dtype)}, 0) // [2, B, T, rot/2]
	}
	both := step.Memo(key, build)
	return Squeeze(SliceAxis(both, 0, AxisElem(0)), 0), Squeeze(SliceAxis(both, 0, AxisElem(1)), 0)
}

// PairsToHalves regroups x [B, T, heads, D]'s last axis from adjacent
// pairs (x0, x1), (x2, x3), … into halves (x0, x2, …, x1, x3, …), so that
// ApplyRope's rotate-half convention turns the pairs a model rotates as
// adjacent dims (DeepSeek's rope_interleave, transformers'
// apply_rotary_pos_emb_interleave; ERNIE 4.5's rotary). Applied to both
// queries and keys it leaves every q·k as the pairs' rotation gives it.
func PairsToHalves(x *Node) *Node {
	d := x.Shape().Dimensions
	y := Reshape(x, d[0], d[1], d[2], d[3]/2, 2)
	return Reshape(TransposeAllDims(y, 0, 1, 2, 4, 3), d...)
}

// PairsToHalvesFirst is PairsToHalves over the first rot dims of x's
// last axis, the rest passed through (a partial rotary over adjacent
// pairs: GLM's).
func PairsToHalvesFirst(x *Node, rot int) *Node {
	d := x.Shape().Dimensions[3]
	if rot >= d {
		return PairsToHalves(x)
	}
	return Concatenate([]*Node{PairsToHalves(SliceAxis(x, 3, AxisRange(0, rot))), SliceAxis(x, 3, AxisRange(rot, d))}, 3)
}

// ApplyRope rotates x [B, T, heads, D] by cos, sin [B, T, rot/2] in the
// rotate-half convention of transformers (the first half of the rotated
// dims pairs with the second half). Dims past RotaryDim pass through
// (partial rotary embeddings).
func ApplyRope(x, cos, sin *Node) *Node {
	d := x.Shape().Dimensions[3]
	half := cos.Shape().Dimensions[2]
	rot := 2 * half
	c := InsertAxes(cos, 2) // [B, T, 1, rot/2]
	s := InsertAxes(sin, 2)
	x1 := SliceAxis(x, 3, AxisRange(0, half))
	x2 := SliceAxis(x, 3, AxisRange(half, rot))
	parts := []*Node{
		Sub(Mul(x1, c), Mul(x2, s)), // first half:  x1 cos - x2 sin
		Add(Mul(x2, c), Mul(x1, s)), // second half: x2 cos + x1 sin
	}
	if rot < d {
		parts = append(parts, SliceAxis(x, 3, AxisRange(rot, d)))
	}
	return Concatenate(parts, 3) // [B, T, heads, D]
}

// DefaultPartialRotary returns raw with partial_rotary_factor set to
// factor when neither raw nor its rope_parameters sets it: for the
// configuration classes whose default is not 1 (Qwen3.5's 0.25, GLM-4.5's
// 0.5). raw itself is not changed.
func DefaultPartialRotary(raw map[string]json.RawMessage, factor float64) map[string]json.RawMessage {
	if _, ok := raw["partial_rotary_factor"]; ok {
		return raw
	}
	if params, err := ParseRopeScaling(raw["rope_parameters"]); err == nil {
		if _, ok := params["partial_rotary_factor"]; ok {
			return raw
		}
	}
	out := make(map[string]json.RawMessage, len(raw)+1)
	for k, v := range raw {
		out[k] = v
	}
	out["partial_rotary_factor"] = json.RawMessage(strconv.FormatFloat(factor, 'g', -1, 64))
	return out
}

// ConfigRope resolves the rotary embedding of a config.json: the
// rope_parameters object of transformers v5 (rope_theta inside it), or the
// older rope_theta and rope_scaling fields. defaultTheta applies when the
// config names no base; partial_rotary_factor is honoured. LongRoPE is
// refused (ConfigRopeSwitched takes it).
func ConfigRope(raw map[string]json.RawMessage, defaultTheta float64, headDim, maxPositions int) (*Rope, error) {
	return configRope(raw, defaultTheta, headDim, maxPositions, false)
}

// ConfigRopeSwitched is ConfigRope for a caller that runs LongRoPE's
// switch (RopeParams.Switched): the caller sets lm.Spec.RopeSwitch from
// the Rope's LongAfter when LongInvFreq is set.
func ConfigRopeSwitched(raw map[string]json.RawMessage, defaultTheta float64, headDim, maxPositions int) (*Rope, error) {
	return configRope(raw, defaultTheta, headDim, maxPositions, true)
}

func configRope(raw map[string]json.RawMessage, defaultTheta float64, headDim, maxPositions int, switched bool) (*Rope, error) {
	p := RopeParams{Theta: defaultTheta, HeadDim: headDim, MaxPositions: maxPositions, Switched: switched}
	if v, ok := raw["original_max_position_embeddings"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &p.OriginalMaxPositions); err != nil {
			return nil, fmt.Errorf("original_max_position_embeddings: %w", err)
		}
	}
	if v, ok := raw["partial_rotary_factor"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &p.PartialRotaryFactor); err != nil {
			return nil, fmt.Errorf("partial_rotary_factor: %w", err)
		}
	}
	if v, ok := raw["rope_theta"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &p.Theta); err != nil {
			return nil, fmt.Errorf("rope_theta: %w", err)
		}
	}
	scaling, err := ParseRopeScaling(raw["rope_scaling"])
	if err != nil {
		return nil, err
	}
	params, err := ParseRopeScaling(raw["rope_parameters"])
	if err != nil {
		return nil, fmt.Errorf("rope_parameters: %w", err)
	}
	if params != nil {
		if t, ok := num(params, "rope_theta"); ok {
			p.Theta = t
		}
		if f, ok := num(params, "partial_rotary_factor"); ok {
			p.PartialRotaryFactor = f
		}
		scaling = params
	}
	p.Scaling = scaling
	r, err := NewRope(p)
	if err != nil {
		return nil, fmt.Errorf("rotary embedding: %w", err)
	}
	return r, nil
}
