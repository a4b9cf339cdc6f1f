package main

import (
	"fmt"
	"math"
	"sort"
)

// median returns the middle value of xs (the mean of the two middle ones
// for an even count), NaN for none.
func median(xs []float64) float64 {
	return percentile(xs, 50)
}

// percentile returns the p-th percentile of xs (0 ≤ p ≤ 100) by linear
// interpolation between the closest ranks, NaN for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return s[lo]
	}
	return s[lo] + (s[hi]-s[lo])*(rank-float64(lo))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// count writes 1000 as 1k and 1000000 as 1M when exact.
func count(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}

// medianInterval returns a distribution-free interval for the median of
// the population xs was drawn from: the order statistics x(k) and
// x(n+1-k) for the largest k whose coverage, 1 − 2·P(Binomial(n, ½) < k),
// is still at least 95% (for 9 values, the 2nd and 8th: 96.1%). With
// fewer than 6 values no such k exists and the interval is the whole
// range (its coverage then below 95%, returned as cover).
func medianInterval(xs []float64) (lo, hi, cover float64) {
	n := len(xs)
	if n == 0 {
		return math.NaN(), math.NaN(), 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	// below[k] = P(Binomial(n, ½) < k)
	below := make([]float64, n+2)
	c := 1.0 // n choose i
	for i := 0; i <= n; i++ {
		below[i+1] = below[i] + c*math.Pow(0.5, float64(n))
		c = c * float64(n-i) / float64(i+1)
	}
	k := 1
	for k+1 <= (n+1)/2 && 1-2*below[k+1] >= 0.95 {
		k++
	}
	return s[k-1], s[n-k], 1 - 2*below[k]
}
