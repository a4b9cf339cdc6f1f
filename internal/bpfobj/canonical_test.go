package bpfobj

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// build compiles the project's BPF source name.bpf.c ("mcptrace" or
// "tasks") as bpf2go does (bpf/gen.go's flags and the ones bpf2go adds),
// copied under dir with its headers, with edit applied to the source; it
// returns the stripped object's path.
func build(t *testing.T, dir, name string, edit func(string) string) string {
	t.Helper()
	for _, tool := range []string{"clang-19", "llvm-strip-19"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, "compiles the BPF source (scripts/setup.sh test installs it)")
		}
	}
	src := filepath.Join("..", "..", "bpf")
	for _, f := range []string{name + ".bpf.c", "events.h", "task_stdio.h", "include/x86/vmlinux.h"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == name+".bpf.c" && edit != nil {
			b = []byte(edit(string(b)))
		}
		to := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj := filepath.Join(dir, name+"_bpfel.o")
	cc := exec.Command("clang-19", "-O2", "-mcpu=v1", "-O2", "-g", "-Wall", "-Werror", "-I./include/x86", "-I.",
		"-Wunused-command-line-argument", "-target", "bpfel", "-c", filepath.Join(dir, name+".bpf.c"), "-o", obj,
		"-fno-ident", "-fdebug-prefix-map="+dir+"=.", "-fdebug-compilation-dir", ".", "-g",
		`-D__BPF_TARGET_MISSING="GCC error \"The eBPF is using target specific macros, please provide -target that is not bpf, bpfel or bpfeb\""`)
	cc.Dir = dir
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("clang-19: %v\n%s", err, out)
	}
	if out, err := exec.Command("llvm-strip-19", "-g", obj).CombinedOutput(); err != nil {
		t.Fatalf("llvm-strip-19: %v\n%s", err, out)
	}
	return obj
}

func canonical(t *testing.T, path string) []string {
	t.Helper()
	c, err := Canonical(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Two objects clang-19 built from a320d64's source, in /tmp/ab/gen/bpf
// and in /tmp/abcdefgh/gen/bpf: their bytes differ (the forward
// declarations of their BTF types come in another order, and so every
// type ID past them) and they hold one program. CI failed on exactly
// this at a320d64: its checkout's path gave the second.
func TestBTFOrderIsNotAProgramChange(t *testing.T) {
	a := gunzip(t, "testdata/a320d64-in-tmp-ab.o.gz")
	b := gunzip(t, "testdata/a320d64-in-tmp-abcdefgh.o.gz")
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if bytes.Equal(ba, bb) {
		t.Fatal("the two fixtures are the same bytes: they no longer show a reordering")
	}
	ca, cb := canonical(t, a), canonical(t, b)
	if d := Diff(ca, cb, 20); d != nil {
		t.Fatalf("a reordering of BTF types reads as another program:\n%s", strings.Join(d, "\n"))
	}
	countParts(t, ca, 4, 5)
}

func gunzip(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(name), ".gz"))
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// The source built where the test runs is the committed object's program
// (what make check-generate asks, with the bytes it may not keep).
func TestTheCommittedObjectIsWhatTheSourceBuilds(t *testing.T) {
	for _, o := range []struct {
		name           string
		programs, maps int
	}{{"mcptrace", 4, 5}, {"tasks", 2, 1}} {
		name := o.name
		got := canonical(t, build(t, filepath.Join(t.TempDir(), "gen", "bpf"), name, nil))
		if d := Diff(canonical(t, filepath.Join("..", "..", "bpf", name+"_bpfel.o")), got, 20); d != nil {
			t.Fatalf("the committed %s object is not what the source builds (run make generate):\n%s", name, strings.Join(d, "\n"))
		}
		countParts(t, got, o.programs, o.maps)
	}
}

// countParts fails when the description lacks types, or has fewer
// programs or maps than the object holds: a Canonical that described
// nothing would call any two objects equal.
func countParts(t *testing.T, c []string, minPrograms, minMaps int) {
	t.Helper()
	var types, programs, maps int
	for _, l := range c {
		switch {
		case strings.HasPrefix(l, "type "):
			types++
		case strings.HasPrefix(l, "program "):
			programs++
		case strings.HasPrefix(l, "map "):
			maps++
		}
	}
	if types < 100 || programs < minPrograms || maps < minMaps {
		t.Fatalf("the description misses parts: %d types, %d programs, %d maps", types, programs, maps)
	}
}

// One changed constant, one changed map size: each is a different
// program, and Diff names the lines.
func TestAnyChangeIsADifferentProgram(t *testing.T) {
	base := t.TempDir()
	want := canonical(t, build(t, filepath.Join(base, "orig"), "mcptrace", nil))
	for _, c := range []struct{ name, from, to, shows string }{
		{"constant", "w->sent >= REQUESTS_PER_UID_PER_SEC", "w->sent >= REQUESTS_PER_UID_PER_SEC - 1", "request_recv"},
		{"map", "__uint(max_entries, REQUEST_UIDS);", "__uint(max_entries, REQUEST_UIDS + 1);", "map request_uid_rate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := canonical(t, build(t, filepath.Join(base, c.name), "mcptrace", func(s string) string {
				if !strings.Contains(s, c.from) {
					t.Fatalf("mcptrace.bpf.c no longer has %q: pick another change", c.from)
				}
				return strings.Replace(s, c.from, c.to, 1)
			}))
			d := Diff(want, got, 1000)
			if d == nil {
				t.Fatal("a changed source is the same program")
			}
			if !strings.Contains(strings.Join(d, "\n"), c.shows) {
				t.Fatalf("the difference does not show %q:\n%s", c.shows, strings.Join(d, "\n"))
			}
		})
	}
}
