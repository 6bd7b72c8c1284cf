package bench

import (
	"math"
	"slices"
	"time"
)

// Summarize returns the median, minimum, maximum and sample standard
// deviation of the samples, or nil when there are none. The median of an
// even number of samples is the mean of the middle two.
func Summarize(samples []float64) *Stat {
	n := len(samples)
	if n == 0 {
		return nil
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	st := &Stat{Min: s[0], Max: s[n-1], N: n}
	if n%2 == 1 {
		st.Median = s[n/2]
	} else {
		st.Median = (s[n/2-1] + s[n/2]) / 2
	}
	if n > 1 {
		mean := 0.0
		for _, v := range s {
			mean += v
		}
		mean /= float64(n)
		ss := 0.0
		for _, v := range s {
			ss += (v - mean) * (v - mean)
		}
		st.Stddev = math.Sqrt(ss / float64(n-1))
	}
	return st
}

// perSecond is n / d in units per second; 0 when d is not positive (a
// clock that did not advance).
func perSecond(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of durations (mean of the middle two for an even count).
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
