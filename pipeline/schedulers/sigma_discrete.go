package schedulers

// Shared code of the k-diffusion style discrete schedulers (Euler, Euler
// Ancestral, LMS, Heun, KDPM2, KDPM2 Ancestral): sigmas derived from the
// training alphas, interpolated at fractional timesteps, optionally
// re-spaced as Karras, exponential or beta sigmas.

import (
	"fmt"
	"math"
)

type sigmaDiscrete struct {
	alphaSchedule
	trainSigmas []float32 // ((1-acp)/acp)**0.5, ascending in t
	logSigmas   []float32 // np.log(trainSigmas)
	sigmas      []float32 // current schedule
	spacing     string
	stepsOffset int
	prediction  string
	sigmaKind   string // "", "karras", "exponential", "beta"
	bounds      sigmaBounds
}

// readSigmaDiscrete reads the fields common to the discrete sigma
// schedulers. zeroSNRFix applies diffusers' alphas_cumprod[-1] = 2**-24 when
// rescale_betas_zero_snr is set (Euler and Euler Ancestral).
func readSigmaDiscrete(r *cfgReader, class string, rescale bool, allowed []string) sigmaDiscrete {
	var s sigmaDiscrete
	s.alphaSchedule = readAlphaSchedule(r, rescale, allowed...)
	if r.err != nil {
		return s
	}
	if rescale && r.bool("rescale_betas_zero_snr") {
		s.acp[len(s.acp)-1] = float32(math.Pow(2, -24))
	}
	s.trainSigmas = trainSigmasF32(s.acp)
	s.logSigmas = logF32(s.trainSigmas)
	s.spacing, _ = r.optStr("timestep_spacing")
	if _, ok := r.cfg["steps_offset"]; ok {
		s.stepsOffset = r.int("steps_offset")
	}
	s.prediction = r.str("prediction_type")
	kinds := 0
	for _, k := range []string{"karras", "exponential", "beta"} {
		key := "use_" + k + "_sigmas"
		if _, ok := r.cfg[key]; ok && r.bool(key) {
			s.sigmaKind = k
			kinds++
		}
	}
	if kinds > 1 {
		r.invalid("only one of use_beta_sigmas, use_exponential_sigmas, use_karras_sigmas can be used")
	}
	s.bounds = readSigmaBounds(r)
	return s
}

// sigmaBounds are a config's optional sigma_min and sigma_max. diffusers'
// Karras, exponential and beta conversions use them whenever the config
// has them (hasattr), which includes fields carried over from another
// class's config.
type sigmaBounds struct{ min, max *float64 }

func readSigmaBounds(r *cfgReader) sigmaBounds {
	var b sigmaBounds
	if v, ok := r.optFloat("sigma_min"); ok {
		b.min = &v
	}
	if v, ok := r.optFloat("sigma_max"); ok {
		b.max = &v
	}
	return b
}

// of returns (sigma_min, sigma_max) for the conversions of desc (sigmas in
// descending order): the config values when set, else the ends of desc.
func (b sigmaBounds) of(desc []float64) (lo, hi float64) {
	lo, hi = desc[len(desc)-1], desc[0]
	if b.min != nil {
		lo = *b.min
	}
	if b.max != nil {
		hi = *b.max
	}
	return lo, hi
}

// spacedSigmas re-spaces a schedule as use_karras_sigmas (rho 7),
// use_exponential_sigmas or use_beta_sigmas (alpha = beta = 0.6) do: n
// sigmas from hi down to lo. It returns nil for any other kind.
func spacedSigmas(kind string, lo, hi float64, n int) []float64 {
	switch kind {
	case "karras":
		return karrasSigmas(lo, hi, n, 7)
	case "exponential":
		return exponentialSigmas(lo, hi, n)
	case "beta":
		return betaSigmas(lo, hi, n, 0.6, 0.6)
	}
	return nil
}

// convertSigmas applies the configured sigma spacing (Karras, exponential
// or beta) to interpolated sigmas and returns them with their fractional
// timesteps; ok is false when no conversion is configured.
func (s *sigmaDiscrete) convertSigmas(in []float64, n int) (sig, ts []float64, ok bool) {
	lo, hi := s.bounds.of(in)
	if sig = spacedSigmas(s.sigmaKind, lo, hi, n); sig == nil {
		return nil, nil, false
	}
	ts = make([]float64, len(sig))
	for i, v := range sig {
		ts[i] = sigmaToT(v, s.logSigmas)
	}
	return sig, ts, true
}

// floatSpacedTimesteps is the float32 timestep spacing of the sigma
// schedulers (descending).
func floatSpacedTimesteps(spacing string, numTrain, n, stepsOffset int) ([]float64, error) {
	var ts []float64
	switch spacing {
	case "linspace":
		ts = f32Values(reversed64(npLinspace(0, float64(numTrain-1), n, true)))
	case "leading":
		ratio := numTrain / n
		ts = make([]float64, n)
		for i := range ts {
			ts[n-1-i] = float64(float32(float32(i*ratio) + float32(stepsOffset)))
		}
	case "trailing":
		ratio := float64(numTrain) / float64(n)
		ts = f32Values(roundAll(npArange(float64(numTrain), 0, -ratio)))
		for i := range ts {
			ts[i] = float64(float32(ts[i]) - 1)
		}
	default:
		return nil, fmt.Errorf("timestep_spacing %q is not supported (want linspace, leading or trailing)", spacing)
	}
	return ts, nil
}

// initNoiseSigma is max(sigmas), or sqrt(max^2 + 1) for leading spacing.
func (s *sigmaDiscrete) initNoiseSigma() float64 {
	var m float32
	for _, v := range s.sigmas {
		if v > m || math.IsNaN(float64(v)) {
			m = v
		}
	}
	if s.spacing == "linspace" || s.spacing == "trailing" {
		return float64(m)
	}
	return float64(sqrt32(sq32(m) + 1))
}

// scaleBySigma is sample / (sigma**2 + 1) ** 0.5.
func scaleBySigma(sample []float32, sigma float32) []float32 {
	d := sqrt32(sq32(sigma) + 1)
	out := make([]float32, len(sample))
	for i, v := range sample {
		out[i] = v / d
	}
	return out
}

// x0FromSigma converts a model output to the denoised sample for a sigma
// schedule (k-diffusion's "denoised").
func x0FromSigma(class, mode string, sigma float32, sample, modelOutput []float32) ([]float32, error) {
	out := make([]float32, len(sample))
	switch mode {
	case "epsilon":
		for i := range out {
			out[i] = sample[i] - float32(sigma*modelOutput[i])
		}
	case "v_prediction":
		c := -sigma / sqrt32(sq32(sigma)+1)
		d := sq32(sigma) + 1
		for i := range out {
			out[i] = float32(modelOutput[i]*c) + sample[i]/d
		}
	case "sample", "original_sample":
		copy(out, modelOutput)
	default:
		return nil, fmt.Errorf("%s: prediction_type %q is not supported", class, mode)
	}
	return out, nil
}

// addNoiseSigma is add_noise of the sigma schedulers: x + noise * sigma.
func addNoiseSigma(class string, original, noise []float32, shape []int, sigma float32) ([]float32, error) {
	if err := checkShapes(class, shape, original, noise); err != nil {
		return nil, err
	}
	out := make([]float32, len(original))
	for i := range out {
		out[i] = original[i] + float32(noise[i]*sigma)
	}
	return out, nil
}

func (s *sigmaDiscrete) Sigmas() []float64 { return toF64(s.sigmas) }
