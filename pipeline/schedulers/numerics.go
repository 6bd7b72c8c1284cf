package schedulers

// ---- torch and numpy numerics ------------------------------------------------
//
// diffusers computes its schedules with a mix of float32 torch tensors and
// float64 numpy arrays, and the scheduler test vectors are tight enough (a few
// float32 ULPs of a sum) that the mix matters. The helpers here reproduce the
// exact operations; the scheduler files call them in the same order as the
// Python source. Conventions:
//
//   - float32 values stand for torch float32 tensors (0-d or not) and numpy
//     float32 arrays; every arithmetic step rounds to float32;
//   - float64 values stand for Python floats and numpy float64 arrays;
//   - a Python float combined with a float32 tensor is first rounded to
//     float32 (torch casts wrapped scalars to the tensor dtype);
//   - products that feed a sum are wrapped in float32(...) so that the Go
//     compiler cannot fuse them into an FMA (allowed by the spec on some
//     architectures), since torch's CPU kernels round each op separately.

import (
	"math"
	"sort"
)

// linspaceVecWidth selects how torchLinspaceF32 reproduces ATen's CPU
// linspace kernel: 0 evaluates every element with the scalar formula; 8 or
// 16 reproduce the vectorised loop of AVX2 / AVX512 builds, where each chunk
// of that many elements is base + k*step from the chunk's first value. The
// default (0) matches the diffusers test vectors; see docs/schedulers.md.
var linspaceVecWidth = 0

// torchLinspaceF32 is torch.linspace(start, end, n, dtype=torch.float32) on
// the CPU: step = (end-start)/(n-1) in float32, the first half counted up from
// start and the second half down from end.
func torchLinspaceF32(start, end float64, n int) []float32 {
	out := make([]float32, n)
	if n == 0 {
		return out
	}
	if n == 1 {
		out[0] = float32(start)
		return out
	}
	s, e := float32(start), float32(end)
	step := (e - s) / float32(n-1)
	half := n / 2
	scalar := func(i int) float32 {
		if i < half {
			return s + float32(step*float32(i))
		}
		return e - float32(step*float32(n-i-1))
	}
	w := linspaceVecWidth
	i := 0
	if w > 0 {
		vecEnd := (n / (2 * w)) * (2 * w)
		for ; i < vecEnd; i += w {
			var base float32
			if i < half {
				base = s + float32(step*float32(i))
			} else {
				base = e - float32(step*float32(n-i-1))
			}
			for k := 0; k < w; k++ {
				out[i+k] = base + float32(float32(k)*step)
			}
		}
		// ATen's vectorized_loop handles pairs of vectors, then the rest
		// element by element.
	}
	for ; i < n; i++ {
		out[i] = scalar(i)
	}
	return out
}

// torchCumprodF32 is torch.cumprod on a float32 CPU tensor: the running
// product is kept in double and each output is rounded to float32.
func torchCumprodF32(x []float32) []float32 {
	out := make([]float32, len(x))
	acc := 1.0
	for i, v := range x {
		acc *= float64(v)
		out[i] = float32(acc)
	}
	return out
}

// float32 libm: computed in double and rounded once, which is the correctly
// rounded result except for rare double-rounding ties (glibc's float
// functions are within one ULP of that as well).
func log32(x float32) float32     { return float32(math.Log(float64(x))) }
func exp32(x float32) float32     { return float32(math.Exp(float64(x))) }
func expm132(x float32) float32   { return float32(math.Expm1(float64(x))) }
func sqrt32(x float32) float32    { return float32(math.Sqrt(float64(x))) }
func pow32(x, y float32) float32  { return float32(math.Pow(float64(x), float64(y))) }
func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// sq32 is x**2 on a float32 tensor (torch computes it as x*x).
func sq32(x float32) float32 { return x * x }

// npLinspace is numpy.linspace(start, stop, num, endpoint) in float64.
func npLinspace(start, stop float64, num int, endpoint bool) []float64 {
	if num <= 0 {
		return nil
	}
	div := num
	if endpoint {
		div = num - 1
	}
	delta := stop - start
	y := make([]float64, num)
	if div > 0 {
		step := delta / float64(div)
		for i := range y {
			if step == 0 {
				y[i] = float64(i) / float64(div) * delta
			} else {
				y[i] = float64(i) * step
			}
			y[i] += start
		}
	} else {
		for i := range y {
			y[i] = float64(i)*delta + start
		}
	}
	if endpoint && num > 1 {
		y[num-1] = stop
	}
	return y
}

// npArange is numpy.arange(start, stop, step) for float64 arguments: the
// length is ceil((stop-start)/step) and element i>=2 is start + i*delta with
// delta = (start+step) - start, as numpy's fill does.
func npArange(start, stop, step float64) []float64 {
	n := int(math.Ceil((stop - start) / step))
	if n <= 0 {
		return nil
	}
	out := make([]float64, n)
	out[0] = start
	if n > 1 {
		out[1] = start + step
		delta := out[1] - out[0]
		for i := 2; i < n; i++ {
			out[i] = start + float64(i)*delta
		}
	}
	return out
}

// npInterp is numpy.interp(x, xp, fp) for increasing xp.
func npInterp(x []float64, xp []float64, fp []float64) []float64 {
	out := make([]float64, len(x))
	n := len(xp)
	for i, v := range x {
		switch {
		case math.IsNaN(v):
			out[i] = v
		case v < xp[0]:
			out[i] = fp[0]
		case v > xp[n-1]:
			out[i] = fp[n-1]
		case v == xp[n-1]:
			out[i] = fp[n-1]
		default:
			// Largest j with xp[j] <= v.
			j := sort.Search(n, func(k int) bool { return xp[k] > v }) - 1
			if v == xp[j] {
				out[i] = fp[j]
				continue
			}
			slope := (fp[j+1] - fp[j]) / (xp[j+1] - xp[j])
			r := float64(slope*(v-xp[j])) + fp[j]
			if math.IsNaN(r) {
				r = float64(slope*(v-xp[j+1])) + fp[j+1]
				if math.IsNaN(r) && fp[j] == fp[j+1] {
					r = fp[j]
				}
			}
			out[i] = r
		}
	}
	return out
}

// interpSigmas is np.interp(timesteps, np.arange(len(sigmas)), sigmas) with
// float32 sigmas, the usual way diffusers maps timesteps to sigmas.
func interpSigmas(timesteps []float64, sigmas []float32) []float64 {
	xp := make([]float64, len(sigmas))
	fp := make([]float64, len(sigmas))
	for i, s := range sigmas {
		xp[i] = float64(i)
		fp[i] = float64(s)
	}
	return npInterp(timesteps, xp, fp)
}

// roundEven is numpy's .round() and torch.round: half to even.
func roundEven(x float64) float64 { return math.RoundToEven(x) }

// ---- schedule building blocks -------------------------------------------

// trainSigmasF32 is ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5 as a
// float32 tensor.
func trainSigmasF32(acp []float32) []float32 {
	out := make([]float32, len(acp))
	for i, a := range acp {
		out[i] = sqrt32((1 - a) / a)
	}
	return out
}

// logF32 is np.log on a float32 array.
func logF32(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = log32(v)
	}
	return out
}

// karrasSigmas is diffusers' _convert_to_karras (Karras et al. 2022, rho=7)
// in float64.
func karrasSigmas(sigmaMin, sigmaMax float64, n int, rho float64) []float64 {
	ramp := npLinspace(0, 1, n, true)
	minInv := math.Pow(sigmaMin, 1/rho)
	maxInv := math.Pow(sigmaMax, 1/rho)
	out := make([]float64, n)
	for i, r := range ramp {
		out[i] = math.Pow(maxInv+r*(minInv-maxInv), rho)
	}
	return out
}

// exponentialSigmas is _convert_to_exponential: exp(linspace(log max, log
// min, n)).
func exponentialSigmas(sigmaMin, sigmaMax float64, n int) []float64 {
	l := npLinspace(math.Log(sigmaMax), math.Log(sigmaMin), n, true)
	for i := range l {
		l[i] = math.Exp(l[i])
	}
	return l
}

// betaSigmas is _convert_to_beta: sigma_min + ppf*(sigma_max - sigma_min)
// with ppf the Beta(alpha, beta) quantile of 1 - linspace(0, 1, n)
// ("Beta Sampling is All You Need", Lee et al. 2024).
func betaSigmas(sigmaMin, sigmaMax float64, n int, alpha, beta float64) []float64 {
	ts := npLinspace(0, 1, n, true)
	out := make([]float64, n)
	for i, t := range ts {
		out[i] = sigmaMin + betaPPF(1-t, alpha, beta)*(sigmaMax-sigmaMin)
	}
	return out
}

// sigmaToT is diffusers' _sigma_to_t for a float64 sigma and float32
// log_sigmas (np.log of the float32 training sigmas): the fractional training
// timestep whose log-sigma interpolates linearly to log(sigma).
func sigmaToT(sigma float64, logSigmas []float32) float64 {
	logSigma := math.Log(math.Max(sigma, 1e-10))
	lowIdx := lowIndex(len(logSigmas), func(i int) bool { return logSigma-float64(logSigmas[i]) >= 0 })
	low, high := logSigmas[lowIdx], logSigmas[lowIdx+1]
	w := (float64(low) - logSigma) / float64(low-high)
	w = clip64(w, 0, 1)
	return (1-w)*float64(lowIdx) + w*float64(lowIdx+1)
}

// sigmaToTF32 is _sigma_to_t when sigma itself is float32 (custom sigmas, or
// torch tensors in KDPM2): every step stays in float32.
func sigmaToTF32(sigma float32, logSigmas []float32) float32 {
	logSigma := log32(max(sigma, float32(1e-10)))
	lowIdx := lowIndex(len(logSigmas), func(i int) bool { return logSigma-logSigmas[i] >= 0 })
	low, high := logSigmas[lowIdx], logSigmas[lowIdx+1]
	w := (low - logSigma) / (low - high)
	if w < 0 {
		w = 0
	} else if w > 1 {
		w = 1
	}
	return float32((1-w)*float32(lowIdx)) + float32(w*float32(lowIdx+1))
}

// lowIndex reproduces np.cumsum(dists >= 0).argmax().clip(max=n-2): the first
// index at which the running count of true conditions reaches its maximum.
func lowIndex(n int, ge func(i int) bool) int {
	best, bestIdx, count := -1, 0, 0
	for i := 0; i < n; i++ {
		if ge(i) {
			count++
		}
		if count > best {
			best, bestIdx = count, i
		}
	}
	return min(bestIdx, n-2)
}

func clip64(x, lo, hi float64) float64 {
	if math.IsNaN(x) {
		return x
	}
	return math.Min(math.Max(x, lo), hi)
}

// torchLerpF32 is torch.lerp on float32 scalars.
func torchLerpF32(a, b, w float32) float32 {
	if float32(math.Abs(float64(w))) < 0.5 {
		return a + float32(w*(b-a))
	}
	return b - float32((b-a)*(1-w))
}

// torchQuantileF32 is torch.quantile(x, q) with linear interpolation on a
// float32 vector (x is sorted in place).
func torchQuantileF32(x []float32, q float64) float32 {
	sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	rank := float32(q) * float32(len(x)-1)
	lo := int(rank)
	hi := int(math.Ceil(float64(rank)))
	return torchLerpF32(x[lo], x[hi], rank-float32(lo))
}

// ---- Gauss-Kronrod quadrature (QUADPACK dqk21, as scipy.integrate.quad's
// first and, for the smooth polynomials used by LMS, only evaluation) ----

var (
	gk21X = [11]float64{
		0.995657163025808080735527280689003, 0.973906528517171720077964012084452,
		0.930157491355708226001207180059508, 0.865063366688984510732096688423493,
		0.780817726586416897063717578345042, 0.679409568299024406234327365114874,
		0.562757134668604683339000099272694, 0.433395394129247190799265943165784,
		0.294392862701460198131126603103866, 0.148874338981631210884826001129720,
		0,
	}
	gk21WK = [11]float64{
		0.011694638867371874278064396062192, 0.032558162307964727478818972459390,
		0.054755896574351996031381300244580, 0.075039674810919952767043140916190,
		0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
		0.123491976262065851077958109831074, 0.134709217311473325928054001771707,
		0.142775938577060080797094273138717, 0.147739104901338491374841515972068,
		0.149445554002916905664936468389821,
	}
)

// quadGK21 integrates f over [a, b] (b < a allowed) with the 21-point Kronrod
// rule, summing in QUADPACK's order: centre, the Gauss abscissae, then the
// Kronrod ones.
func quadGK21(f func(float64) float64, a, b float64) float64 {
	centr := 0.5 * (a + b)
	hlgth := 0.5 * (b - a)
	resk := gk21WK[10] * f(centr)
	for j := 1; j <= 5; j++ { // Gauss points: xgk(2), xgk(4), ... (1-based)
		k := 2*j - 1
		absc := hlgth * gk21X[k]
		resk += gk21WK[k] * (f(centr-absc) + f(centr+absc))
	}
	for j := 1; j <= 5; j++ { // Kronrod points: xgk(1), xgk(3), ...
		k := 2*j - 2
		absc := hlgth * gk21X[k]
		resk += gk21WK[k] * (f(centr-absc) + f(centr+absc))
	}
	return resk * hlgth
}

// ---- Beta distribution quantile --------------------------------------------

// betaPPF is the quantile of Beta(a, b) (scipy.stats.beta.ppf), found by
// bisection on the regularized incomplete beta function to full double
// precision.
func betaPPF(q, a, b float64) float64 {
	if q <= 0 {
		return 0
	}
	if q >= 1 {
		return 1
	}
	lo, hi := 0.0, 1.0
	for i := 0; i < 200; i++ {
		mid := 0.5 * (lo + hi)
		if mid == lo || mid == hi {
			break
		}
		if regIncBeta(mid, a, b) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return 0.5 * (lo + hi)
}

// regIncBeta is I_x(a, b) by Lentz's continued fraction.
func regIncBeta(x, a, b float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	lga, _ := math.Lgamma(a)
	lgb, _ := math.Lgamma(b)
	lgab, _ := math.Lgamma(a + b)
	front := math.Exp(lgab - lga - lgb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(x, a, b) / a
	}
	return 1 - front*betaCF(1-x, b, a)/b
}

func betaCF(x, a, b float64) float64 {
	const tiny = 1e-300
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 1000; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-16 {
			break
		}
	}
	return h
}
