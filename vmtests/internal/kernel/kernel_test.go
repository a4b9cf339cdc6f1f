//go:build linux

package kernel

import (
	"testing"
)

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"6.1.192-2", "6.1.192-2", 0},
		{"6.1.192-2", "6.1.170-3", 1},
		{"6.1.99-1", "6.1.100-1", -1},
		{"6.12.115+deb13.1-1", "6.12.115+deb13-1", 1}, // hypothetical, exercises '+' and '.'
		{"1.0~rc1-1", "1.0-1", -1},
		{"1:1.0-1", "2.0-1", 1},
		{"5.10.244-1", "5.10.237-1", 1},
		{"1.0-1", "1.0", 1},
		{"1.0a", "1.0", 1},
		{"1.0~", "1.0", -1},
	} {
		if got := CompareVersions(c.a, c.b); got != c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := CompareVersions(c.b, c.a); got != -c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestImageNameRE(t *testing.T) {
	match := []string{
		"linux-image-5.10.0-46-amd64", "linux-image-5.10.0-46-amd64-unsigned",
		"linux-image-6.1.0-0.deb11.52-amd64", "linux-image-6.12.117+deb13-amd64",
		"linux-image-6.12.115+deb13.1-amd64-unsigned", "linux-image-7.2.13+deb14-amd64",
	}
	noMatch := []string{
		"linux-image-amd64", "linux-image-6.1-amd64", "linux-image-7.2.13+deb14-cloud-amd64",
		"linux-image-7.2.13+deb14-rt-amd64", "linux-image-6.1.0-56-amd64-dbg",
		"linux-image-amd64-signed-template", "linux-image-6.12-amd64-signed-template",
	}
	for _, n := range match {
		if !imageNameRE.MatchString(n) {
			t.Errorf("%s should match", n)
		}
	}
	for _, n := range noMatch {
		if imageNameRE.MatchString(n) {
			t.Errorf("%s should not match", n)
		}
	}
}

func TestParseMadison(t *testing.T) {
	out := `linux-image-6.1.0-56-amd64 |  6.1.192-2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
linux-image-6.1.0-47-amd64 |  6.1.170-3 | http://deb.debian.org/debian bookworm/main amd64 Packages
`
	c := parseMadison(out)
	if len(c) != 2 || c[0].Package != "linux-image-6.1.0-56-amd64" || c[0].Version != "6.1.192-2" ||
		c[0].Suite != "bookworm-security" || c[0].URI != "http://deb.debian.org/debian-security" || c[1].Suite != "bookworm" {
		t.Errorf("parseMadison = %+v", c)
	}
}

func TestLookupSeries(t *testing.T) {
	for in, want := range map[string]string{"5.10": "5.10", "bookworm": "6.1", "6.12": "6.12", "7": "7", "sid": "sid", "unstable": "sid"} {
		s, ok := LookupSeries(in)
		if !ok || s.Name != want {
			t.Errorf("LookupSeries(%q) = %v, %v; want %s", in, s.Name, ok, want)
		}
	}
	if _, ok := LookupSeries("4.19"); ok {
		t.Error("4.19 should be unknown")
	}
}
