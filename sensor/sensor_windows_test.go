package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/etwtest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/etw"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// These tests run under wine (scripts/wine-test.sh) and on Windows. Wine's
// ETW delivers no events, so an etwtest.Session stands in for the
// session's delivery: a test calls the Handler the sensor gave Consume, as
// ProcessTrace's callback does, with the PIDs and create times of real
// processes, which the sensor reads for real.

func TestMain(m *testing.M) {
	testenv.RunHelper(testenv.WindowsHelpers)
	os.Exit(m.Run())
}

// rig is a sensor on an etwtest.Session, seeded from a real snapshot, reading
// started processes for real, with the owners of a fresh table.
type rig struct {
	s     *Sensor
	sess  *etwtest.Session
	h     *etw.Handler
	clock winproc.Clock
	owner func(owners.Token) uint32
}

func newRig(t *testing.T, edit func(*etwConfig)) *rig {
	t.Helper()
	tab, err := owners.Load("")
	if err != nil {
		t.Fatal(err)
	}
	// Numbered by user SID alone: under wine every token is elevated,
	// which the table numbers Root, 0, the zero value of Event.UID.
	owner := func(tok owners.Token) uint32 { uid, _ := tab.Owner(owners.Token{SID: tok.SID}); return uid }
	clock, err := winproc.SystemClock()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := winproc.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := etwConfig{clock: clock, seed: seed, read: etw.ReadStarted, queueSize: queueSize, barrierDelay: barrierDelay, lossPoll: etw.LossPoll}
	if edit != nil {
		edit(&cfg)
	}
	sess := etwtest.New()
	s := newSensor(Options{Owner: owner, SessionName: "mcptrace-test", Logger: testenv.Logger(t, slog.LevelDebug)}, sess, cfg)
	t.Cleanup(func() { s.Close() })
	h := sess.Handler(t, 10*time.Second)
	return &rig{s: s, sess: sess, h: h, clock: clock, owner: owner}
}

// startChild starts a "sleep" helper with args and opens it; both end
// with the test.
func startChild(t *testing.T, args ...string) (*exec.Cmd, *winproc.Handle) {
	t.Helper()
	child := testenv.Helper("sleep", args...)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	h, err := winproc.Open(uint32(child.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return child, h
}

// readUntil reads batches until barrier seq is reported, and returns the
// events read before it and with it.
func readUntil(t *testing.T, s *Sensor, seq uint64, within time.Duration) []lineage.Event {
	t.Helper()
	type res struct {
		evs []lineage.Event
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var evs []lineage.Event
		for {
			b, err := s.ReadBatch(maxTestBatch)
			if err != nil {
				ch <- res{evs, err}
				return
			}
			evs = append(evs, b.Events...)
			if b.Barrier >= seq {
				ch <- res{evs, nil}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("ReadBatch: %v (after %d events)", r.err, len(r.evs))
		}
		return r.evs
	case <-time.After(within):
		t.Fatalf("barrier %d was not reported within %v", seq, within)
		return nil
	}
}

const maxTestBatch = 2

// A real process, told to the sensor as ETW tells its start, comes out
// of ReadBatch as a fork by the seeded test process and an exec with the
// command line read from its PEB, both owned by its token's owner; its
// stop comes out as an exit with its code; and a barrier asked once it
// has exited is reported after its exit, even though ETW delivered the
// stop after the barrier was asked, and no sooner than ETW's flush delay.
func TestARealProcessComesOutAsForkExecExitBeforeTheBarrier(t *testing.T) {
	r := newRig(t, nil)
	child, h := startChild(t, "--token=s3cr3t", "two words", `quote"d`)
	self, selfCreate, err := winproc.Self()
	if err != nil {
		t.Fatal(err)
	}
	image := `\Device\HarddiskVolume1\` + filepath.Base(os.Args[0])
	r.h.Start(etw.ProcessStart{Version: 3, ProcessID: h.PID, SequenceNumber: 900, CreateTime: h.Create, ParentProcessID: self, ImageName: image})
	if err := h.Terminate(3); err != nil {
		t.Fatal(err)
	}
	if done, _ := h.Wait(10 * time.Second); !done {
		t.Fatal("the child did not exit")
	}
	_ = child.Wait()
	exited := winproc.FiletimeNow()
	// The child has exited when the barrier is asked; ETW delivers its
	// stop later, within its flush period, as it does a buffer that did
	// not fill.
	asked := time.Now()
	if err := r.s.Barrier(1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(barrierDelay / 3)
	r.h.Stop(etw.ProcessStop{Version: 2, ProcessID: h.PID, SequenceNumber: 900, CreateTime: h.Create, ExitTime: exited, ExitCode: 3, ImageName: filepath.Base(os.Args[0])})
	evs := readUntil(t, r.s, 1, 30*time.Second)
	if waited := time.Since(asked); waited < barrierDelay {
		t.Errorf("the barrier was reported %v after it was asked, before ETW's flush delay %v", waited, barrierDelay)
	}

	if len(evs) != 3 || evs[0].Kind != lineage.KindFork || evs[1].Kind != lineage.KindExec || evs[2].Kind != lineage.KindExit {
		t.Fatalf("events before the barrier: %+v; want fork, exec, exit", evs)
	}
	id := lineage.ID{PID: h.PID, Start: r.clock.Since(h.Create)}
	selfID := lineage.ID{PID: self, Start: r.clock.Since(selfCreate)}
	tok, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	uid := r.owner(tok)
	if uid < owners.FirstUID || uid == owners.Unknown {
		t.Fatalf("the child's token %+v is numbered %d, not as a user", tok, uid)
	}
	fork, exe, exit := evs[0], evs[1], evs[2]
	if fork.Proc != id || fork.Creator != selfID || fork.UID != uid {
		t.Errorf("fork %+v: want %v created by the test process %v, owned by %d", fork, id, selfID, uid)
	}
	if exe.Proc != id || exe.UID != uid || exe.Filename != image || exe.Comm != filepath.Base(os.Args[0]) {
		t.Errorf("exec %+v: want %v running %s, owned by %d", exe, id, image, uid)
	}
	if exe.ArgvTruncated || len(exe.Argv) != len(child.Args) || !slices.Equal(exe.Argv[1:], child.Args[1:]) {
		t.Errorf("exec argv %q (truncated %v), want %q", exe.Argv, exe.ArgvTruncated, child.Args)
	}
	if exit.Proc != id || exit.ExitCode != 3 {
		t.Errorf("exit %+v: want %v with code 3", exit, id)
	}
	cs, err := r.s.Counters()
	if err != nil || len(cs) != 1 {
		t.Fatalf("Counters: %+v, %v", cs, err)
	}
	c := cs[0]
	if !strings.HasPrefix(c.Set, "etw-") || c.Read != 3 || c.Discarded != 0 || c.Lost[lineage.KindFork]+c.Lost[lineage.KindExec]+c.Lost[lineage.KindExit] != 0 {
		t.Errorf("counters %+v: want set etw-…, 3 read, nothing lost", c)
	}
}

// What the queue cannot hold is dropped whole and counted per kind in
// Counters.Lost, without making the ETW callback wait; a payload that
// did not decode counts as lost too, and is reported in the stream; the
// session's own losses grow Counters.Discarded.
func TestOverflowUndecodablesAndSessionLossesAreCounted(t *testing.T) {
	r := newRig(t, func(c *etwConfig) { c.queueSize = 4; c.lossPoll = 10 * time.Millisecond })
	_, h := startChild(t, "x")
	start := etw.ProcessStart{ProcessID: h.PID, CreateTime: h.Create, ImageName: `\Device\HarddiskVolume1\x.exe`}
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		r.h.Start(start)
		r.h.Start(start)
		r.h.Start(start) // the queue holds 4 events: dropped
		r.h.Stop(etw.ProcessStop{ProcessID: h.PID, CreateTime: h.Create, ExitTime: winproc.FiletimeNow()})
	}()
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("the ETW callback was held up by a full queue")
	}
	lost, err := r.s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if lost[lineage.KindFork] != 1 || lost[lineage.KindExec] != 1 || lost[lineage.KindExit] != 1 {
		t.Errorf("lost %v: want one fork, one exec, one exit", lost)
	}
	b, err := r.s.ReadBatch(10)
	if err != nil || len(b.Events) != 4 || b.Events[3].Kind != lineage.KindExec {
		t.Fatalf("ReadBatch: %+v, %v: want the two starts that fit", b, err)
	}

	r.h.Bad(etw.EventProcessStop, 7, etw.ErrVersion)
	b, err = r.s.ReadBatch(10)
	if err != nil || b.Undecodable != 1 || !errors.Is(b.Err, etw.ErrVersion) || len(b.Events) != 0 {
		t.Fatalf("ReadBatch after a bad payload: %+v, %v", b, err)
	}
	if lost, _ := r.s.Lost(); lost[lineage.KindExit] != 2 {
		t.Errorf("lost %v after an undecodable stop: want two exits", lost)
	}

	r.sess.SetLosses(etw.Losses{Events: 2, RealTimeBuffers: 1})
	testenv.Eventually(t, "the session's losses in Counters.Discarded", func() (bool, string) {
		cs, err := r.s.Counters()
		if err != nil {
			return false, err.Error()
		}
		return cs[0].Discarded == 3, fmt.Sprintf("discarded %d, want 3", cs[0].Discarded)
	})
}

// After Close, ReadBatch returns ErrClosed, one blocked in it too, and so
// does Barrier; the session is stopped and its consumer has returned.
// A consumer that ends by itself ends ReadBatch with its error instead.
func TestCloseEndsReadBatchAndAConsumerEndEndsIt(t *testing.T) {
	r := newRig(t, nil)
	res := make(chan error, 1)
	go func() { _, err := r.s.ReadBatch(10); res <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a blocked ReadBatch returned %v at Close, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked ReadBatch did not return at Close")
	}
	if _, err := r.s.ReadBatch(10); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadBatch after Close: %v", err)
	}
	if err := r.s.Barrier(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Barrier after Close: %v", err)
	}
	select {
	case <-r.sess.Stopped():
	default:
		t.Error("Close did not stop the session")
	}
	select {
	case <-r.s.consumed:
	default:
		t.Error("Close returned before the consumer did")
	}

	r = newRig(t, nil)
	_, h := startChild(t, "y")
	r.h.Start(etw.ProcessStart{ProcessID: h.PID, CreateTime: h.Create, ImageName: `\Device\HarddiskVolume1\y.exe`})
	gone := errors.New("the session's consumer failed")
	r.sess.End(gone)
	if b, err := r.s.ReadBatch(10); err != nil || len(b.Events) != 2 {
		t.Fatalf("what was queued before the consumer ended: %+v, %v", b, err)
	}
	if _, err := r.s.ReadBatch(10); !errors.Is(err, gone) {
		t.Fatalf("ReadBatch after the consumer ended: %v, want its error", err)
	}
}

// Under wine the test runs as an administrator, elevated: Preflight
// passes. Open without Owner is refused before anything starts. What
// Windows does not do is said, not faked.
func TestPreflightOpenRefusalAndWhatWindowsDoesNotDo(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Fatalf("Preflight: %v", err)
	}
	s, err := Open(Options{SessionName: "mcptrace-test-no-owner"})
	if err == nil {
		s.Close()
		t.Fatal("Open without Owner succeeded")
	}
	if !strings.Contains(err.Error(), "Owner is required") {
		t.Errorf("Open without Owner: %v", err)
	}
	r := newRig(t, nil)
	if err := r.s.Doom(lineage.ID{PID: 1}); err == nil || !strings.Contains(err.Error(), "handles") {
		t.Errorf("Doom: %v", err)
	}
	if err := r.s.SpareExecs(nil, false); err == nil {
		t.Error("SpareExecs succeeded")
	}
	if err := r.s.SetEngineSockets(nil); err == nil || !strings.Contains(err.Error(), "container") {
		t.Errorf("SetEngineSockets: %v", err)
	}
	if err := r.s.RequestsErr(); err == nil {
		t.Error("RequestsErr is nil")
	}
	if n, err := Uninstall(`C:\nothing`); n != 0 || err != nil {
		t.Errorf("Uninstall: %d, %v", n, err)
	}
	if r.s.KillsChildrenAtFork() {
		t.Error("KillsChildrenAtFork")
	}
}
