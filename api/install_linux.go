package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	startByHand = "sudo mcptrace agent"
	stopByHand  = "Ctrl-C (or kill -TERM) where mcptrace agent runs"
)

// unitFiles are where an installed mcptrace.service would be: with one
// of them and no note, the agent is the unit's.
var unitFiles = []string{"/etc/systemd/system/" + DefaultUnit, "/lib/systemd/system/" + DefaultUnit, "/usr/lib/systemd/system/" + DefaultUnit}

// DetectInstall is how this process (the agent) was started, from what
// its starter left in its environment: systemd's INVOCATION_ID and
// cgroup, Kubernetes' service variables, a container engine's marks.
func DetectInstall() Install {
	switch {
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		return Install{Kind: InstallKubernetes, Namespace: os.Getenv("POD_NAMESPACE")}.clean()
	case os.Getenv("INVOCATION_ID") != "":
		return Install{Kind: InstallSystemd, Unit: ownUnit()}.clean()
	}
	if startedByEngine() {
		return Install{Kind: InstallContainer}
	}
	return Install{Kind: InstallManual}
}

// startedByEngine: this process is a container's first process, started
// by the engine's shim (containerd-shim for docker and containerd,
// conmon for podman). A process someone started by hand inside a
// container is not: the container is not the agent's.
func startedByEngine() bool {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return false
	}
	comm, err := os.ReadFile("/proc/" + f[1] + "/comm")
	if err != nil {
		return false
	}
	c := strings.TrimSpace(string(comm))
	return strings.HasPrefix(c, "containerd-shim") || c == "conmon"
}

// ownUnit is the systemd service whose cgroup this process is in, or "".
func ownUnit() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	unit := ""
	for _, line := range strings.Split(string(b), "\n") {
		_, path, ok := strings.Cut(line, "::")
		if !ok {
			if i := strings.LastIndexByte(line, ':'); i >= 0 {
				path = line[i+1:]
			}
		}
		for _, c := range strings.Split(path, "/") {
			if strings.HasSuffix(c, ".service") {
				unit = c
			}
		}
	}
	return unit
}

// installNote is the file beside the socket that keeps the Install of
// the agent that serves (or served) there.
func installNote(socket string) string { return socket + ".install.json" }

// WriteInstall notes in for clients beside socket, replacing the note of
// an earlier agent. It writes only into a directory root owns that no
// one else may write (the default /run/mcptrace): elsewhere a client
// would have no reason to trust the note, and it is not written.
func WriteInstall(socket string, in Install) error {
	dir := filepath.Dir(socket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install note: %w", err)
	}
	if !rootOnly(dir) {
		return nil
	}
	b, err := json.Marshal(in.clean())
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".install-*")
	if err != nil {
		return fmt.Errorf("install note: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("install note: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("install note: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install note: %w", err)
	}
	if err := os.Rename(tmp.Name(), installNote(socket)); err != nil {
		return fmt.Errorf("install note: %w", err)
	}
	return nil
}

// ReadInstall is how the agent at socket was installed: its note when
// root wrote one there, else a systemd unit when one is installed, else
// by hand.
func ReadInstall(socket string) Install {
	if in, ok := readNote(socket); ok {
		return in
	}
	for _, f := range unitFiles {
		if _, err := os.Stat(f); err == nil {
			return Install{Kind: InstallSystemd, Unit: DefaultUnit}
		}
	}
	return Install{Kind: InstallManual}
}

func readNote(socket string) (Install, bool) {
	if !rootOnly(filepath.Dir(socket)) {
		return Install{}, false
	}
	f, err := os.OpenFile(installNote(socket), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Install{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !ownedByRoot(fi) {
		return Install{}, false
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return Install{}, false
	}
	var in Install
	dec := json.NewDecoder(bytes.NewReader(b))
	if dec.Decode(&in) != nil {
		return Install{}, false
	}
	return in.clean(), true
}

// rootOnly: dir is a directory (not a link) root owns that group and
// others may not write.
func rootOnly(dir string) bool {
	fi, err := os.Lstat(dir)
	return err == nil && fi.IsDir() && ownedByRoot(fi) && fi.Mode().Perm()&0o022 == 0
}

func ownedByRoot(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}
