package main

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"median odd", []float64{3, 1, 2}, 50, 2},
		{"median even", []float64{4, 1, 3, 2}, 50, 2.5},
		{"one value", []float64{7}, 99, 7},
		{"p99 of 0..100", seq(101), 99, 99},
		{"p99 interpolated", []float64{0, 10}, 99, 9.9},
		{"min", []float64{5, 2, 9}, 0, 2},
		{"max", []float64{5, 2, 9}, 100, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.xs, tt.p); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
		})
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	return xs
}
