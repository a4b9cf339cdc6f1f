package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

func TestOnlyWhoCouldUseTheEngineMayHaveItsContainersStopped(t *testing.T) {
	testenv.Root(t)
	sock := filepath.Join(t.TempDir(), "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Group membership as the user and group databases would say (they
	// differ between machines and are not this test's subject): uid 1 is
	// in group 1.
	groups := func(uid uint32) []string {
		if uid == 1 {
			return []string{"1"}
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		uid, gid int
		mode     os.FileMode
		who      uint32
		kernel   []uint32 // the groups the kernel gave a process of who
		ok       bool
		why      string
	}{
		{"root always may", 0, 0, 0o600, 0, nil, true, ""},
		{"a member of the socket's group may", 0, 1, 0o660, 1, nil, true, ""},
		{"a member may not when the group may not write", 0, 1, 0o640, 1, nil, false, "not writable by its group"},
		{"anyone else may not", 0, 1, 0o660, 65534, nil, false, "not in group 1"},
		{"the owner of a rootless engine's socket may", 65534, 65534, 0o600, 65534, nil, true, ""},
		// Membership from LDAP, SSSD or setgroups at exec is in no
		// /etc/group: the kernel's groups of a process of the user say it.
		{"a member by the kernel's groups alone may", 0, 4242, 0o660, 65534, []uint32{65534, 4242}, true, ""},
		{"the kernel's groups of another group say no", 0, 4242, 0o660, 65534, []uint32{65534, 4343}, false, "not in group 4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Chown(sock, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, tc.mode); err != nil {
				t.Fatal(err)
			}
			ok, why := mayUseEngine(sock, tc.who, tc.kernel, groups)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Errorf("mayUseEngine(uid %d) = %v %q, want %v and a reason naming %q", tc.who, ok, why, tc.ok, tc.why)
			}
		})
	}
	if ok, why := mayUseEngine(filepath.Join(t.TempDir(), "none.sock"), 1000, nil, groups); ok || !strings.Contains(why, "none.sock") {
		t.Errorf("a missing socket: %v %q", ok, why)
	}
}
