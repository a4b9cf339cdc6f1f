package enforcer

import (
	"errors"
	"io/fs"
	"testing"
)

func TestParseStatHandlesHostileNames(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want procStat
	}{
		{"plain", "42 (sleep) S 7 42 42 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0",
			procStat{comm: "sleep", state: 'S', ppid: 7, flags: 4194304, startTicks: 12345}},
		{"parens and spaces in the name", "42 (a) b (c) R 9 42 42 0 -1 2129984 1 0 0 0 0 0 0 0 20 0 1 0 99 0 0",
			procStat{comm: "a) b (c", state: 'R', ppid: 9, flags: 2129984, startTicks: 99}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseStat([]byte(c.in))
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	for _, bad := range []string{"", "42 sleep S 1", "42 (x) S 1 2 3", "42 (x) S z 1 1 1 -1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) did not fail", bad)
		}
	}
}

func TestKernelThreadDetection(t *testing.T) {
	noExe := &fs.PathError{Op: "readlink", Path: "/proc/9/exe", Err: fs.ErrNotExist}
	cases := []struct {
		name   string
		st     procStat
		exeErr error
		want   bool
	}{
		{"PF_KTHREAD", procStat{flags: pfKthread, ppid: 2}, nil, true},
		{"PF_KTHREAD under another parent", procStat{flags: pfKthread, ppid: 0}, noExe, true},
		{"no exe under kthreadd", procStat{ppid: 2}, noExe, true},
		{"no exe elsewhere (zombie)", procStat{ppid: 100}, noExe, false},
		{"exe unreadable under kthreadd", procStat{ppid: 2}, errors.New("EACCES"), false},
		{"user process", procStat{ppid: 2}, nil, false},
	}
	for _, c := range cases {
		if got := isKernelThread(c.st, c.exeErr); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}
