package schedulers

// DPMSolverMultistepScheduler and DPMSolverMultistepInverseScheduler
// (Lu et al. 2022, "DPM-Solver" and "DPM-Solver++"), following diffusers'
// scheduling_dpmsolver_multistep.py and scheduling_dpmsolver_multistep_inverse.py.
// The solver formulas live in dpmFirstOrder/dpmSecondOrder/dpmThirdOrder and
// are shared with the singlestep and EDM variants.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

// dpmCommon is the state shared by the DPM-Solver family.
type dpmCommon struct {
	alphaSchedule
	trainSigmas []float32
	logSigmas   []float32
	lambdaT     []float32
	sigmas      []float32

	solverOrder      int
	prediction       string
	algorithm        string
	solverType       string
	lowerOrderFinal  bool
	eulerAtFinal     bool
	thresholding     bool
	threshRatio      float64
	sampleMax        float64
	varianceType     string
	sigmaKind        string // "", karras, exponential, beta, lu
	useFlowSigmas    bool
	flowShift        float64
	finalSigmasType  string
	lambdaMinClipped float64
	spacing          string
	stepsOffset      int
	dynamicShifting  bool
	timeShiftType    string
	bounds           sigmaBounds

	modelOutputs   [][]float32
	lowerOrderNums int
}

// readDPMCommon reads the DPM-Solver config fields. keys that a class does
// not have are simply absent from its defaults and read as zero values.
func readDPMCommon(r *cfgReader, rescale bool, allowed []string) dpmCommon {
	var d dpmCommon
	d.alphaSchedule = readAlphaSchedule(r, rescale, allowed...)
	if r.err != nil {
		return d
	}
	if rescale && r.bool("rescale_betas_zero_snr") {
		d.acp[len(d.acp)-1] = float32(math.Pow(2, -24))
	}
	d.trainSigmas = trainSigmasF32(d.acp)
	d.logSigmas = logF32(d.trainSigmas)
	d.lambdaT = make([]float32, len(d.acp))
	for i, a := range d.acp {
		d.lambdaT[i] = log32(sqrt32(a)) - log32(sqrt32(1-a))
	}
	d.solverOrder = 1
	if _, ok := r.cfg["solver_order"]; ok {
		d.solverOrder = r.int("solver_order")
	}
	d.prediction = r.str("prediction_type")
	d.thresholding = r.bool("thresholding")
	d.threshRatio = r.float("dynamic_thresholding_ratio")
	d.sampleMax = r.float("sample_max_value")
	has := func(k string) bool { _, ok := r.cfg[k]; return ok }
	if has("algorithm_type") {
		d.algorithm = r.str("algorithm_type")
	}
	if has("solver_type") {
		d.solverType = r.str("solver_type")
	}
	d.lowerOrderFinal = r.bool("lower_order_final")
	d.eulerAtFinal = r.bool("euler_at_final")
	if has("variance_type") {
		d.varianceType, _ = r.optStr("variance_type")
	}
	n := 0
	for _, k := range []string{"karras", "exponential", "beta", "lu"} {
		key := "use_" + k + "_sigmas"
		if k == "lu" {
			key = "use_lu_lambdas"
		}
		if has(key) && r.bool(key) {
			if k != "lu" {
				n++
			}
			if d.sigmaKind == "" {
				d.sigmaKind = k
			}
		}
	}
	if n > 1 {
		r.invalid("only one of use_beta_sigmas, use_exponential_sigmas, use_karras_sigmas can be used")
	}
	d.useFlowSigmas = r.bool("use_flow_sigmas")
	if has("flow_shift") {
		d.flowShift = r.float("flow_shift")
	}
	if has("final_sigmas_type") {
		d.finalSigmasType = r.str("final_sigmas_type")
	}
	if has("lambda_min_clipped") {
		d.lambdaMinClipped = r.float("lambda_min_clipped")
	} else {
		d.lambdaMinClipped = math.Inf(-1)
	}
	if has("timestep_spacing") {
		d.spacing = r.str("timestep_spacing")
	}
	if has("steps_offset") {
		d.stepsOffset = r.int("steps_offset")
	}
	d.dynamicShifting = r.bool("use_dynamic_shifting")
	if has("time_shift_type") {
		d.timeShiftType = r.str("time_shift_type")
	}
	d.bounds = readSigmaBounds(r)
	if d.solverOrder < 1 {
		r.invalid("solver_order %d must be at least 1", d.solverOrder)
	}
	return d
}

// clippedIndex is torch.searchsorted(flip(lambda_t), lambda_min_clipped).
func (d *dpmCommon) clippedIndex() int {
	// torch compares in float64: the Python float becomes a double tensor.
	n := 0
	for i := len(d.lambdaT) - 1; i >= 0; i-- {
		if float64(d.lambdaT[i]) < d.lambdaMinClipped {
			n++
		} else {
			break
		}
	}
	return n
}

// convertSigmas applies Karras/exponential/beta spacing to in (descending
// float64 sigmas) and returns the new sigmas with their fractional
// timesteps.
func (d *dpmCommon) convertSigmas(kind string, in []float64, n int) (sig, ts []float64) {
	lo, hi := d.bounds.of(in)
	sig = spacedSigmas(kind, lo, hi, n)
	ts = make([]float64, len(sig))
	for i, v := range sig {
		ts[i] = sigmaToT(v, d.logSigmas)
	}
	return sig, ts
}

// flowSigmas is the use_flow_sigmas schedule: 1 - linspace(1, 1/N, n+1),
// shifted, flipped, without its final zero.
// The DPM-Solver family (multistep and its inverse, single-step, DEIS,
// UniPC, SA-Solver) starts from unit-variance noise, feeds the sample to the
// model unscaled and exposes its sigma schedule as is.

func (d *dpmCommon) InitNoiseSigma() float64 { return 1 }

func (d *dpmCommon) ScaleModelInput(sample []float32, t float64) ([]float32, error) {
	return sample, nil
}

func (d *dpmCommon) Sigmas() []float64 { return toF64(d.sigmas) }

// scheduleSigmas turns n inference timesteps ts into sigmas by the
// config's sigma kind: Karras, exponential or beta spacing of src (the
// training sigmas in the order the class passes them to convertSigmas),
// flow-matching sigmas, or else the training sigmas interpolated at ts
// (interpolated true). It returns them with the timesteps they imply,
// Karras ones rounded when roundKarras; the final sigma is the caller's.
func (d *dpmCommon) scheduleSigmas(ts []float64, n int, src []float64, roundKarras bool) (sig, outTS []float64, interpolated bool) {
	switch {
	case d.sigmaKind == "karras":
		sig, ts = d.convertSigmas("karras", src, n)
		if roundKarras {
			ts = roundAll(ts)
		}
	case d.sigmaKind == "exponential" || d.sigmaKind == "beta":
		sig, ts = d.convertSigmas(d.sigmaKind, src, n)
	case d.useFlowSigmas:
		sig = flowSigmas(n, d.numTrain, d.flowShift)
		ts = make([]float64, len(sig))
		for i, v := range sig {
			ts[i] = v * float64(d.numTrain)
		}
	default:
		return interpSigmas(ts, d.trainSigmas), ts, true
	}
	return sig, ts, false
}

func flowSigmas(n, numTrain int, shift float64) []float64 {
	alphas := npLinspace(1, 1/float64(numTrain), n+1, true)
	s := make([]float64, len(alphas))
	for i, a := range alphas {
		x := 1.0 - a
		s[i] = shift * x / (1 + (shift-1)*x)
	}
	s = reversed64(s)
	return s[:len(s)-1]
}

// nPlusOneSpacing is the multistep solvers' timestep spacing: n+1 points,
// dropping the last.
func nPlusOneSpacing(spacing string, last, numTrain, n, stepsOffset int) ([]float64, error) {
	switch spacing {
	case "linspace":
		ts := reversed64(roundAll(npLinspace(0, float64(last-1), n+1, true)))
		return truncInts(ts[:len(ts)-1]), nil
	case "leading":
		ratio := last / (n + 1)
		ts := make([]float64, n)
		for i := 0; i < n; i++ {
			ts[i] = float64((n-i)*ratio + stepsOffset)
		}
		return ts, nil
	case "trailing":
		ratio := float64(numTrain) / float64(n)
		ts := truncInts(roundAll(npArange(float64(last), 0, -ratio)))
		for i := range ts {
			ts[i]--
		}
		return ts, nil
	}
	return nil, fmt.Errorf("timestep_spacing %q is not supported (want linspace, leading or trailing)", spacing)
}

// alphaSigmaT is _sigma_to_alpha_sigma_t.
func alphaSigmaT(sigma float32, flow bool) (float32, float32) {
	if flow {
		return 1 - sigma, sigma
	}
	a := 1 / sqrt32(sq32(sigma)+1)
	return a, sigma * a
}

func lambdaOf(alpha, sigma float32) float32 { return log32(alpha) - log32(sigma) }

// dataPrediction is the data-prediction branch of convert_model_output
// that the DPM-Solver family, DEIS and UniPC share: x0 from the model
// output at sigma for prediction_type epsilon, sample, v_prediction or
// flow_prediction, thresholded when the config asks for it.
func (d *dpmCommon) dataPrediction(class string, modelOutput, sample []float32, shape []int, sigma float32) ([]float32, error) {
	alpha, sigmaT := alphaSigmaT(sigma, d.useFlowSigmas)
	x0 := make([]float32, len(sample))
	switch d.prediction {
	case "epsilon":
		for i := range x0 {
			x0[i] = (sample[i] - float32(sigmaT*modelOutput[i])) / alpha
		}
	case "sample":
		copy(x0, modelOutput)
	case "v_prediction":
		for i := range x0 {
			x0[i] = float32(alpha*sample[i]) - float32(sigmaT*modelOutput[i])
		}
	case "flow_prediction":
		for i := range x0 {
			x0[i] = sample[i] - float32(sigma*modelOutput[i])
		}
	default:
		return nil, fmt.Errorf("%s: prediction_type %q is not supported", class, d.prediction)
	}
	if d.thresholding {
		x0 = thresholdSample(x0, shape, d.threshRatio, d.sampleMax)
	}
	return x0, nil
}

// convertModelOutputDPM is DPM-Solver's convert_model_output: the data
// prediction x0 for dpmsolver++ variants, the noise prediction otherwise.
func (d *dpmCommon) convertModelOutputDPM(class string, modelOutput, sample []float32, shape []int, sigma float32) ([]float32, error) {
	learned := d.varianceType == "learned" || d.varianceType == "learned_range"
	if d.algorithm == "dpmsolver++" || d.algorithm == "sde-dpmsolver++" {
		if learned && d.prediction == "epsilon" {
			modelOutput = firstChannels(modelOutput, shape, shape[1])
		}
		return d.dataPrediction(class, modelOutput, sample, shape, sigma)
	}
	alpha, sigmaT := alphaSigmaT(sigma, d.useFlowSigmas)
	n := len(sample)
	out := make([]float32, n)
	switch d.prediction {
	case "epsilon":
		if learned {
			modelOutput = firstChannels(modelOutput, shape, shape[1])
		}
		copy(out, modelOutput[:n])
	case "sample":
		for i := range out {
			out[i] = (sample[i] - float32(alpha*modelOutput[i])) / sigmaT
		}
	case "v_prediction":
		for i := range out {
			out[i] = float32(alpha*modelOutput[i]) + float32(sigmaT*sample[i])
		}
	default:
		return nil, fmt.Errorf("%s: prediction_type %q is not supported with algorithm_type %s", class, d.prediction, d.algorithm)
	}
	if d.thresholding {
		x0 := make([]float32, n)
		for i := range x0 {
			x0[i] = (sample[i] - float32(sigmaT*out[i])) / alpha
		}
		x0 = thresholdSample(x0, shape, d.threshRatio, d.sampleMax)
		for i := range out {
			out[i] = (sample[i] - float32(alpha*x0[i])) / sigmaT
		}
	}
	return out, nil
}

// lincomb returns sum_k c[k]*x[k] evaluated left to right with float32
// rounding after every product and sum; sign[k] = -1 subtracts the term.
func lincomb(n int, terms ...term) []float32 {
	out := make([]float32, n)
	for i := range out {
		var acc float32
		for k, t := range terms {
			v := float32(t.c * t.x[i])
			switch {
			case k == 0 && t.neg:
				acc = -v
			case k == 0:
				acc = v
			case t.neg:
				acc -= v
			default:
				acc += v
			}
		}
		out[i] = acc
	}
	return out
}

type term struct {
	c   float32
	x   []float32
	neg bool
}

func plus(c float32, x []float32) term  { return term{c: c, x: x} }
func minus(c float32, x []float32) term { return term{c: c, x: x, neg: true} }

// dpmStepCtx holds the sigmas of one solver update.
type dpmStepCtx struct {
	algorithm, solverType string
	flow                  bool
	edm                   bool // EDM: alpha_t = 1, sigma_t = sigma
}

func (c dpmStepCtx) alphaSigma(sigma float32) (float32, float32) {
	if c.edm {
		return 1, sigma
	}
	return alphaSigmaT(sigma, c.flow)
}

// dpmFirstOrder is dpm_solver_first_order_update from sigma_s to sigma_t.
func (c dpmStepCtx) firstOrder(sigmaT, sigmaS float32, m, sample, noise []float32) ([]float32, error) {
	alphaT, sT := c.alphaSigma(sigmaT)
	alphaS, sS := c.alphaSigma(sigmaS)
	h := lambdaOf(alphaT, sT) - lambdaOf(alphaS, sS)
	n := len(sample)
	switch c.algorithm {
	case "dpmsolver++":
		return lincomb(n, plus(sT/sS, sample), minus(alphaT*(exp32(-h)-1), m)), nil
	case "dpmsolver":
		return lincomb(n, plus(alphaT/alphaS, sample), minus(sT*(exp32(h)-1), m)), nil
	case "sde-dpmsolver++":
		e2 := exp32(-2 * h)
		return lincomb(n, plus(sT/sS*exp32(-h), sample), plus(alphaT*(1-e2), m), plus(sT*sqrt32(1-e2), noise)), nil
	case "sde-dpmsolver":
		return lincomb(n, plus(alphaT/alphaS, sample), minus(2*(sT*(exp32(h)-1)), m), plus(sT*sqrt32(exp32(2*h)-1), noise)), nil
	}
	return nil, fmt.Errorf("algorithm_type %q is not supported", c.algorithm)
}

// secondOrder is multistep_dpm_solver_second_order_update with m0 the
// latest model output (at sigmaS0) and m1 the previous one (at sigmaS1).
func (c dpmStepCtx) secondOrder(sigmaT, sigmaS0, sigmaS1 float32, m0, m1, sample, noise []float32) ([]float32, error) {
	alphaT, sT := c.alphaSigma(sigmaT)
	alphaS0, sS0 := c.alphaSigma(sigmaS0)
	alphaS1, sS1 := c.alphaSigma(sigmaS1)
	lT, lS0, lS1 := lambdaOf(alphaT, sT), lambdaOf(alphaS0, sS0), lambdaOf(alphaS1, sS1)
	h, h0 := lT-lS0, lS0-lS1
	r0 := h0 / h
	d1 := make([]float32, len(sample))
	inv := 1.0 / r0
	for i := range d1 {
		d1[i] = inv * (m0[i] - m1[i])
	}
	return c.secondCore(sigmaT, sigmaS0, h, m0, d1, sample, noise)
}

// secondCore is the second-order update from sigmaFrom to sigmaT given the
// step h in log-SNR and the finite differences D0, D1 (shared by the
// multistep and singlestep solvers).
func (c dpmStepCtx) secondCore(sigmaT, sigmaFrom, h float32, d0, d1, sample, noise []float32) ([]float32, error) {
	alphaT, sT := c.alphaSigma(sigmaT)
	alphaF, sF := c.alphaSigma(sigmaFrom)
	n := len(sample)
	switch c.algorithm {
	case "dpmsolver++":
		e := exp32(-h) - 1
		if c.solverType == "heun" {
			return lincomb(n, plus(sT/sF, sample), minus(alphaT*e, d0), plus(alphaT*(e/h+1), d1)), nil
		}
		return lincomb(n, plus(sT/sF, sample), minus(alphaT*e, d0), minus(0.5*(alphaT*e), d1)), nil
	case "dpmsolver":
		e := exp32(h) - 1
		if c.solverType == "heun" {
			return lincomb(n, plus(alphaT/alphaF, sample), minus(sT*e, d0), minus(sT*(e/h-1), d1)), nil
		}
		return lincomb(n, plus(alphaT/alphaF, sample), minus(sT*e, d0), minus(0.5*(sT*e), d1)), nil
	case "sde-dpmsolver++":
		e2 := 1 - exp32(-2*h)
		nz := plus(sT*sqrt32(1-exp32(-2*h)), noise)
		if c.solverType == "heun" {
			return lincomb(n, plus(sT/sF*exp32(-h), sample), plus(alphaT*e2, d0), plus(alphaT*(e2/(-2*h)+1), d1), nz), nil
		}
		return lincomb(n, plus(sT/sF*exp32(-h), sample), plus(alphaT*e2, d0), plus(0.5*(alphaT*e2), d1), nz), nil
	case "sde-dpmsolver":
		e := exp32(h) - 1
		nz := plus(sT*sqrt32(exp32(2*h)-1), noise)
		if c.solverType == "heun" {
			return lincomb(n, plus(alphaT/alphaF, sample), minus(2*(sT*e), d0), minus(2*(sT*(e/h-1)), d1), nz), nil
		}
		return lincomb(n, plus(alphaT/alphaF, sample), minus(2*(sT*e), d0), minus(sT*e, d1), nz), nil
	}
	return nil, fmt.Errorf("algorithm_type %q is not supported", c.algorithm)
}

// thirdOrder is multistep_dpm_solver_third_order_update.
func (c dpmStepCtx) thirdOrder(sigmaT, sigmaS0, sigmaS1, sigmaS2 float32, m0, m1, m2, sample, noise []float32) ([]float32, error) {
	alphaT, sT := c.alphaSigma(sigmaT)
	alphaS0, sS0 := c.alphaSigma(sigmaS0)
	alphaS1, sS1 := c.alphaSigma(sigmaS1)
	alphaS2, sS2 := c.alphaSigma(sigmaS2)
	lT, lS0, lS1, lS2 := lambdaOf(alphaT, sT), lambdaOf(alphaS0, sS0), lambdaOf(alphaS1, sS1), lambdaOf(alphaS2, sS2)
	h, h0, h1 := lT-lS0, lS0-lS1, lS1-lS2
	r0, r1 := h0/h, h1/h
	n := len(sample)
	d10, d11, d1, d2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	inv0, inv1 := 1.0/r0, 1.0/r1
	cD1 := r0 / (r0 + r1)
	cD2 := 1.0 / (r0 + r1)
	for i := 0; i < n; i++ {
		d10[i] = inv0 * (m0[i] - m1[i])
		d11[i] = inv1 * (m1[i] - m2[i])
		diff := d10[i] - d11[i]
		d1[i] = d10[i] + float32(cD1*diff)
		d2[i] = cD2 * diff
	}
	d0 := m0
	switch c.algorithm {
	case "dpmsolver++":
		e := exp32(-h) - 1
		return lincomb(n, plus(sT/sS0, sample), minus(alphaT*e, d0), plus(alphaT*(e/h+1), d1),
			minus(alphaT*((e+h)/sq32(h)-0.5), d2)), nil
	case "dpmsolver":
		e := exp32(h) - 1
		return lincomb(n, plus(alphaT/alphaS0, sample), minus(sT*e, d0), minus(sT*(e/h-1), d1),
			minus(sT*((e-h)/sq32(h)-0.5), d2)), nil
	case "sde-dpmsolver++":
		if noise == nil {
			return nil, fmt.Errorf("third-order sde-dpmsolver++ update needs noise")
		}
		e2 := 1 - exp32(-2*h)
		return lincomb(n, plus(sT/sS0*exp32(-h), sample), plus(alphaT*e2, d0), plus(alphaT*(e2/(-2*h)+1), d1),
			plus(alphaT*((e2-2*h)/sq32(2*h)-0.5), d2), plus(sT*sqrt32(1-exp32(-2*h)), noise)), nil
	}
	return nil, fmt.Errorf("third-order update is not implemented for algorithm_type %q", c.algorithm)
}

// ---- DPMSolverMultistepScheduler ---------------------------------------------

type dpmMultistep struct {
	base
	dpmCommon
	inverse          bool
	noisiestTimestep int
}

func newDPMMultistep(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &dpmMultistep{base: newBase(class, cfg), inverse: class == "DPMSolverMultistepInverseScheduler"}
	allowed := []string{"linear", "scaled_linear", "squaredcos_cap_v2"}
	s.dpmCommon = readDPMCommon(r, !s.inverse, allowed)
	if r.err != nil {
		return nil, r.err
	}
	switch s.algorithm {
	case "dpmsolver", "dpmsolver++", "sde-dpmsolver", "sde-dpmsolver++":
	case "deis":
		s.algorithm = "dpmsolver++"
		s.cfg["algorithm_type"] = s.algorithm
	default:
		r.unsupported("algorithm_type %q", s.algorithm)
	}
	switch s.solverType {
	case "midpoint", "heun":
	case "logrho", "bh1", "bh2":
		s.solverType = "midpoint"
		s.cfg["solver_type"] = s.solverType
	default:
		r.unsupported("solver_type %q", s.solverType)
	}
	if !s.inverse && s.algorithm != "dpmsolver++" && s.algorithm != "sde-dpmsolver++" && s.finalSigmasType == "zero" {
		r.invalid("final_sigmas_type zero is not supported for algorithm_type %s; use sigma_min", s.algorithm)
	}
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction", "flow_prediction")
	if r.err != nil {
		return nil, r.err
	}
	n := s.numTrain
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		if s.inverse {
			s.timesteps[i] = float64(i)
		} else {
			s.timesteps[i] = float64(n - 1 - i)
		}
	}
	s.sigmas = slices.Clone(s.trainSigmas)
	s.modelOutputs = make([][]float32, s.solverOrder)
	return s, nil
}

func (s *dpmMultistep) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// SetTimestepsWith accepts a step count, custom timesteps (not for the
// inverse scheduler) and mu for dynamic shifting.
func (s *dpmMultistep) SetTimestepsWith(o TimestepOptions) error {
	if o.Sigmas != nil {
		return fmt.Errorf("%s: custom sigmas are not supported", s.class)
	}
	if s.inverse {
		if o.Timesteps != nil || o.Mu != nil {
			return fmt.Errorf("%s: only num_inference_steps is supported", s.class)
		}
		return s.setInverse(o.NumInferenceSteps)
	}
	if o.Mu != nil {
		if !s.dynamicShifting || s.timeShiftType != "exponential" {
			return fmt.Errorf("%s: mu needs use_dynamic_shifting with time_shift_type exponential", s.class)
		}
		s.flowShift = math.Exp(*o.Mu)
		s.cfg["flow_shift"] = s.flowShift
	}
	if (o.NumInferenceSteps == 0) == (o.Timesteps == nil) {
		return fmt.Errorf("%s: pass exactly one of num_inference_steps or custom timesteps", s.class)
	}
	if o.Timesteps != nil && s.sigmaKind != "" {
		return fmt.Errorf("%s: custom timesteps cannot be used with use_%s_sigmas", s.class, s.sigmaKind)
	}
	n := o.NumInferenceSteps
	var ts []float64
	if o.Timesteps != nil {
		ts = truncInts(o.Timesteps)
		n = len(ts)
	} else {
		if n < 1 {
			return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
		}
		last := s.numTrain - s.clippedIndex()
		var err error
		if ts, err = nPlusOneSpacing(s.spacing, last, s.numTrain, n, s.stepsOffset); err != nil {
			return fmt.Errorf("%s: %w", s.class, err)
		}
	}
	var sig []float64
	cos := func() bool { v, _ := s.cfg["beta_schedule"].(string); return v == "squaredcos_cap_v2" }
	if s.sigmaKind == "lu" {
		lambdas := make([]float64, len(s.logSigmas))
		for i := range lambdas {
			lambdas[i] = float64(s.logSigmas[len(s.logSigmas)-1-i])
		}
		lmin, lmax := lambdas[len(lambdas)-1], lambdas[0]
		ramp := npLinspace(0, 1, n, true)
		sig = make([]float64, n)
		ts = make([]float64, n)
		for i, rr := range ramp {
			l := math.Pow(lmax+rr*(lmin-lmax), 1)
			sig[i] = math.Exp(l)
			ts[i] = sigmaToT(sig[i], s.logSigmas)
		}
		if !cos() {
			ts = roundAll(ts)
		}
	} else {
		sig, ts, _ = s.scheduleSigmas(ts, n, reversed64(toF64(s.trainSigmas)), !cos())
	}
	var last float32
	switch s.finalSigmasType {
	case "sigma_min":
		last = sqrt32((1 - s.acp[0]) / s.acp[0])
	case "zero":
	default:
		return fmt.Errorf("%s: final_sigmas_type %q is not supported (want zero or sigma_min)", s.class, s.finalSigmasType)
	}
	s.sigmas = append(toF32(sig), last)
	s.timesteps = truncInts(ts)
	s.numInfer = len(ts)
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.lowerOrderNums = 0
	s.resetIndices()
	return nil
}

func (s *dpmMultistep) setInverse(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	s.noisiestTimestep = s.numTrain - 1 - s.clippedIndex()
	N := s.numTrain
	var ts []float64
	switch s.spacing {
	case "linspace":
		l := roundAll(npLinspace(0, float64(s.noisiestTimestep), n+1, true))
		ts = truncInts(l[:len(l)-1])
	case "leading":
		ratio := (s.noisiestTimestep + 1) / (n + 1)
		ts = make([]float64, n)
		for i := range ts {
			ts[i] = float64(i*ratio + s.stepsOffset)
		}
	case "trailing":
		ratio := float64(N) / float64(n)
		ts = truncInts(reversed64(roundAll(npArange(float64(s.noisiestTimestep+1), 0, -ratio))))
		for i := range ts {
			ts[i]--
		}
	default:
		return fmt.Errorf("%s: timestep_spacing %q is not supported", s.class, s.spacing)
	}
	sig, ts, interpolated := s.scheduleSigmas(ts, n, toF64(s.trainSigmas), true)
	if interpolated {
		a := s.acp[s.noisiestTimestep]
		sig = append(sig, float64(sqrt32((1-a)/a)))
	} else {
		sig = append(sig, sig[len(sig)-1])
	}
	s.sigmas = toF32(sig)
	// np.unique(return_index) then sort the indices: drop repeats, keep order.
	seen := map[float64]bool{}
	var uniq []float64
	for _, t := range ts {
		if !seen[t] {
			seen[t] = true
			uniq = append(uniq, t)
		}
	}
	s.timesteps = truncInts(uniq)
	s.numInfer = len(s.timesteps)
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.lowerOrderNums = 0
	s.stepIndex = -1
	return nil
}

func (s *dpmMultistep) ctx() dpmStepCtx {
	return dpmStepCtx{algorithm: s.algorithm, solverType: s.solverType, flow: s.useFlowSigmas}
}

func (s *dpmMultistep) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
	return s.StepWithOptions(modelOutput, t, sample, shape, gen, StepOptions{})
}

func (s *dpmMultistep) StepWithOptions(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator, opts StepOptions) ([]float32, error) {
	if err := checkShapes(s.class, shape, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if s.inverse {
		if s.stepIndex < 0 {
			s.stepIndex = indexForTimestepOrLast(s.timesteps, t)
		}
	} else if err := s.initStepIndex(t, true); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	nT := len(s.timesteps)
	lowerFinal := i == nT-1 && (s.eulerAtFinal || (s.lowerOrderFinal && nT < 15) || (!s.inverse && s.finalSigmasType == "zero"))
	lowerSecond := i == nT-2 && s.lowerOrderFinal && nT < 15
	m, err := s.convertModelOutputDPM(s.class, modelOutput, sample, shape, s.sigmas[i])
	if err != nil {
		return nil, err
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	s.modelOutputs[len(s.modelOutputs)-1] = m
	var noise []float32
	if s.algorithm == "sde-dpmsolver" || s.algorithm == "sde-dpmsolver++" {
		if noise, err = stepNoise(opts, gen, shape); err != nil {
			return nil, fmt.Errorf("%s: %w", s.class, err)
		}
	}
	c := s.ctx()
	mo := s.modelOutputs
	k := len(mo)
	var prev []float32
	switch {
	case s.solverOrder == 1 || s.lowerOrderNums < 1 || lowerFinal:
		prev, err = c.firstOrder(s.sigmas[i+1], s.sigmas[i], m, sample, noise)
	case s.solverOrder == 2 || s.lowerOrderNums < 2 || lowerSecond:
		if err = historyErr(s.class, i, 1); err != nil {
			return nil, err
		}
		prev, err = c.secondOrder(s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1], mo[k-1], mo[k-2], sample, noise)
	default:
		nz := noise
		if s.inverse {
			nz = nil // the inverse scheduler passes no noise to its third-order update
		}
		if err = historyErr(s.class, i, 2); err != nil {
			return nil, err
		}
		prev, err = c.thirdOrder(s.sigmas[i+1], s.sigmas[i], s.sigmas[i-1], s.sigmas[i-2], mo[k-1], mo[k-2], mo[k-3], sample, nz)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.class, err)
	}
	if s.lowerOrderNums < s.solverOrder {
		s.lowerOrderNums++
	}
	s.stepIndex++
	return prev, nil
}

func (s *dpmMultistep) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	var idx int
	if s.inverse {
		idx = indexForTimestepOrLast(s.timesteps, t)
	} else {
		var err error
		if idx, err = s.noiseStepIndex(t, true); err != nil {
			return nil, err
		}
	}
	return addNoiseAlphaSigma(original, noise, s.sigmas[idx], s.useFlowSigmas), nil
}

// addNoiseAlphaSigma is alpha_t * x + sigma_t * noise for a sigma.
func addNoiseAlphaSigma(original, noise []float32, sigma float32, flow bool) []float32 {
	a, sg := alphaSigmaT(sigma, flow)
	out := make([]float32, len(original))
	for i := range out {
		out[i] = float32(a*original[i]) + float32(sg*noise[i])
	}
	return out
}
