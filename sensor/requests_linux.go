package sensor

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/bpf"
)

// Engine API requests: the kernel reads the first bytes of what a
// container client (a process whose name is one of
// Options.ContainerClients) sent on a unix stream connection to one of
// the engine sockets (by inode: SetEngineSockets), as the engine reads
// them, at most 256 records a second per sender's uid and 1024 per CPU,
// and reports the ones that start a container (containers.ParseRequest)
// as lineage.KindRequest events, in their canonical form; the sender is
// the process that connected. Which session the sender belongs to is not
// known in the kernel: the tracker drops the requests of processes in no
// session.
//
// The hook is the kernel's copy of a socket buffer to user space
// (tp_btf/skb_copy_datagram_iovec): it runs for socket reads only, so no
// other system call pays for it, and it is attached from the first
// engine socket on (SetEngineSockets, or Options.EngineSockets before a
// previous agent's set is taken over): a client that sends its start a
// moment after its exec is read however late user space learns of the
// exec.

// requestsProgram names the program (and its link pin) that reads requests.
const requestsProgram = bpf.McptraceProgRequestRecv

// legacyRequestsProgram is the request reader of earlier builds (on
// tp_btf/sys_enter), whose skips a set taken over from one still counts.
const legacyRequestsProgram = "request_sys_enter"

// commLen is COMM_LEN of bpf/events.h.
const commLen = 16

// stubRequests makes the request reader of spec a program that does
// nothing, so that the rest loads where the kernel refuses it; it
// returns whether spec has one. Its error is kept (RequestsErr).
func stubRequests(spec *ebpf.CollectionSpec) bool {
	p := spec.Programs[requestsProgram]
	if p == nil {
		return false
	}
	p.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	return true
}

// isRequestsLoadError reports whether err is the kernel refusing the
// request reader (and nothing else).
func isRequestsLoadError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "program "+requestsProgram+":")
}

// prepareRequests fills the client names; the reader is attached once an
// engine socket exists (SetEngineSockets): a node without a container
// engine never pays for a hook on socket reads. An error leaves the
// sensor running without it: container attribution is off (RequestsErr
// says why), process tracking is not.
func (s *Sensor) prepareRequests(opts Options) error {
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
	return nil
}

// attachRequests attaches the request reader; s.engines.mu is held.
func (s *Sensor) attachRequests() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.RequestRecv, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		return &FeatureError{Feature: "a BTF tracepoint on socket reads (reading container clients' engine requests)", Needs: "Linux 5.5 or newer", Err: err}
	}
	if s.own.dir != "" {
		if err := l.Pin(s.own.linkPath(requestsProgram)); err != nil {
			l.Close()
			return fmt.Errorf("pin %s link: %w", requestsProgram, err)
		}
	}
	s.mu.Lock()
	if s.closed { // Close ran meanwhile: it did not see this link
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.links = append(s.links, l)
	s.own.primaries[requestsProgram] = s.objs.RequestRecv
	s.mu.Unlock()
	s.log.Info("reading container clients' engine requests")
	return nil
}

// engineSockets remembers the inodes SetEngineSockets put in the kernel,
// and whether the request reader is attached.
type engineSockets struct {
	mu       sync.Mutex
	keys     map[bpf.McptraceSockId]bool
	attached bool
}

// SetEngineSockets tells the kernel which sockets are engines: the inodes
// the paths name now (a symbolic link is followed), and attaches the
// request reader the first time one exists. A path with no socket behind
// it (the engine is not running) is left out; call it again when the
// engine may have come back or restarted (a new socket is a new inode).
// It returns the paths that are not sockets, with why. Not safe to call
// concurrently with Close.
func (s *Sensor) SetEngineSockets(paths []string) error {
	if s.requestsErr != nil {
		return s.requestsErr
	}
	want := map[bpf.McptraceSockId]bool{}
	var errs []error
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || fi.Mode()&os.ModeSocket == 0 {
			errs = append(errs, fmt.Errorf("%s is not a socket", p))
			continue
		}
		// The kernel's dev_t is major << 20 | minor; stat(2) encodes it
		// otherwise.
		want[bpf.McptraceSockId{Ino: st.Ino, Dev: unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)}] = true
	}
	es := &s.engines
	es.mu.Lock()
	defer es.mu.Unlock()
	for k := range es.keys {
		if !want[k] {
			if err := s.objs.EngineSockets.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("forget an engine socket: %w", err))
			}
		}
	}
	for k := range want {
		if es.keys[k] {
			continue // already there: no system call a second
		}
		if err := s.objs.EngineSockets.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			errs = append(errs, fmt.Errorf("engine socket: %w", err))
			delete(want, k)
		}
	}
	es.keys = want
	if len(want) > 0 && !es.attached {
		if err := s.attachRequests(); err != nil {
			s.requestsErr = err
			return err
		}
		es.attached = true
	}
	return errors.Join(errs...)
}

// RequestsDropped counts engine requests the kernel read that start no
// container: dropped unread.
func (s *Sensor) RequestsDropped() uint64 { return s.requestsDropped.Load() }

// RequestsErr is why engine requests are not read (container attribution
// is off), or nil when they are.
func (s *Sensor) RequestsErr() error { return s.requestsErr }

// RequestDrops counts the requests the kernel read but did not send (over
// the node's rate limit, or unreadable) and the runs of the reader it
// skipped (Counters.RequestSkips); overUID those over their sender's
// uid's budget (REQUESTS_PER_UID_PER_SEC), which blind that user alone.
// Each may be a container that goes unattributed.
func (s *Sensor) RequestDrops() (node, overUID uint64, err error) {
	cs, err := s.Counters()
	if err != nil {
		return 0, 0, err
	}
	for _, c := range cs {
		node += c.RequestSkips
	}
	for i := uint32(0); i < uint32(bpf.McptraceRequestDropREQUEST_DROP_MAX); i++ {
		v, err := sumPerCPU(s.objs.RequestDrops, "request_drops", i)
		if err != nil {
			return 0, 0, err
		}
		if i == uint32(bpf.McptraceRequestDropREQUEST_DROP_UID_RATE) {
			overUID += v
		} else {
			node += v
		}
	}
	return node, overUID, nil
}
