package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/state"
)

func TestAMissingKernelFeatureExitsWithTheStatusTheUnitDoesNotRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int // 0: not an exitError
	}{
		{"a missing kernel feature", fmt.Errorf("sensor: %w", &sensor.FeatureError{Feature: "BPF ring buffer", Needs: "Linux 5.8", Err: errors.New("EINVAL")}), sensor.ExitUnsupported},
		{"no privilege", fmt.Errorf("sensor: %w", &sensor.FeatureError{Feature: "loading BPF programs", Needs: "root", Err: fmt.Errorf("%w: %w", sensor.ErrNoPrivilege, os.ErrPermission)}), sensor.ExitNoPrivilege},
		{"any other error", errors.New("config: bad value"), 0},
		{"a clean stop", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agentExit(tc.err, "/nonexistent/mcptrace.sock")
			var ee exitError
			switch {
			case tc.code != 0 && (!errors.As(err, &ee) || ee.code != tc.code):
				t.Errorf("agentExit(%v) = %v, want exit status %d", tc.err, err, tc.code)
			case tc.code == 0 && err != tc.err:
				t.Errorf("agentExit(%v) = %v, want it unchanged", tc.err, err)
			}
		})
	}
}

// Another agent holding the state or the pins (one that starts and does
// not serve yet) is named as such, with the command that stops it.
func TestAStartBesideAnotherAgentSaysHowToStopIt(t *testing.T) {
	for _, cause := range []error{state.ErrLocked, sensor.ErrPinDirInUse} {
		err := agentExit(fmt.Errorf("open: %w", cause), "/nonexistent/mcptrace.sock")
		if !errors.Is(err, cause) || !strings.Contains(err.Error(), "another mcptrace agent is running") || !strings.Contains(err.Error(), "Stop it first: ") {
			t.Errorf("agentExit(%v) = %v", cause, err)
		}
	}
}

// sdNotify speaks systemd's protocol: one datagram on NOTIFY_SOCKET, in
// the abstract namespace when the name starts with @.
func TestSdNotifySendsOneDatagramToTheServiceManager(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		name := filepath.Join(t.TempDir(), "notify")
		env := name
		if abstract {
			name = fmt.Sprintf("\x00mcptrace-test-notify-%d", os.Getpid())
			env = "@" + name[1:]
		}
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		t.Setenv("NOTIFY_SOCKET", env)
		if err := sdNotify("READY=1"); err != nil {
			t.Fatalf("abstract=%v: %v", abstract, err)
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != "READY=1" {
			t.Errorf("abstract=%v: the manager read %q, %v; want READY=1", abstract, buf[:n], err)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nothing sent and no error", err)
	}
}
