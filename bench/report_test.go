package main

import (
	"strings"
	"testing"
)

// TestHistoryTargetWantsBothStatistics: the history's target passes only
// when the difference of the ratios and the median of the paired
// differences are both within a point.
func TestHistoryTargetWantsBothStatistics(t *testing.T) {
	nine := func(xs ...float64) []float64 { return xs }
	base := nine(100, 100, 100, 100, 100, 100, 100, 100, 100)
	tests := []struct {
		name       string
		with, wout []float64
		pass       bool
	}{
		{"both within a point", nine(99.5, 100, 100, 100, 100, 100, 100, 100, 100), base, true},
		{"paired within, ratios apart",
			// Without the history, high rounds came where the history's
			// were low: pairs alike, medians 2 apart.
			nine(90, 91, 92, 93, 98, 104, 105, 106, 107), nine(91, 92, 93, 94, 100, 105, 106, 107, 108), false},
		{"both apart", nine(97, 97, 97, 97, 97, 97, 97, 97, 97), base, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &results{storms: &stormResults{
				workloads: []workload{{name: "exec, CPU 0"}},
				raw: map[string]map[string][]float64{
					"baseline":      {"exec, CPU 0": base},
					"mcptrace":      {"exec, CPU 0": tt.with},
					configNoHistory: {"exec, CPU 0": tt.wout},
				},
			}}
			for _, tg := range targets(r) {
				if !strings.HasPrefix(tg.goal, "history: fork and exec") {
					continue
				}
				if tg.pass == nil || *tg.pass != tt.pass {
					t.Fatalf("target %q: pass %v, want %v", tg.measured, tg.pass, tt.pass)
				}
				return
			}
			t.Fatal("no history target")
		})
	}
}
