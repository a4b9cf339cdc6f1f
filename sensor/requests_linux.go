package sensor

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/procfs"
)

// Engine API requests: the kernel reads the first bytes a container
// client (a process running a program of Options.ContainerClients) sends
// on a unix socket connected to one of Options.EngineSockets, and reports
// the ones that start a container (containers.ParseRequest) as
// lineage.KindRequest events, in their canonical form. Which session the
// sender belongs to is not known in the kernel: the tracker drops the
// requests of processes in no session.

// requestsProgram names the program (and its link pin) that reads requests.
const requestsProgram = "request_sys_enter"

// commLen and sockPathLen are COMM_LEN and SOCK_PATH_LEN of bpf/events.h.
const (
	commLen     = 16
	sockPathLen = 108
)

// attachRequests fills the client and engine tables and attaches the
// request reader. An error leaves the sensor running without it: container
// attribution is off (RequestsErr says why), process tracking is not.
func (s *Sensor) attachRequests(opts Options) error {
	if len(opts.EngineSockets) == 0 {
		return errors.New("no container engine socket is configured")
	}
	if len(opts.ContainerClients) == 0 {
		return errors.New("no container client program is configured")
	}
	for _, c := range opts.ContainerClients {
		k := make([]byte, commLen)
		copy(k, c[:min(len(c), commLen-1)])
		if err := s.objs.ClientComms.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("container client %q: %w", c, err)
		}
	}
	for _, p := range socketSpellings(opts.EngineSockets) {
		k := make([]byte, sockPathLen)
		if len(p) >= sockPathLen {
			return fmt.Errorf("engine socket path %s is longer than a unix socket path can be (%d bytes)", p, sockPathLen-1)
		}
		copy(k, p)
		if err := s.objs.EngineSockets.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("engine socket %s: %w", p, err)
		}
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.RequestSysEnter, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		return &FeatureError{Feature: "a BTF tracepoint on system call entry (reading container clients' engine requests)", Needs: "Linux 5.5 or newer", Err: err}
	}
	if s.own.dir != "" {
		if err := l.Pin(s.own.linkPath(requestsProgram)); err != nil {
			l.Close()
			return fmt.Errorf("pin %s link: %w", requestsProgram, err)
		}
	}
	s.links = append(s.links, l)
	s.own.primaries[requestsProgram] = s.objs.RequestSysEnter
	s.seedClients(opts.ContainerClients)
	return nil
}

// socketSpellings returns each path as given and, when its directory is
// reached through a symbolic link (/var/run → /run), as resolved: the
// kernel compares the path the engine bound, which may be either.
func socketSpellings(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		add(p)
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			add(filepath.Join(dir, filepath.Base(p)))
		}
	}
	return out
}

// seedClients adds the clients already running (started before the
// programs were attached, or under a previous agent) to the kernel's
// table, by process name and start tick as /proc shows them.
func (s *Sensor) seedClients(names []string) {
	want := map[string]bool{}
	for _, n := range names {
		want[n[:min(len(n), commLen-1)]] = true
	}
	snaps, err := procfs.Scan("/proc")
	if err != nil {
		s.log.Warn("could not look for running container clients; their requests are read from their next exec on", "err", err)
		return
	}
	seeded := 0
	for _, p := range snaps {
		if !want[p.Comm] {
			continue
		}
		if err := s.objs.Clients.Update(p.ID.PID, p.ID.Tick(), ebpf.UpdateAny); err != nil {
			s.log.Warn("could not add a running container client", "pid", p.ID.PID, "err", err)
			continue
		}
		seeded++
	}
	if seeded > 0 {
		s.log.Info("container clients already running", "processes", seeded)
	}
}

// RequestsDropped counts engine requests the kernel read that start no
// container: dropped unread.
func (s *Sensor) RequestsDropped() uint64 { return s.requestsDropped.Load() }

// RequestsErr is why engine requests are not read (container attribution
// is off), or nil when they are.
func (s *Sensor) RequestsErr() error { return s.requestsErr }

// ClientMisses counts container clients the kernel's table had no room
// for and requests it matched but could not read, in every set the
// sensor reads: each is a container that may go unattributed.
func (s *Sensor) ClientMisses() (uint64, error) {
	var n uint64
	for i := uint32(0); i < 2; i++ {
		v, err := sumPerCPU(s.objs.ClientMisses, "client_misses", i)
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// canonicalRequest returns the canonical form of a request line the kernel
// read, or "" when it does not start a container (then it is dropped).
func canonicalRequest(line []byte) string {
	id, verb, ok := containers.ParseRequest(string(line))
	if !ok {
		return ""
	}
	return containers.Request(id, verb)
}
