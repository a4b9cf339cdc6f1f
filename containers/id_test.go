package containers

import (
	"strings"
	"testing"
)

const (
	testID    = "a6ba108c64975460804dfbbd7f563a09a497e611797eb5ba117adc967a56b947"
	otherID   = "646c333886ca84582d3b14ceae971c977932fd01e875859a0ccebed2f1fccd62"
	testShort = "a6ba108c6497"
)

func TestValidIDAcceptsOnlyFullLowercaseHexIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		want bool
	}{
		{"full ID", testID, true},
		{"all zeros", strings.Repeat("0", 64), true},
		{"short ID", testShort, false},
		{"63 digits", testID[:63], false},
		{"65 digits", testID + "0", false},
		{"uppercase", strings.ToUpper(testID), false},
		{"non-hex letter", testID[:63] + "g", false},
		{"path traversal", "../../v1.41/containers/create?x=" + testID[:31], false},
		{"slash inside", testID[:32] + "/" + testID[33:], false},
		{"name", "tender_diffie", false},
		{"empty", "", false},
		{"space padded", " " + testID[1:], false},
		{"NUL inside", testID[:10] + "\x00" + testID[11:], false},
		{"multibyte", testID[:62] + "é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidID(tc.id); got != tc.want {
				t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}
