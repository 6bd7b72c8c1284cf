package cpu

import "math"

// expf is e^x in float32: x = k·ln2 + r with |r| <= ln2/2, e^r by its
// degree-7 Taylor polynomial (truncation below 1e-8 relative), scaled by
// 2^k. Within 2 ulp of the correctly rounded result, and several times
// faster than going through float64 math.Exp. Below -104 the result is 0
// and above 88.8 +Inf without further work (masked attention scores are
// very negative); the edges in between, and NaN, take math.Exp.
func expf(x float32) float32 {
	const (
		ln2hi = 0.693145751953125
		ln2lo = 1.428606765330187045e-06
		log2e = 1.44269504088896341
	)
	switch {
	case x > -87.3 && x < 88.7:
	case x <= -104: // below half the smallest subnormal (masked scores)
		return 0
	case x >= 88.8:
		return float32(math.Inf(1))
	default: // the subnormal and overflow edges, and NaN
		return float32(math.Exp(float64(x)))
	}
	t := x * log2e
	var k int32
	if t >= 0 {
		k = int32(t + 0.5)
	} else {
		k = int32(t - 0.5)
	}
	kf := float32(k)
	r := (x - kf*ln2hi) - kf*ln2lo
	p := float32(1.0 / 5040)
	p = p*r + 1.0/720
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	if k > 127 { // 2^128 is not a float32: scale in two steps
		return p * math.Float32frombits(uint32(k+126)<<23) * 2
	}
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// logisticf is 1/(1+e^-x) in float32, without overflow for either sign.
func logisticf(x float32) float32 {
	if x >= 0 {
		return 1 / (1 + expf(-x))
	}
	e := expf(x)
	return e / (1 + e)
}

// erff is erf(x) in float32 by Abramowitz and Stegun 7.1.26 with expf
// (formula error below 1.5e-7; with float32 rounding the absolute error
// stays below 5e-7 in TestErff), much cheaper than float64 math.Erf; GELU
// calls it on every activation.
func erff(x float32) float32 {
	const (
		p  = 0.3275911
		a1 = 0.254829592
		a2 = -0.284496736
		a3 = 1.421413741
		a4 = -1.453152027
		a5 = 1.061405429
	)
	if x != x {
		return x
	}
	ax := x
	if ax < 0 {
		ax = -ax
	}
	t := 1 / (1 + p*ax)
	y := 1 - ((((a5*t+a4)*t+a3)*t+a2)*t+a1)*t*expf(-ax*ax)
	if x < 0 {
		return -y
	}
	return y
}
