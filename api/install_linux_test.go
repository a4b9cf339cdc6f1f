package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// How the agent was installed decides the command a client names; a
// note is trusted only where only root may write, and what it names is
// printed in a command only when it is a plain name.
func TestInstallNoteSaysHowToStartTheAgent(t *testing.T) {
	testenv.Root(t) // the note is written into, and trusted from, root's directories only
	for _, tc := range []struct {
		in    Install
		start string
	}{
		{Install{Kind: InstallSystemd, Unit: "mcptrace.service"}, "sudo systemctl start mcptrace.service"},
		{Install{Kind: InstallSystemd, Unit: "x; rm -rf /"}, "sudo systemctl start mcptrace.service"},
		{Install{Kind: InstallKubernetes, Namespace: "agents"}, "kubectl -n agents rollout restart daemonset/mcptrace"},
		{Install{Kind: InstallContainer}, "docker start mcptrace"},
		{Install{Kind: InstallManual}, "sudo mcptrace agent"},
		{Install{Kind: "$(reboot)"}, "sudo mcptrace agent"},
	} {
		socket := filepath.Join(t.TempDir(), "mcptrace.sock")
		if err := WriteInstall(socket, tc.in); err != nil {
			t.Fatal(err)
		}
		if got := ReadInstall(socket).Start(); got != tc.start {
			t.Errorf("%+v: start with %q, want %q", tc.in, got, tc.start)
		}
	}

	// A directory others may write: no note is written there, and one
	// found there is not believed.
	open := t.TempDir()
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(open, "mcptrace.sock")
	if err := WriteInstall(socket, Install{Kind: InstallSystemd}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(installNote(socket)); err == nil {
		t.Error("a note was written into a directory anyone may write")
	}
	if err := os.WriteFile(installNote(socket), []byte(`{"kind":"kubernetes","namespace":"evil"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ReadInstall(socket); got.Kind == InstallKubernetes || strings.Contains(got.Start(), "evil") {
		t.Errorf("a note in a directory anyone may write was believed: %+v", got)
	}
}
