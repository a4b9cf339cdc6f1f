package main

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc/mgr"
)

// The service is installed with the agent's command line, to start at
// boot and again after a failure; a second install is refused; remove
// removes it, and a second remove says there is none. wine's service
// control manager keeps them in the test's private prefix.
func TestServiceInstallsTheAgentAndRemovesIt(t *testing.T) {
	exe := `C:\Program Files\mcptrace\mcptrace.exe`
	if err := installService(exe, []string{"--log.level", "debug"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeService() })
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	// mgr's Config also asks for levels wine does not implement
	// (ERROR_INVALID_LEVEL): the basic configuration is what is checked.
	path, start := basicConfig(t, s)
	acts, err := s.RecoveryActions()
	s.Close()
	t.Logf("binary path %q, start type %d, recovery %+v (%v)", path, start, acts, err)
	if !strings.HasPrefix(path, `"`+exe+`" agent --log.level debug`) || start != mgr.StartAutomatic {
		t.Errorf("service binary path %q, start type %d", path, start)
	}
	switch {
	case errors.Is(err, windows.ERROR_INVALID_LEVEL):
		// wine 8 stores failure actions but cannot read them back: they
		// are checked on Windows only.
		t.Log("this service control manager cannot read failure actions back (wine): not checked here")
	case err != nil || len(acts) != 1 || acts[0].Type != mgr.ServiceRestart || acts[0].Delay != serviceRestartDelay:
		t.Errorf("recovery actions %+v (%v), want a restart after %s", acts, err, serviceRestartDelay)
	}
	if err := installService(exe, nil); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second install: %v", err)
	}
	if err := removeService(); err != nil {
		t.Fatal(err)
	}
	if s, err := m.OpenService(ServiceName); err == nil {
		s.Close()
		t.Error("the service is still there after remove")
	}
	if err := removeService(); err == nil || !strings.Contains(err.Error(), "no mcptrace service") {
		t.Errorf("a second remove: %v", err)
	}
}

// basicConfig is the service's command line and start type
// (QueryServiceConfig).
func basicConfig(t *testing.T, s *mgr.Service) (string, uint32) {
	t.Helper()
	var need uint32
	buf := make([]byte, 8192)
	c := (*windows.QUERY_SERVICE_CONFIG)(unsafe.Pointer(&buf[0]))
	if err := windows.QueryServiceConfig(s.Handle, c, uint32(len(buf)), &need); err != nil {
		t.Fatalf("QueryServiceConfig: %v", err)
	}
	return windows.UTF16PtrToString(c.BinaryPathName), c.StartType
}
