package main_test

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// Root running wrap-config on another user's configuration changes
// nothing and says whom to run it as; run as that user, it wraps.
func TestWrapConfigAsRootRefusesAnotherUsersFileSayingWhomToRunItAs(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the refusal is root's")
	}
	const uid = 65534
	name := "#65534"
	if u, err := user.LookupId("65534"); err == nil {
		name = u.Username
	}
	bin := build(t)
	home := t.TempDir()
	file := filepath.Join(home, ".mcp.json")
	const config = `{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}}}` + "\n"
	if err := errors.Join(os.Chmod(filepath.Dir(home), 0o755), os.Chown(home, uid, uid),
		os.WriteFile(file, []byte(config), 0o644), os.Chown(file, uid, uid)); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := run(t, bin, "wrap-config", file)
	want := "run it as that user: sudo -u " + name + " mcptrace wrap-config " + file
	if err == nil || !strings.Contains(stderr, want) || !strings.Contains(stderr, "was not changed") {
		t.Fatalf("root's wrap-config of uid %d's file: %v\n%s\nwant it refused, saying %q", uid, err, stderr, want)
	}
	if b, _ := os.ReadFile(file); string(b) != config {
		t.Errorf("the file changed: %q", b)
	}
	if ents, _ := os.ReadDir(home); len(ents) != 1 {
		t.Errorf("%d entries beside the file, want none (no backup, no temporary file)", len(ents)-1)
	}
	cmd := exec.Command(bin, "wrap-config", file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if b, _ := os.ReadFile(file); err != nil || !strings.Contains(string(b), `"exec"`) {
		t.Errorf("as its owner: %v, %s; the file holds %q", err, out, b)
	}
}
