package schedulers

// SASolverScheduler (Xue et al. 2023, "SA-Solver: Stochastic Adams Solver
// for Fast Sampling of Diffusion Models"), following diffusers'
// scheduling_sasolver.py: a stochastic Adams-Bashforth predictor and
// Adams-Moulton corrector in log-SNR, with noise drawn on every step.

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type saSolver struct {
	base
	dpmCommon
	predictorOrder int
	correctorOrder int
	predictX0      bool
	timestepList   []float64
	haveTimestep   []bool
	lastSample     []float32
	lastNoise      []float32
	thisPredOrder  int
	thisCorrOrder  int
}

func newSASolver(class string, cfg Config) (Scheduler, error) {
	r := &cfgReader{class: class, cfg: cfg}
	s := &saSolver{base: newBase(class, cfg)}
	s.dpmCommon = readDPMCommon(r, false, []string{"linear", "scaled_linear", "squaredcos_cap_v2"})
	s.predictorOrder = r.int("predictor_order")
	s.correctorOrder = r.int("corrector_order")
	if v, ok := cfg["tau_func"]; ok && v != nil {
		r.unsupported("tau_func (a Python callable) in a config")
	}
	r.oneOf("algorithm_type", s.algorithm, "data_prediction", "noise_prediction")
	r.oneOf("prediction_type", s.prediction, "epsilon", "sample", "v_prediction", "flow_prediction")
	if r.err != nil {
		return nil, r.err
	}
	if s.predictorOrder < 1 || s.predictorOrder > 4 || s.correctorOrder < 1 || s.correctorOrder > 4 {
		return nil, fmt.Errorf("%s config: predictor_order and corrector_order must be in [1, 4]", class)
	}
	s.predictX0 = s.algorithm == "data_prediction"
	n := s.numTrain
	s.timesteps = make([]float64, n)
	for i := range s.timesteps {
		s.timesteps[i] = float64(n - 1 - i)
	}
	s.sigmas = slices.Clone(s.trainSigmas)
	l := s.histLen()
	s.timestepList = make([]float64, l)
	s.haveTimestep = make([]bool, l)
	s.modelOutputs = make([][]float32, l)
	return s, nil
}

func (s *saSolver) histLen() int { return max(s.predictorOrder, s.correctorOrder-1) }

// tau is the default tau_func: 1 for 200 <= t <= 800, else 0.
func saTau(t float64) int {
	if t >= 200 && t <= 800 {
		return 1
	}
	return 0
}

func (s *saSolver) SetTimesteps(n int) error {
	if n < 1 {
		return fmt.Errorf("%s: num_inference_steps %d must be at least 1", s.class, n)
	}
	last := s.numTrain - s.clippedIndex()
	ts, err := nPlusOneSpacing(s.spacing, last, s.numTrain, n, s.stepsOffset)
	if err != nil {
		return fmt.Errorf("%s: %w", s.class, err)
	}
	sig, ts, interpolated := s.scheduleSigmas(ts, n, reversed64(toF64(s.trainSigmas)), true)
	if interpolated {
		sig = append(sig, float64(sqrt32((1-s.acp[0])/s.acp[0])))
	} else {
		sig = append(sig, sig[len(sig)-1])
	}
	s.sigmas = toF32(sig)
	s.timesteps = truncInts(ts)
	s.numInfer = len(ts)
	s.modelOutputs = make([][]float32, s.histLen())
	s.lowerOrderNums = 0
	s.lastSample = nil
	s.resetIndices()
	return nil
}

// convertModelOutput returns x0 (data_prediction) or epsilon.
func (s *saSolver) convertModelOutput(modelOutput, sample []float32, shape []int) ([]float32, error) {
	algo := s.algorithm
	s.algorithm = map[string]string{"data_prediction": "dpmsolver++", "noise_prediction": "dpmsolver"}[algo]
	defer func() { s.algorithm = algo }()
	return s.convertModelOutputDPM(s.class, modelOutput, sample, shape, s.sigmas[s.stepIndex])
}

func (s *saSolver) lambdaAt(i int) float32 {
	a, sg := alphaSigmaT(s.sigmas[i], s.useFlowSigmas)
	return lambdaOf(a, sg)
}

// expPositive is get_coefficients_exponential_positive.
func expPositive(order int, start, end float32, tau int) float32 {
	c := float32(1 + tau*tau)
	ec, sc := c*end, c*start
	e := exp32(-(ec - sc))
	switch order {
	case 0:
		return exp32(ec) * (1 - e) / c
	case 1:
		return exp32(ec) * (ec - 1 - float32((sc-1)*e)) / (c * c)
	case 2:
		a := sq32(ec) - float32(2*ec) + 2
		b := sq32(sc) - float32(2*sc) + 2
		return exp32(ec) * (a - float32(b*e)) / (c * c * c)
	default:
		a := float32(ec*ec*ec) - float32(3*sq32(ec)) + float32(6*ec) - 6
		b := float32(sc*sc*sc) - float32(3*sq32(sc)) + float32(6*sc) - 6
		return exp32(ec) * (a - float32(b*e)) / (c * c * c * c)
	}
}

// expNegative is get_coefficients_exponential_negative.
func expNegative(order int, start, end float32) float32 {
	e := exp32(end - start)
	switch order {
	case 0:
		return exp32(-end) * (e - 1)
	case 1:
		return exp32(-end) * (float32((start+1)*e) - (end + 1))
	case 2:
		a := sq32(start) + float32(2*start) + 2
		b := sq32(end) + float32(2*end) + 2
		return exp32(-end) * (float32(a*e) - b)
	default:
		a := float32(start*start*start) + float32(3*sq32(start)) + float32(6*start) + 6
		b := float32(end*end*end) + float32(3*sq32(end)) + float32(6*end) + 6
		return exp32(-end) * (float32(a*e) - b)
	}
}

// lagrange is lagrange_polynomial_coefficient(len(l)-1, l).
func lagrange(l []float32) [][]float32 {
	switch len(l) {
	case 1:
		return [][]float32{{1}}
	case 2:
		return [][]float32{
			{1 / (l[0] - l[1]), -l[1] / (l[0] - l[1])},
			{1 / (l[1] - l[0]), -l[0] / (l[1] - l[0])},
		}
	case 3:
		d1 := (l[0] - l[1]) * (l[0] - l[2])
		d2 := (l[1] - l[0]) * (l[1] - l[2])
		d3 := (l[2] - l[0]) * (l[2] - l[1])
		return [][]float32{
			{1 / d1, (-l[1] - l[2]) / d1, l[1] * l[2] / d1},
			{1 / d2, (-l[0] - l[2]) / d2, l[0] * l[2] / d2},
			{1 / d3, (-l[0] - l[1]) / d3, l[0] * l[1] / d3},
		}
	}
	row := func(k int) []float32 {
		var o []float32
		for j := 0; j < 4; j++ {
			if j != k {
				o = append(o, l[j])
			}
		}
		d := (l[k] - o[0]) * (l[k] - o[1]) * (l[k] - o[2])
		a, b, c := o[0], o[1], o[2]
		pair := float32(a*b) + float32(a*c)
		pair += float32(b * c)
		return []float32{1 / d, (-a - b - c) / d, pair / d, -a * b * c / d}
	}
	return [][]float32{row(0), row(1), row(2), row(3)}
}

// coefficients is get_coefficients_fn.
func (s *saSolver) coefficients(order int, start, end float32, l []float32, tau int) []float32 {
	lag := lagrange(l)
	out := make([]float32, order)
	for i := 0; i < order; i++ {
		var c float32
		for j := 0; j < order; j++ {
			var e float32
			if s.predictX0 {
				e = expPositive(order-1-j, start, end, tau)
			} else {
				e = expNegative(order-1-j, start, end)
			}
			c += float32(lag[i][j] * e)
		}
		out[i] = c
	}
	return out
}

// update is the shared body of stochastic_adams_bashforth_update
// (corrector=false, from sigmas[i] to sigmas[i+1]) and
// stochastic_adams_moulton_update (corrector=true, from sigmas[i-1] to
// sigmas[i]). models are newest first.
func (s *saSolver) update(corrector bool, models [][]float32, x, noise []float32, order, tau int) []float32 {
	i := s.stepIndex
	ti, si := i+1, i
	if corrector {
		ti, si = i, i-1
	}
	alphaT, sigmaT := alphaSigmaT(s.sigmas[ti], s.useFlowSigmas)
	alphaS0, sigmaS0 := alphaSigmaT(s.sigmas[si], s.useFlowSigmas)
	lT, lS0 := lambdaOf(alphaT, sigmaT), lambdaOf(alphaS0, sigmaS0)
	h := lT - lS0
	l := make([]float32, order)
	for k := range l {
		l[k] = s.lambdaAt(i - k)
	}
	gc := s.coefficients(order, lS0, lT, l, tau)
	c := float32(1 + tau*tau)
	if s.predictX0 && order == 2 {
		inner := float32(h*c) - 1 + exp32(c*-h)
		var add float32
		if corrector {
			add = 1.0 * exp32(c*lT) * (h/2 - inner/(c*c*h))
		} else {
			add = 1.0 * exp32(c*lT) * (sq32(h)/2 - inner/(c*c)) / (lS0 - s.lambdaAt(i-1))
		}
		gc[0] += add
		gc[1] -= add
	}
	coefs := make([]float32, order)
	t2 := float32(tau * tau)
	for k := range coefs {
		if s.predictX0 {
			coefs[k] = c * sigmaT * exp32(-t2*lT) * gc[k]
		} else {
			coefs[k] = -c * alphaT * gc[k]
		}
	}
	var noiseCoef, xCoef float32
	if s.predictX0 {
		noiseCoef = sigmaT * sqrt32(1-exp32(-2*t2*h))
		xCoef = exp32(-t2*h) * (sigmaT / sigmaS0)
	} else {
		noiseCoef = float32(tau) * sigmaT * sqrt32(exp32(2*h)-1)
		xCoef = alphaT / alphaS0
	}
	out := make([]float32, len(x))
	for j := range out {
		var gp float32
		for k := 0; k < order; k++ {
			gp += float32(coefs[k] * models[k][j])
		}
		v := float32(xCoef*x[j]) + gp
		out[j] = v + float32(noiseCoef*noise[j])
	}
	return out
}

func (s *saSolver) Step(modelOutput []float32, t float64, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error) {
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
	useCorrector := i > 0 && s.lastSample != nil
	conv, err := s.convertModelOutput(modelOutput, sample, shape)
	if err != nil {
		return nil, err
	}
	L := s.histLen()
	if useCorrector {
		tau := saTau(s.timestepList[L-1])
		models := []([]float32){conv}
		for k := L - 1; k >= 0 && len(models) < s.thisCorrOrder; k-- {
			models = append(models, s.modelOutputs[k])
		}
		if len(models) < s.thisCorrOrder {
			return nil, fmt.Errorf("%s: not enough history for a corrector of order %d", s.class, s.thisCorrOrder)
		}
		if err := historyErr(s.class, i, max(s.thisCorrOrder-1, 1)); err != nil {
			return nil, err
		}
		sample = s.update(true, models, s.lastSample, s.lastNoise, s.thisCorrOrder, tau)
	}
	copy(s.modelOutputs, s.modelOutputs[1:])
	copy(s.timestepList, s.timestepList[1:])
	s.modelOutputs[L-1] = conv
	s.timestepList[L-1] = t
	noise := noiseLike(gen, shape)
	pred, corr := s.predictorOrder, s.correctorOrder
	if s.lowerOrderFinal {
		pred = min(s.predictorOrder, len(s.timesteps)-i)
		corr = min(s.correctorOrder, len(s.timesteps)-i+1)
	}
	s.thisPredOrder = min(pred, s.lowerOrderNums+1)
	s.thisCorrOrder = min(corr, s.lowerOrderNums+2)
	s.lastSample, s.lastNoise = sample, noise
	tau := saTau(s.timestepList[L-1])
	models := make([][]float32, s.thisPredOrder)
	for k := range models {
		models[k] = s.modelOutputs[L-1-k]
	}
	if err := historyErr(s.class, i, s.thisPredOrder-1); err != nil {
		return nil, err
	}
	prev := s.update(false, models, sample, noise, s.thisPredOrder, tau)
	if s.lowerOrderNums < L {
		s.lowerOrderNums++
	}
	s.stepIndex++
	return prev, nil
}

func (s *saSolver) AddNoise(original, noise []float32, shape []int, t float64) ([]float32, error) {
	return addNoiseAlpha(s.class, &s.alphaSchedule, original, noise, shape, t)
}
