package schedulers

// UniPCMultistepScheduler (Zhao et al. 2023, "UniPC: A Unified
// Predictor-Corrector Framework"), following diffusers'
// scheduling_unipc_multistep.py, including flow sigmas (Wan, HunyuanVideo)
// with dynamic shifting and shift_terminal.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type unipc struct {
	base
	dpmCommon
	predictX0        bool
	disableCorrector []int
	shiftTerminal    *float64
	lastSample       []float32
	thisOrder        int
}

func newUniPC(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &unipc{base: newBase(class, cfg)}
	s.dpmCommon = readDPMCommon(r, true, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	if r.err != nil {
		return nil, r.err
	}
	s.predictX0 = r.bool("predict_x0")
	s.disableCorrector = r.ints("disable_corrector")
	if v, ok := r.optFloat("shift_terminal"); ok {
		s.shiftTerminal = &v
	}
	if s.shiftTerminal != nil && !s.useFlowSigmas {
		r.invalid("shift_terminal is only supported with use_flow_sigmas")
	}
	if v, ok := cfg["solver_p"]; ok && v != nil {
		r.unsupported("solver_p (a scheduler object) in a config")
	}
	switch s.solverType {
	case "bh1", "bh2":
	case "midpoint", "heun", "logrho":
		s.solverType = "bh2"
		s.cfg["solver_type"] = s.solverType
	default:
		r.unsupported("solver_type %q", s.solverType)
	}
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction", "flow_prediction")
	if r.err != nil {
		return nil, r.err
	}
	n := s.numTrain
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = float64(n - 1 - i)
	}
	s.sigmas = slices.Clone(s.trainSigmas)
	s.modelOutputs = make([][]float32, s.solverOrder)
	return s, nil
}

func (s *unipc) SetTimesteps(n int) error {
	return s.SetTimestepsWith(TimestepOptions{NumInferenceSteps: n})
}

// timeShift is time_shift(mu, 1.0, t) for the flow sigmas.
func timeShift(kind string, mu, sigma float64, t []float64) []float64 {
	out := make([]float64, len(t))
	for i, v := range t {
		p := math.Pow(1/v-1, sigma)
		if kind == "linear" {
			out[i] = mu / (mu + p)
		} else {
			out[i] = math.Exp(mu) / (math.Exp(mu) + p)
		}
	}
	return out
}

// stretchToTerminal is stretch_shift_to_terminal.
func stretchToTerminal(t []float64, terminal float64) []float64 {
	out := make([]float64, len(t))
	scale := (1 - t[len(t)-1]) / (1 - terminal)
	for i, v := range t {
		out[i] = 1 - (1-v)/scale
	}
	return out
}

// SetTimestepsWith accepts a step count, custom flow sigmas and mu.
func (s *unipc) SetTimestepsWith(o TimestepOptions) error {
	if o.Timesteps != nil {
		return fmt.Errorf("%s: custom timesteps are not supported", s.class)
	}
	if s.dynamicShifting && o.Mu == nil {
		return fmt.Errorf("%s: mu must be given when use_dynamic_shifting is set", s.class)
	}
	n := o.NumInferenceSteps
	var custom []float64
	if o.Sigmas != nil {
		if !s.useFlowSigmas {
			return fmt.Errorf("%s: custom sigmas need use_flow_sigmas", s.class)
		}
		custom = slices.Clone(o.Sigmas)
		n = len(custom)
	}
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	ts, err := nPlusOneSpacing(s.spacing, s.numTrain, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	lastOf := func(sig []float64) (float64, error) {
		switch s.finalSigmasType {
		case "sigma_min":
			return sig[len(sig)-1], nil
		case "zero":
			return 0, nil
		}
		return 0, fmt.Errorf("%s: final_sigmas_type %q is not supported (want zero or sigma_min)", s.class, s.finalSigmasType)
	}
	var sig []float64
	if s.sigmaKind == "karras" || s.sigmaKind == "exponential" || s.sigmaKind == "beta" {
		logSig := s.logSigmas
		in := toF64(s.trainSigmas)
		if custom != nil {
			in = custom
			logSig = make([]float32, len(custom))
			for i, v := range custom {
				logSig[i] = float32(math.Log(v))
			}
		}
		desc := reversed64(in)
		lo, hi := s.bounds.of(desc)
		sig = spacedSigmas(s.sigmaKind, lo, hi, n)
		ts = make([]float64, len(sig))
		switch {
		case s.sigmaKind == "karras" && s.useFlowSigmas:
			for i, v := range sig {
				sig[i] = v / (v + 1)
				ts[i] = sig[i] * float64(s.numTrain)
			}
		default:
			for i, v := range sig {
				ts[i] = sigmaToT(v, logSig)
			}
			if s.sigmaKind == "karras" {
				ts = roundAll(ts)
			}
		}
		last, err := lastOf(sig)
		if err != nil {
			return err
		}
		sig = append(sig, last)
	} else if s.useFlowSigmas {
		if custom == nil {
			l := npLinspace(1, 1/float64(s.numTrain), n+1, true)
			custom = l[:len(l)-1]
		}
		if s.dynamicShifting {
			sig = timeShift(s.timeShiftType, *o.Mu, 1.0, custom)
		} else {
			sig = make([]float64, len(custom))
			for i, v := range custom {
				sig[i] = s.flowShift * v / (1 + (s.flowShift-1)*v)
			}
		}
		if s.shiftTerminal != nil && *s.shiftTerminal != 0 {
			sig = stretchToTerminal(sig, *s.shiftTerminal)
		}
		if math.Abs(sig[0]-1) < 1e-6 {
			sig[0] -= 1e-6
		}
		ts = make([]float64, len(sig))
		for i, v := range sig {
			ts[i] = v * float64(s.numTrain)
		}
		last, err := lastOf(sig)
		if err != nil {
			return err
		}
		sig = append(sig, last)
	} else {
		sig = interpSigmas(ts, s.trainSigmas)
		var last float64
		switch s.finalSigmasType {
		case "sigma_min":
			last = float64(sqrt32((1 - s.acp[0]) / s.acp[0]))
		case "zero":
		default:
			return fmt.Errorf("%s: final_sigmas_type %q is not supported (want zero or sigma_min)", s.class, s.finalSigmasType)
		}
		sig = append(sig, last)
	}
	s.sigmas = toF32(sig)
	s.timesteps = truncInts(ts)
	s.numInfer = len(ts)
	s.modelOutputs = make([][]float32, s.solverOrder)
	s.lowerOrderNums = 0
	s.lastSample = nil
	s.resetIndices()
	return nil
}

// convertModelOutput returns x0 (predict_x0) or the noise prediction.
func (s *unipc) convertModelOutput(modelOutput, sample []float32, shape []int) ([]float32, error) {
	sigma := s.sigmas[s.stepIndex]
	if s.predictX0 {
		return s.dataPrediction(s.class, modelOutput, sample, shape, sigma)
	}
	alpha, sigmaT := alphaSigmaT(sigma, s.useFlowSigmas)
	out := make([]float32, len(sample))
	switch s.prediction {
	case "epsilon":
		copy(out, modelOutput)
	case "sample":
		for i := range out {
			out[i] = (sample[i] - float32(alpha*modelOutput[i])) / sigmaT
		}
	case "v_prediction":
		for i := range out {
			out[i] = float32(alpha*modelOutput[i]) + float32(sigmaT*sample[i])
		}
	default:
		return nil, fmt.Errorf("%s: prediction_type %q needs predict_x0", s.class, s.prediction)
	}
	return out, nil
}

// bhCoefficients builds UniPC's R matrix and b vector for the given rks.
func (s *unipc) bhCoefficients(h float32, rks []float32, order int) (r [][]float32, b []float32, hPhi1, bH float32) {
	hh := h
	if s.predictX0 {
		hh = -h
	}
	hPhi1 = expm132(hh)
	hPhiK := hPhi1/hh - 1
	factorial := 1
	if s.solverType == "bh1" {
		bH = hh
	} else {
		bH = expm132(hh)
	}
	for i := 1; i <= order; i++ {
		row := make([]float32, len(rks))
		for j, rk := range rks {
			row[j] = torchPowInt(rk, i-1)
		}
		r = append(r, row)
		b = append(b, hPhiK*float32(factorial)/bH)
		factorial *= i + 1
		hPhiK = hPhiK/hh - float32(1/float64(factorial))
	}
	return r, b, hPhi1, bH
}

// torchPowInt is torch.pow(x, k) for a small integer exponent.
func torchPowInt(x float32, k int) float32 {
	switch k {
	case 0:
		return 1
	case 1:
		return x
	case 2:
		return x * x
	case 3:
		return x * x * x
	}
	return pow32(x, float32(k))
}

// solveF32 is torch.linalg.solve for a small float32 system: LU with
// partial pivoting (LAPACK sgesv).
func solveF32(a [][]float32, b []float32) ([]float32, error) {
	n := len(b)
	m := make([][]float32, n)
	for i := range m {
		m[i] = slices.Clone(a[i][:n])
	}
	x := slices.Clone(b)
	for k := 0; k < n; k++ {
		p := k
		for i := k + 1; i < n; i++ {
			if math.Abs(float64(m[i][k])) > math.Abs(float64(m[p][k])) {
				p = i
			}
		}
		if m[p][k] == 0 {
			return nil, fmt.Errorf("singular UniPC coefficient matrix")
		}
		m[k], m[p] = m[p], m[k]
		x[k], x[p] = x[p], x[k]
		inv := 1 / m[k][k]
		for i := k + 1; i < n; i++ {
			m[i][k] *= inv
		}
		for i := k + 1; i < n; i++ {
			for j := k + 1; j < n; j++ {
				m[i][j] -= float32(m[i][k] * m[k][j])
			}
		}
	}
	for i := 0; i < n; i++ { // L y = P b
		for k := 0; k < i; k++ {
			x[i] -= float32(m[i][k] * x[k])
		}
	}
	for k := n - 1; k >= 0; k-- { // U x = y, column oriented like strsm
		x[k] /= m[k][k]
		for i := 0; i < k; i++ {
			x[i] -= float32(x[k] * m[i][k])
		}
	}
	return x, nil
}

// weightedSum is einsum("k,bkc->bc", rhos, D1s) summed in order.
func weightedSum(rhos []float32, d1s [][]float32, n int) []float32 {
	out := make([]float32, n)
	for k, d := range d1s {
		for i := range out {
			if k == 0 {
				out[i] = rhos[k] * d[i]
			} else {
				out[i] += float32(rhos[k] * d[i])
			}
		}
	}
	return out
}

// lambdaAt is log(alpha) - log(sigma) for sigmas[i].
func (s *unipc) lambdaAt(i int) (alpha, sigma, lambda float32) {
	alpha, sigma = alphaSigmaT(s.sigmas[i], s.useFlowSigmas)
	return alpha, sigma, lambdaOf(alpha, sigma)
}

// predictor is multistep_uni_p_bh_update.
func (s *unipc) predictor(sample []float32, order int) ([]float32, error) {
	mo := s.modelOutputs
	k := len(mo)
	m0 := mo[k-1]
	i := s.stepIndex
	alphaT, sigmaT, lT := s.lambdaAt(i + 1)
	alphaS0, sigmaS0, lS0 := s.lambdaAt(i)
	h := lT - lS0
	n := len(sample)
	var rks []float32
	var d1s [][]float32
	for j := 1; j < order; j++ {
		_, _, lSi := s.lambdaAt(i - j)
		mi := mo[k-1-j]
		rk := (lSi - lS0) / h
		rks = append(rks, rk)
		d := make([]float32, n)
		for e := range d {
			d[e] = (mi[e] - m0[e]) / rk
		}
		d1s = append(d1s, d)
	}
	rks = append(rks, 1)
	r, b, hPhi1, bH := s.bhCoefficients(h, rks, order)
	var predRes []float32
	if len(d1s) > 0 {
		var rhos []float32
		if order == 2 {
			rhos = []float32{0.5}
		} else {
			sub := make([][]float32, order-1)
			for j := range sub {
				sub[j] = r[j][:order-1]
			}
			var err error
			if rhos, err = solveF32(sub, b[:order-1]); err != nil {
				return nil, err
			}
		}
		predRes = weightedSum(rhos, d1s, n)
	}
	out := make([]float32, n)
	var c1, c2, c3 float32
	if s.predictX0 {
		c1, c2, c3 = sigmaT/sigmaS0, alphaT*hPhi1, alphaT*bH
	} else {
		c1, c2, c3 = alphaT/alphaS0, sigmaT*hPhi1, sigmaT*bH
	}
	for e := range out {
		v := float32(c1*sample[e]) - float32(c2*m0[e])
		if predRes != nil {
			v -= float32(c3 * predRes[e])
		}
		out[e] = v
	}
	return out, nil
}

// corrector is multistep_uni_c_bh_update.
func (s *unipc) corrector(modelT, lastSample, thisSample []float32, order int) ([]float32, error) {
	mo := s.modelOutputs
	k := len(mo)
	m0 := mo[k-1]
	i := s.stepIndex
	alphaT, sigmaT, lT := s.lambdaAt(i)
	alphaS0, sigmaS0, lS0 := s.lambdaAt(i - 1)
	h := lT - lS0
	n := len(thisSample)
	var rks []float32
	var d1s [][]float32
	for j := 1; j < order; j++ {
		_, _, lSi := s.lambdaAt(i - (j + 1))
		mi := mo[k-1-j]
		rk := (lSi - lS0) / h
		rks = append(rks, rk)
		d := make([]float32, n)
		for e := range d {
			d[e] = (mi[e] - m0[e]) / rk
		}
		d1s = append(d1s, d)
	}
	rks = append(rks, 1)
	r, b, hPhi1, bH := s.bhCoefficients(h, rks, order)
	var rhos []float32
	if order == 1 {
		rhos = []float32{0.5}
	} else {
		var err error
		if rhos, err = solveF32(r, b); err != nil {
			return nil, err
		}
	}
	var corrRes []float32
	if len(d1s) > 0 {
		corrRes = weightedSum(rhos[:len(rhos)-1], d1s, n)
	}
	last := rhos[len(rhos)-1]
	var c1, c2, c3 float32
	if s.predictX0 {
		c1, c2, c3 = sigmaT/sigmaS0, alphaT*hPhi1, alphaT*bH
	} else {
		c1, c2, c3 = alphaT/alphaS0, sigmaT*hPhi1, sigmaT*bH
	}
	out := make([]float32, n)
	for e := range out {
		xt := float32(c1*lastSample[e]) - float32(c2*m0[e])
		d1t := modelT[e] - m0[e]
		corr := float32(last * d1t)
		if corrRes != nil {
			corr = corrRes[e] + corr
		}
		out[e] = xt - float32(c3*corr)
	}
	return out, nil
}

func (s *unipc) Step(modelOutput []float32, t float64, sample []float32, shape []int, _ *torchrand.Generator) ([]float32, error) {
	if err := checkShapes(s.class, shape, modelOutput, sample); err != nil {
		return nil, err
	}
	if s.numInfer == 0 {
		return nil, fmt.Errorf("%s: call SetTimesteps before Step", s.class)
	}
	if err := s.initStepIndex(t, true); err != nil {
		return nil, err
	}
	i := s.stepIndex
	if i+1 >= len(s.sigmas) {
		return nil, fmt.Errorf("%s: step %d is past the end of the schedule", s.class, i)
	}
	useCorrector := i > 0 && !slices.Contains(s.disableCorrector, i-1) && s.lastSample != nil
	conv, err := s.convertModelOutput(modelOutput, sample, shape)
	if err != nil {
		return nil, err
	}
	if useCorrector {
		if err := historyErr(s.class, i, s.thisOrder); err != nil {
			return nil, err
		}
		if sample, err = s.corrector(conv, s.lastSample, sample, s.thisOrder); err != nil {
			return nil, fmt.Errorf("%s: %w", s.class, err)
		}
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	s.modelOutputs[len(s.modelOutputs)-1] = conv
	thisOrder := s.solverOrder
	if s.lowerOrderFinal {
		thisOrder = min(s.solverOrder, len(s.timesteps)-i)
	}
	s.thisOrder = min(thisOrder, s.lowerOrderNums+1)
	s.lastSample = sample
	if err := historyErr(s.class, i, s.thisOrder-1); err != nil {
		return nil, err
	}
	prev, err := s.predictor(sample, s.thisOrder)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.class, err)
	}
	if s.lowerOrderNums < s.solverOrder {
		s.lowerOrderNums++
	}
	s.stepIndex++
	return prev, nil
}

func (s *unipc) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	if err := checkShapes(s.class, shape, original, noise); err != nil {
		return nil, err
	}
	idx, err := s.noiseStepIndex(t, true)
	if err != nil {
		return nil, err
	}
	return addNoiseAlphaSigma(original, noise, s.sigmas[idx], s.useFlowSigmas), nil
}
