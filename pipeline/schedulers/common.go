package schedulers

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

// base holds what every scheduler shares: identity, config, the timestep
// schedule and diffusers' step_index/begin_index bookkeeping.
type base struct {
	class      string
	cfg        Config
	order      int
	timesteps  []float64
	stepIndex  int // -1 = None
	beginIndex int // -1 = None
	numInfer   int // num_inference_steps; 0 = None
}

func newBase(class string, cfg Config) base {
	return base{class: class, cfg: cfg, order: classOrder[class], stepIndex: -1, beginIndex: -1}
}

func (b *base) Name() string         { return b.class }
func (b *base) Config() Config       { return b.cfg.Clone() }
func (b *base) Order() int           { return max(b.order, 1) }
func (b *base) Timesteps() []float64 { return slices.Clone(b.timesteps) }
func (b *base) StepIndex() int       { return b.stepIndex }
func (b *base) SetBeginIndex(i int)  { b.beginIndex = i }
func (b *base) ResetStepIndex()      { b.stepIndex = -1 }

// resetIndices clears step_index and begin_index (every set_timesteps does).
func (b *base) resetIndices() { b.stepIndex, b.beginIndex = -1, -1 }

// indexForTimestep is index_for_timestep of the sigma schedulers: the
// position of t in the schedule, taking the second occurrence when t appears
// more than once (so that img2img, which starts mid-schedule, does not skip a
// sigma).
func indexForTimestep(ts []float64, t float64) (int, error) {
	first := -1
	for i, v := range ts {
		if v == t {
			if first >= 0 {
				return i, nil
			}
			first = i
		}
	}
	if first < 0 {
		return 0, fmt.Errorf("timestep %v is not in the schedule", t)
	}
	return first, nil
}

// indexForTimestepOrLast is the multistep solvers' variant: a timestep not in
// the schedule maps to the last index.
func indexForTimestepOrLast(ts []float64, t float64) int {
	i, err := indexForTimestep(ts, t)
	if err != nil {
		return len(ts) - 1
	}
	return i
}

// initStepIndex is _init_step_index.
func (b *base) initStepIndex(t float64, orLast bool) error {
	if b.stepIndex >= 0 {
		return nil
	}
	if b.beginIndex >= 0 {
		b.stepIndex = b.beginIndex
		return nil
	}
	if orLast {
		b.stepIndex = indexForTimestepOrLast(b.timesteps, t)
		return nil
	}
	i, err := indexForTimestep(b.timesteps, t)
	if err != nil {
		return fmt.Errorf("%s: %w", b.class, err)
	}
	b.stepIndex = i
	return nil
}

// noiseStepIndices is the step-index choice of add_noise for the sigma
// schedulers.
func (b *base) noiseStepIndex(t float64, orLast bool) (int, error) {
	switch {
	case b.beginIndex < 0:
		if orLast {
			return indexForTimestepOrLast(b.timesteps, t), nil
		}
		i, err := indexForTimestep(b.timesteps, t)
		if err != nil {
			return 0, fmt.Errorf("%s add_noise: %w", b.class, err)
		}
		return i, nil
	case b.stepIndex >= 0:
		return b.stepIndex, nil
	default:
		return b.beginIndex, nil
	}
}

// historyErr reports a step that needs sigmas from before the start of the
// schedule: the step index was moved (SetBeginIndex, ResetStepIndex)
// mid-way through a multistep or second-order step.
func historyErr(class string, i, back int) error {
	if i-back < 0 {
		return fmt.Errorf("%s: step %d needs %d earlier step(s); the step index was moved in the middle of the schedule", class, i, back)
	}
	return nil
}

// ---- betas -------------------------------------------------------------------

// makeBetas builds the training betas from trained_betas or beta_schedule.
// allowed lists the beta_schedule values the class implements.
func makeBetas(r *cfgReader, allowed ...string) []float32 {
	n := r.int("num_train_timesteps")
	if r.err != nil {
		return nil
	}
	if n < 1 {
		r.invalid("num_train_timesteps %d must be at least 1", n)
		return nil
	}
	if tb, ok := r.floats("trained_betas"); ok {
		out := make([]float32, len(tb))
		for i, v := range tb {
			out[i] = float32(v)
		}
		return out
	}
	sched := r.str("beta_schedule")
	start, end := r.float("beta_start"), r.float("beta_end")
	if r.err != nil {
		return nil
	}
	r.oneOf("beta_schedule", sched, allowed...)
	if r.err != nil {
		return nil
	}
	switch sched {
	case "linear":
		return torchLinspaceF32(start, end, n)
	case "scaled_linear":
		b := torchLinspaceF32(math.Pow(start, 0.5), math.Pow(end, 0.5), n)
		for i := range b {
			b[i] = sq32(b[i])
		}
		return b
	case "squaredcos_cap_v2":
		return betasForAlphaBar(n, "cosine")
	case "exp":
		return betasForAlphaBar(n, "exp")
	case "laplace":
		return betasForAlphaBar(n, "laplace")
	case "sigmoid":
		x := torchLinspaceF32(-6, 6, n)
		d := float32(end - start)
		for i := range x {
			x[i] = float32(sigmoid32(x[i])*d) + float32(start)
		}
		return x
	}
	return nil
}

// betasForAlphaBar discretises alpha_bar(t) (Nichol & Dhariwal's cosine
// schedule and variants) into betas capped at 0.999, in double precision.
func betasForAlphaBar(n int, transform string) []float32 {
	var alphaBar func(t float64) float64
	switch transform {
	case "cosine":
		alphaBar = func(t float64) float64 {
			c := math.Cos((t + 0.008) / 1.008 * math.Pi / 2)
			return c * c
		}
	case "laplace":
		alphaBar = func(t float64) float64 {
			lmb := -0.5 * math.Copysign(1, 0.5-t) * math.Log(1-2*math.Abs(0.5-t)+1e-06)
			snr := math.Exp(lmb)
			return math.Sqrt(snr / (1 + snr))
		}
	case "exp":
		alphaBar = func(t float64) float64 { return math.Exp(t * -12.0) }
	}
	out := make([]float32, n)
	for i := range out {
		t1 := float64(i) / float64(n)
		t2 := float64(i+1) / float64(n)
		out[i] = float32(math.Min(1-alphaBar(t2)/alphaBar(t1), 0.999))
	}
	return out
}

// rescaleZeroTerminalSNR rescales betas to zero terminal SNR (Lin et al.
// 2023, "Common Diffusion Noise Schedules and Sample Steps are Flawed").
func rescaleZeroTerminalSNR(betas []float32) []float32 {
	alphas := make([]float32, len(betas))
	for i, b := range betas {
		alphas[i] = 1 - b
	}
	acp := torchCumprodF32(alphas)
	s := make([]float32, len(acp))
	for i, a := range acp {
		s[i] = sqrt32(a)
	}
	s0, sT := s[0], s[len(s)-1]
	scale := s0 / (s0 - sT)
	for i := range s {
		s[i] -= sT
		s[i] *= scale
	}
	ab := make([]float32, len(s))
	for i := range s {
		ab[i] = sq32(s[i])
	}
	out := make([]float32, len(betas))
	out[0] = 1 - ab[0]
	for i := 1; i < len(ab); i++ {
		out[i] = 1 - ab[i]/ab[i-1]
	}
	return out
}

// alphasCumprod is torch.cumprod(1 - betas).
func alphasCumprod(betas []float32) []float32 {
	alphas := make([]float32, len(betas))
	for i, b := range betas {
		alphas[i] = 1 - b
	}
	return torchCumprodF32(alphas)
}

// ---- tensors -------------------------------------------------------------

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// checkShapes validates a step's inputs against the shape.
func checkShapes(class string, shape []int, tensors ...[]float32) error {
	if len(shape) < 1 {
		return fmt.Errorf("%s: shape %v: want at least a batch dimension", class, shape)
	}
	for _, d := range shape {
		if d <= 0 {
			return fmt.Errorf("%s: shape %v has a non-positive dimension", class, shape)
		}
	}
	n := numel(shape)
	for _, t := range tensors {
		if len(t) != n {
			return fmt.Errorf("%s: tensor has %d elements, want %d for shape %v", class, len(t), n, shape)
		}
	}
	return nil
}

// splitLearnedVariance splits a model output with twice the sample's
// channels (learned variance) into the prediction and the variance.
func splitLearnedVariance(class string, modelOutput []float32, shape []int) (pred, variance []float32, err error) {
	if len(shape) < 2 {
		return nil, nil, fmt.Errorf("%s: learned variance needs a channel dimension, shape %v", class, shape)
	}
	n := numel(shape)
	if len(modelOutput) != 2*n {
		return nil, nil, fmt.Errorf("%s: model output has %d elements, want %d (twice the sample's channels)", class, len(modelOutput), 2*n)
	}
	b := shape[0]
	per := n / b // C*H*W of the sample
	pred = make([]float32, n)
	variance = make([]float32, n)
	for i := 0; i < b; i++ {
		copy(pred[i*per:(i+1)*per], modelOutput[2*i*per:(2*i+1)*per])
		copy(variance[i*per:(i+1)*per], modelOutput[(2*i+1)*per:(2*i+2)*per])
	}
	return pred, variance, nil
}

// firstChannels is model_output[:, :c] for an output with more channels
// than the sample (DPM-Solver with learned variance keeps the first 3).
func firstChannels(modelOutput []float32, shape []int, c int) []float32 {
	n := numel(shape)
	if len(modelOutput) == n || len(shape) < 2 {
		return modelOutput
	}
	b := shape[0]
	inPer := len(modelOutput) / b
	spatial := n / b / shape[1]
	out := make([]float32, 0, n)
	for i := 0; i < b; i++ {
		out = append(out, modelOutput[i*inPer:i*inPer+c*spatial]...)
	}
	return out
}

// clampF32 is tensor.clamp(-r, r) with a Python float range.
func clampF32(x []float32, r float64) []float32 {
	lo, hi := float32(-r), float32(r)
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = min(max(v, lo), hi)
	}
	return out
}

// thresholdSample is dynamic thresholding (Imagen, Saharia et al. 2022):
// per batch element, s = quantile(|x|, ratio) clamped to [1, max], then
// clamp(x, -s, s) / s.
func thresholdSample(x []float32, shape []int, ratio, maxValue float64) []float32 {
	b := shape[0]
	per := len(x) / b
	out := make([]float32, len(x))
	abs := make([]float32, per)
	for i := 0; i < b; i++ {
		row := x[i*per : (i+1)*per]
		for j, v := range row {
			abs[j] = float32(math.Abs(float64(v)))
		}
		s := torchQuantileF32(abs, ratio)
		s = min(max(s, 1), float32(maxValue))
		for j, v := range row {
			out[i*per+j] = min(max(v, -s), s) / s
		}
	}
	return out
}

// churn is the s_churn stochasticity of the Euler-type steps (Karras et
// al. 2022, Algorithm 2): for sigma in [s_tmin, s_tmax], gamma =
// min(s_churn / (numSigmas - 1), sqrt(2) - 1), sigma_hat = sigma *
// (gamma + 1), and when gamma > 0 the sample moves by fresh noise times
// s_noise of standard deviation sqrt(sigma_hat² - sigma²). It returns
// sigma_hat and the (possibly new) sample; no noise is drawn when gamma is
// 0.
func churn(opts StepOptions, sigma float32, numSigmas int, sample []float32, shape []int, gen *torchrand.Generator) (float32, []float32) {
	sTMax := opts.STMax
	if sTMax == 0 {
		sTMax = math.Inf(1)
	}
	sNoise := opts.SNoise
	if sNoise == 0 {
		sNoise = 1
	}
	gamma := 0.0
	if opts.STMin <= float64(sigma) && float64(sigma) <= sTMax {
		gamma = math.Min(opts.SChurn/float64(numSigmas-1), math.Sqrt2-1)
	}
	sigmaHat := sigma * float32(gamma+1)
	if gamma <= 0 {
		return sigmaHat, sample
	}
	noise := noiseLike(gen, shape)
	c := sqrt32(sq32(sigmaHat) - sq32(sigma))
	ns := float32(sNoise)
	moved := make([]float32, len(sample))
	for i := range sample {
		moved[i] = sample[i] + float32(float32(noise[i]*ns)*c)
	}
	return sigmaHat, moved
}

// noiseLike draws randn_tensor(shape) from gen, or from a fresh randomly
// seeded generator when gen is nil (diffusers would use torch's global RNG).
func noiseLike(gen *torchrand.Generator, shape []int) []float32 {
	if gen == nil {
		var seed [8]byte
		_, _ = rand.Read(seed[:])
		gen = torchrand.NewGenerator(binary.LittleEndian.Uint64(seed[:]))
	}
	return gen.Randn(shape...)
}

// variance noise: the provided tensor when the caller passes one.
func stepNoise(opts StepOptions, gen *torchrand.Generator, shape []int) ([]float32, error) {
	if opts.VarianceNoise != nil {
		if len(opts.VarianceNoise) != numel(shape) {
			return nil, fmt.Errorf("variance noise has %d elements, want %d", len(opts.VarianceNoise), numel(shape))
		}
		return opts.VarianceNoise, nil
	}
	return noiseLike(gen, shape), nil
}

func toF64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func toF32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func reversed64(x []float64) []float64 {
	out := slices.Clone(x)
	slices.Reverse(out)
	return out
}

func truncInts(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Trunc(v)
	}
	return out
}

func roundAll(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = roundEven(v)
	}
	return out
}

// f32Values rounds each element to float32 (np.astype(np.float32)).
func f32Values(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(float32(v))
	}
	return out
}

// isInt reports whether t is an integer value.
func isInt(t float64) bool { return t == math.Trunc(t) && !math.IsInf(t, 0) }
