package schedulers

// IPNDMScheduler (improved pseudo numerical methods, Zhang & Chen 2022),
// UnCLIPScheduler (Ramesh et al. 2022 / karlo), ScoreSdeVeScheduler (Song et
// al. 2021, variance-exploding SDE predictor-corrector) and
// FlowMapEulerDiscreteScheduler (any-step flow maps), following diffusers'
// scheduling_ipndm.py, scheduling_unclip.py, scheduling_sde_ve.py and
// scheduling_flow_map_euler_discrete.py.

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/torchrand"
)

// ---- IPNDM ---------------------------------------------------------------------

type ipndm struct {
	base
	numTrain     int
	trainedBetas []float64
	betas        []float32
	alphas       []float32
	ets          [][]float32
}

func newIPNDM(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &ipndm{base: newBase(class, cfg)}
	s.numTrain = r.int("num_train_timesteps")
	s.trainedBetas, _ = r.floats("trained_betas")
	if r.err != nil {
		return nil, r.err
	}
	if err := s.SetTimesteps(s.numTrain); err != nil {
		return nil, err
	}
	s.numInfer = s.numTrain
	return s, nil
}

func (s *ipndm) InitNoiseSigma() float64 { return 1 }

func (s *ipndm) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *ipndm) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	steps := torchLinspaceF32(1, 0, n+1)[:n]
	steps = append(steps, 0)
	if s.trainedBetas != nil {
		if len(s.trainedBetas) != n+1 {
			return fmt.Errorf("%s: trained_betas has %d entries, want num_inference_steps+1 = %d", s.class, len(s.trainedBetas), n+1)
		}
		s.betas = toF32(s.trainedBetas)
	} else {
		s.betas = make([]float32, len(steps))
		for i, v := range steps {
			x := float32(v*float32(math.Pi)) / 2
			s.betas[i] = sq32(float32(math.Sin(float64(x))))
		}
	}
	s.alphas = make([]float32, len(s.betas))
	s.timesteps = make([]float64, len(s.betas)-1)
	for i, b := range s.betas {
		s.alphas[i] = sqrt32(1 - sq32(b))
	}
	for i := range s.timesteps {
		a := float32(math.Atan2(float64(s.betas[i]), float64(s.alphas[i])))
		s.timesteps[i] = float64(a / float32(math.Pi) * 2)
	}
	s.numInfer = n
	s.ets = nil
	s.resetIndices()
	return nil
}

func (s *ipndm) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if err := s.initStepIndex(t, false); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.betas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	n := len(sample)
	e := make([]float32, n)
	for j := range e {
		e[j] = float32(sample[j]*s.betas[i]) + float32(modelOutput[j]*s.alphas[i])
	}
	s.ets = append(s.ets, e)
	ets := combineETS(s.ets)
	alpha, sigma := s.alphas[i], s.betas[i]
	nextAlpha, nextSigma := s.alphas[i+1], s.betas[i+1]
	den := max(alpha, float32(1e-08))
	out := make([]float32, n)
	for j := range out {
		pred := (sample[j] - float32(sigma*ets[j])) / den
		out[j] = float32(nextAlpha*pred) + float32(ets[j]*nextSigma)
	}
	s.stepIndex++
	return out, nil
}

// combineETS is the Adams-Bashforth combination of the last (up to four)
// residuals used by PNDM and IPNDM.
func combineETS(e [][]float32) []float32 {
	k := len(e)
	n := len(e[k-1])
	out := make([]float32, n)
	switch k {
	case 1:
		copy(out, e[0])
	case 2:
		for i := range out {
			out[i] = (float32(3*e[1][i]) - e[0][i]) / 2
		}
	case 3:
		for i := range out {
			out[i] = (float32(float32(23*e[2][i])-float32(16*e[1][i])) + float32(5*e[0][i])) / 12
		}
	default:
		c := float32(1.0 / 24)
		for i := range out {
			v := float32(55*e[k-1][i]) - float32(59*e[k-2][i])
			v += float32(37 * e[k-3][i])
			v -= float32(9 * e[k-4][i])
			out[i] = c * v
		}
	}
	return out
}

func (s *ipndm) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return nil, fmt.Errorf("%s has no add_noise", s.class)
}

// ---- UnCLIP ----------------------------------------------------------------------

type unclip struct {
	base
	alphaSchedule
	alphas       []float32
	varianceType string
	clipSample   bool
	clipRange    float64
	prediction   string
}

func newUnCLIP(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &unclip{base: newBase(class, cfg)}
	n := r.int("num_train_timesteps")
	s.varianceType = r.str("variance_type")
	r.oneOf("variance_type", s.varianceType, "fixed_small_log", "learned_range")
	s.clipSample = r.bool("clip_sample")
	s.clipRange = r.float("clip_sample_range")
	s.prediction = r.str("prediction_type")
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample")
	bs := r.str("beta_schedule")
	r.oneOf("beta_schedule", bs, "squaredcos_cap_v2")
	if r.err != nil {
		return nil, r.err
	}
	if n < 1 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 1", class, n)
	}
	s.betas = betasForAlphaBar(n, "cosine")
	s.alphas = make([]float32, n)
	for i, b := range s.betas {
		s.alphas[i] = 1 - b
	}
	s.acp = torchCumprodF32(s.alphas)
	s.numTrain = n
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = float64(n - 1 - i)
	}
	return s, nil
}

func (s *unclip) InitNoiseSigma() float64 { return 1 }

func (s *unclip) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *unclip) SetTimesteps(n int) error {
	if n < 2 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 2", s.class, n)
	}
	ratio := float64(s.numTrain-1) / float64(n-1)
	s.timesteps = make([]float64, n)
	for i := 0; i < n; i++ {
		s.timesteps[n-1-i] = roundEven(float64(i) * ratio)
	}
	s.numInfer = n
	return nil
}

type unclipTerms struct {
	a, ap, b, bp, beta, alpha float32
}

func (s *unclip) terms(t, prev int) unclipTerms {
	var u unclipTerms
	u.a = s.acp[t]
	u.ap = 1
	if prev >= 0 {
		u.ap = s.acp[prev]
	}
	u.b, u.bp = 1-u.a, 1-u.ap
	if prev == t-1 {
		u.beta, u.alpha = s.betas[t], s.alphas[t]
	} else {
		u.beta = 1 - u.a/u.ap
		u.alpha = 1 - u.beta
	}
	return u
}

// variance is _get_variance for one predicted-variance value.
func (s *unclip) variance(t, prev int, pv float32) float32 {
	u := s.terms(t, prev)
	v := u.bp / u.b * u.beta
	if s.varianceType == "learned_range" {
		minLog, maxLog := log32(v), log32(u.beta)
		frac := (pv + 1) / 2
		return float32(frac*maxLog) + float32((1-frac)*minLog)
	}
	return exp32(0.5 * log32(max(v, float32(1e-20))))
}

// Variance implements VarianceCalculator: args are (t[, prev_timestep]).
func (s *unclip) Variance(args []float64, pv *float64) (float64, error) {
	if len(args) == 0 || len(args) > 2 {
		return 0, fmt.Errorf("%s: _get_variance takes (t[, prev_timestep]), got %d arguments", s.class, len(args))
	}
	t := int(args[0])
	prev := t - 1
	if len(args) == 2 {
		prev = int(args[1])
	}
	if t < 0 || t >= s.numTrain || prev >= s.numTrain {
		return 0, fmt.Errorf("%s: timestep %d outside [0, %d)", s.class, t, s.numTrain)
	}
	if s.varianceType == "learned_range" {
		if pv == nil {
			return 0, fmt.Errorf("%s: learned_range needs a predicted variance", s.class)
		}
		u := s.terms(t, prev)
		v := u.bp / u.b * u.beta
		frac := (*pv + 1) / 2
		minLog, maxLog := log32(v), log32(u.beta)
		return float64(float32(float32(frac)*maxLog) + float32(float32(1-frac)*minLog)), nil
	}
	return float64(s.variance(t, prev, 0)), nil
}

func (s *unclip) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

// StepWithOptions honours opts.PrevTimestep (UnCLIP's prev_timestep, for
// schedules that skip training timesteps).
func (s *unclip) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, sample); err != nil {
		return nil, err
	}
	if !isInt(t) || t < 0 || int(t) >= s.numTrain {
		return nil, fmt.Errorf("%s: timestep %v outside [0, %d)", s.class, t, s.numTrain)
	}
	ti := int(t)
	var predVar []float32
	if s.varianceType == "learned_range" && len(modelOutput) == 2*len(sample) {
		var err error
		if modelOutput, predVar, err = splitLearnedVariance(s.class, modelOutput, shape); err != nil {
			return nil, err
		}
	}
	if len(modelOutput) != len(sample) {
		return nil, fmt.Errorf("%s: model output has %d elements, want %d", s.class, len(modelOutput), len(sample))
	}
	prev := ti - 1
	if opts.PrevTimestep != nil {
		prev = int(*opts.PrevTimestep)
	}
	if prev >= s.numTrain {
		return nil, fmt.Errorf("%s: previous timestep %d outside [0, %d)", s.class, prev, s.numTrain)
	}
	u := s.terms(ti, prev)
	x0 := make([]float32, len(sample))
	switch s.prediction {
	case "epsilon":
		sa, sb := sqrt32(u.a), sqrt32(u.b)
		for j := range x0 {
			x0[j] = (sample[j] - float32(sb*modelOutput[j])) / sa
		}
	case "sample":
		copy(x0, modelOutput)
	}
	if s.clipSample {
		x0 = clampF32(x0, s.clipRange)
	}
	x0c := sqrt32(u.ap) * u.beta / u.b
	cur := sqrt32(u.alpha) * u.bp / u.b
	out := make([]float32, len(sample))
	for j := range out {
		out[j] = float32(x0c*x0[j]) + float32(cur*sample[j])
	}
	if ti > 0 {
		noise := noiseLike(gen, shape)
		if s.varianceType == "learned_range" {
			if predVar == nil {
				return nil, fmt.Errorf("%s: learned_range needs a model output with twice the sample's channels", s.class)
			}
			for j := range out {
				v := exp32(0.5 * s.variance(ti, prev, predVar[j]))
				out[j] += float32(v * noise[j])
			}
		} else {
			v := s.variance(ti, prev, 0)
			for j := range out {
				out[j] += float32(v * noise[j])
			}
		}
	}
	return out, nil
}

func (s *unclip) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}

// ---- ScoreSdeVe -----------------------------------------------------------------

type scoreSdeVe struct {
	base
	numTrain       int
	snr            float64
	sigmaMin       float64
	sigmaMax       float64
	samplingEps    float64
	correctSteps   int
	sigmas         []float32
	discreteSigmas []float32
}

func newScoreSdeVe(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &scoreSdeVe{base: newBase(class, cfg)}
	s.numTrain = r.int("num_train_timesteps")
	s.snr = r.float("snr")
	s.sigmaMin = r.float("sigma_min")
	s.sigmaMax = r.float("sigma_max")
	s.samplingEps = r.float("sampling_eps")
	s.correctSteps = r.int("correct_steps")
	if r.err != nil {
		return nil, r.err
	}
	if s.numTrain < 1 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 1", class, s.numTrain)
	}
	s.timesteps = nil
	s.SetSigmas(s.numTrain)
	return s, nil
}

func (s *scoreSdeVe) InitNoiseSigma() float64 { return s.sigmaMax }

func (s *scoreSdeVe) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	return sample, nil
}

// CorrectSteps is the config's correct_steps (corrector steps per step).
func (s *scoreSdeVe) CorrectSteps() int { return s.correctSteps }

// Sigmas returns the continuous sigmas (set by SetSigmas from the timesteps
// current at that time, as in diffusers).
func (s *scoreSdeVe) Sigmas() []float64 { return toF64(s.sigmas) }

// SetTimesteps sets the continuous timesteps linspace(1, sampling_eps, n).
func (s *scoreSdeVe) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	s.timesteps = toF64(torchLinspaceF32(1, s.samplingEps, n))
	s.numInfer = n
	return nil
}

// SetSigmas is set_sigmas(n): discrete sigmas for n steps, and the
// continuous sigmas of the current timesteps (set first when unset).
func (s *scoreSdeVe) SetSigmas(n int) {
	if s.timesteps == nil {
		_ = s.SetTimesteps(n)
	}
	ratio := float32(s.sigmaMax / s.sigmaMin)
	mn := float32(s.sigmaMin)
	s.sigmas = make([]float32, len(s.timesteps))
	for i, t := range s.timesteps {
		s.sigmas[i] = mn * pow32(ratio, float32(t))
	}
	l := torchLinspaceF32(math.Log(s.sigmaMin), math.Log(s.sigmaMax), n)
	s.discreteSigmas = make([]float32, n)
	for i, v := range l {
		s.discreteSigmas[i] = exp32(v)
	}
}

// Step is step_pred, the reverse-diffusion predictor.
func (s *scoreSdeVe) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.timesteps == nil {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	idx := int(float32(t) * float32(len(s.timesteps)-1))
	if idx < 0 || idx >= len(s.discreteSigmas) {
		return nil, fmt.Errorf("%s: timestep %v maps to discrete sigma %d outside [0, %d)", s.class, t, idx, len(s.discreteSigmas))
	}
	sigma := s.discreteSigmas[idx]
	var adj float32
	if idx != 0 {
		adj = s.discreteSigmas[idx-1]
	}
	diffusion := sqrt32(sq32(sigma) - sq32(adj))
	d2 := sq32(diffusion)
	noise := noiseLike(gen, shape)
	out := make([]float32, len(sample))
	for j := range out {
		drift := 0 - float32(d2*modelOutput[j])
		mean := sample[j] - drift
		out[j] = mean + float32(diffusion*noise[j])
	}
	return out, nil
}

// StepCorrect is step_correct, the Langevin corrector.
func (s *scoreSdeVe) StepCorrect(modelOutput, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	noise := noiseLike(gen, shape)
	gradNorm := meanRowNorm(modelOutput, shape[0])
	noiseNorm := meanRowNorm(noise, shape[0])
	stepSize := sq32(float32(s.snr)*noiseNorm/gradNorm) * 2
	c := sqrt32(stepSize * 2)
	out := make([]float32, len(sample))
	for j := range out {
		mean := sample[j] + float32(stepSize*modelOutput[j])
		out[j] = mean + float32(c*noise[j])
	}
	return out, nil
}

// meanRowNorm is torch.norm(x.reshape(b, -1), dim=-1).mean() with torch's
// CPU order: 8 float32 lanes of squares, a horizontal sum, then the tail.
func meanRowNorm(x []float32, b int) float32 {
	per := len(x) / b
	norms := make([]float32, b)
	for r := 0; r < b; r++ {
		row := x[r*per : (r+1)*per]
		var lanes [8]float32
		d := 0
		for ; d+8 <= per; d += 8 {
			for l := 0; l < 8; l++ {
				lanes[l] += float32(row[d+l] * row[d+l])
			}
		}
		acc := lanes[0]
		for l := 1; l < 8; l++ {
			acc += lanes[l]
		}
		for ; d < per; d++ {
			acc += float32(row[d] * row[d])
		}
		norms[r] = sqrt32(acc)
	}
	var sum float32
	for _, v := range norms {
		sum += v
	}
	return sum / float32(b)
}

func (s *scoreSdeVe) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	if !isInt(t) || t < 0 || int(t) >= len(s.discreteSigmas) {
		return nil, fmt.Errorf("%s: add_noise timestep %v is not an index into %d discrete sigmas", s.class, t, len(s.discreteSigmas))
	}
	sg := s.discreteSigmas[int(t)]
	out := make([]float32, len(original))
	for j := range out {
		out[j] = float32(noise[j]*sg) + original[j]
	}
	return out, nil
}

// ---- FlowMapEuler ------------------------------------------------------------

type flowMap struct {
	base
	numTrain int
	shift    float64
	sigmas   []float64
}

func newFlowMap(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &flowMap{base: newBase(class, cfg)}
	s.numTrain = r.int("num_train_timesteps")
	s.shift = r.float("shift")
	if r.err != nil {
		return nil, r.err
	}
	if s.numTrain < 1 {
		return nil, fmt.Errorf("%s config: num_train_timesteps %d must be at least 1", class, s.numTrain)
	}
	if err := s.SetTimesteps(s.numTrain); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *flowMap) InitNoiseSigma() float64 { return 1 }

func (s *flowMap) ScaleModelInput(sample []float32, t float64) ([]float32, error) { return sample, nil }

func (s *flowMap) Sigmas() []float64 { return append([]float64(nil), s.sigmas...) }

// applyShift is shift*s/(1 + (shift-1)*s) (identity for shift 1).
func (s *flowMap) applyShift(x []float64) []float64 {
	if s.shift == 1 {
		return x
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = s.shift * v / (1 + (s.shift-1)*v)
	}
	return out
}

func (s *flowMap) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count, custom sigmas or custom timesteps
// (float64 throughout, as on the CPU in diffusers).
func (s *flowMap) SetTimestepsWith(o TimestepOptions) error {
	if o.Mu != nil {
		return fmt.Errorf("%s: mu is not supported", s.class)
	}
	if o.Sigmas != nil && o.Timesteps != nil && len(o.Sigmas) != len(o.Timesteps) {
		return fmt.Errorf("%s: custom sigmas and timesteps must have the same length", s.class)
	}
	n := o.NumInferenceSteps
	switch {
	case n != 0:
		if (o.Sigmas != nil && len(o.Sigmas) != n) || (o.Timesteps != nil && len(o.Timesteps) != n) {
			return fmt.Errorf("%s: custom sigmas/timesteps must have num_inference_steps (%d) entries", s.class, n)
		}
	case o.Sigmas != nil:
		n = len(o.Sigmas)
	case o.Timesteps != nil:
		n = len(o.Timesteps)
	default:
		return fmt.Errorf("%s: num_inference_steps must be given when there are no custom sigmas or timesteps", s.class)
	}
	if n < 1 {
		return fmt.Errorf("%s: need at least one inference step", s.class)
	}
	var w []float64
	switch {
	case o.Sigmas != nil:
		w = append([]float64(nil), o.Sigmas...)
	case o.Timesteps != nil:
		w = make([]float64, n)
		for i, t := range o.Timesteps {
			w[i] = t / float64(s.numTrain)
		}
	default:
		w = torchLinspaceF64(1, 0, n+1)[:n]
	}
	w = s.applyShift(w)
	s.sigmas = append(w, 0)
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = s.sigmas[i] * float64(s.numTrain)
	}
	s.numInfer = n
	s.resetIndices()
	return nil
}

// indexFor is index_for_timestep: the nearest schedule timestep within 1e-3.
func (s *flowMap) indexFor(t float64) int {
	best, bestD := -1, math.Inf(1)
	for i, v := range s.timesteps {
		d := math.Abs(float64(float32(v) - float32(t)))
		if d < bestD {
			best, bestD = i, d
		}
	}
	if best < 0 || bestD > 0.001 {
		return -1
	}
	return best
}

func (s *flowMap) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	return s.StepTo(modelOutput, t, math.NaN(), sample, shape)
}

// StepTo is step(model_output, t, sample, r_timestep=r): a flow-map jump
// from t to r (r = NaN means the next schedule timestep).
func (s *flowMap) StepTo(modelOutput []float32, t, r float64, sample []float32, shape []int) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.stepIndex < 0 {
		if s.beginIndex >= 0 {
			s.stepIndex = s.beginIndex
		} else if i := s.indexFor(t); i >= 0 {
			s.stepIndex = i
		} else {
			s.stepIndex = 0
		}
	}
	var sigmaT, sigmaR float64
	ti := s.indexFor(t)
	if ti >= 0 {
		sigmaT = s.sigmas[ti]
	} else {
		sigmaT = t / float64(s.numTrain)
	}
	if math.IsNaN(r) {
		if ti < 0 {
			return nil, fmt.Errorf("%s: timestep %v is not on the schedule; give an explicit r timestep", s.class, t)
		}
		sigmaR = s.sigmas[ti+1]
	} else if ri := s.indexFor(r); ri >= 0 {
		sigmaR = s.sigmas[ri]
	} else {
		sigmaR = r / float64(s.numTrain)
	}
	d := sigmaT - sigmaR
	out := make([]float32, len(sample))
	for j := range out {
		out[j] = float32(float64(sample[j]) - float64(d*float64(modelOutput[j])))
	}
	s.stepIndex++
	return out, nil
}

// AddNoise is scale_noise: t/N * noise + (1 - t/N) * sample in float32.
func (s *flowMap) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	tt := float32(t) / float32(s.numTrain)
	out := make([]float32, len(original))
	for j := range out {
		out[j] = float32(tt*noise[j]) + float32((1-tt)*original[j])
	}
	return out, nil
}
