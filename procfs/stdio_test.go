package procfs

import "testing"

func TestStdinAndCgroupAndWriteFlagsAreRead(t *testing.T) {
	for _, tc := range []struct {
		target string
		kind   StdinKind
		ino    uint64
	}{
		{"pipe:[4026532]", StdinPipe, 4026532},
		{"pipe:[x]", StdinOther, 0},
		{"socket:[77]", StdinSocket, 77},
		{"/dev/null", StdinDevNull, 0},
		{"/dev/pts/3", StdinTTY, 0},
		{"/home/u/input.txt", StdinFile, 0},
		{"anon_inode:[eventfd]", StdinOther, 0},
		{"", StdinClosed, 0},
	} {
		if k, ino := stdinOf(tc.target); k != tc.kind || ino != tc.ino {
			t.Errorf("stdinOf(%q) = %s %d, want %s %d", tc.target, k, ino, tc.kind, tc.ino)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{"0::/user.slice/user-1000.slice/session-3.scope\n", "/user.slice/user-1000.slice/session-3.scope"},
		{"12:cpu,cpuacct:/x\n1:name=systemd:/system.slice/cron.service\n0::/\n", "/"},
		{"12:cpu,cpuacct:/x\n1:name=systemd:/system.slice/cron.service\n", "/system.slice/cron.service"},
		{"garbage\n", ""},
	} {
		if got := cgroupOf(tc.data); got != tc.want {
			t.Errorf("cgroupOf(%q) = %q, want %q", tc.data, got, tc.want)
		}
	}
}
