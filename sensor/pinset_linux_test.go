package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
)

// pinDir returns a private pin directory on bpffs, emptied of every pin
// set when the test ends.
func pinDir(t *testing.T) string {
	t.Helper()
	testenv.Root(t)
	if err := ensureMounts("/sys/kernel/tracing", "/sys/fs/bpf", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/sys/fs/bpf", "mcptrace-sensor-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := Uninstall(dir); err != nil {
			t.Errorf("uninstall: %v", err)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// OpenForTest is open for the package's external tests.
var OpenForTest = open

// PinDirForTest is pinDir for the package's external tests.
var PinDirForTest = pinDir

// open opens a sensor for one test and closes it when the test ends; a
// missing kernel feature skips the test naming it (a failure under
// MCPTRACE_REQUIRE_ALL=1).
func open(t *testing.T, opts Options) *Sensor {
	t.Helper()
	testenv.Root(t)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := Open(opts)
	var ferr *FeatureError
	if errors.As(err, &ferr) {
		testenv.Missing(t, ferr.Feature, ferr.Error())
	}
	if err != nil {
		t.Fatalf("open sensor: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// events reads from s until stop returns true for an event, or the time
// is up, committing as it goes.
func readUntil(t *testing.T, s *Sensor, stop func(lineage.Event) bool) []lineage.Event {
	t.Helper()
	var got []lineage.Event
	deadline := time.AfterFunc(20*time.Second, func() { s.Close() })
	defer deadline.Stop()
	for {
		ev, err := s.Read()
		if err != nil {
			t.Fatalf("read: %v (after %d events)", err, len(got))
		}
		got = append(got, ev)
		if stop(ev) {
			return got
		}
	}
}

func TestBarrierComesAfterEveryEventThatHappenedBeforeIt(t *testing.T) {
	s := open(t, Options{})
	for round := uint64(1); round <= 20; round++ {
		cmd := exec.Command("/bin/sh", "-c", "exec /bin/true barrier-test")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pid := uint32(cmd.Process.Pid)
		if err := s.Barrier(round); err != nil {
			t.Fatal(err)
		}
		seen := map[lineage.EventKind]bool{}
		for {
			b, err := s.ReadBatch(64)
			if err != nil {
				t.Fatal(err)
			}
			s.Commit()
			for _, ev := range b.Events {
				if ev.Proc.PID == pid {
					seen[ev.Kind] = true
				}
			}
			if b.Barrier == round {
				break
			}
		}
		if !seen[lineage.KindFork] || !seen[lineage.KindExec] || !seen[lineage.KindExit] {
			t.Fatalf("round %d: barrier read before the events of a process that had exited when it was asked for: %v", round, seen)
		}
	}
}

func TestTakeOverDrainsThePreviousRingBufferAndRemovesItsPins(t *testing.T) {
	dir := pinDir(t)
	a := open(t, Options{PinDir: dir})
	a.Close() // nothing read: the events stay in the kernel
	cmd := exec.Command("/bin/sh", "-c", "exec /bin/true while-no-sensor-reads")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	sets, _ := filepath.Glob(filepath.Join(dir, "set-*"))
	if len(sets) != 1 {
		t.Fatalf("pin sets after the first sensor closed: %v", sets)
	}
	b := open(t, Options{PinDir: dir})
	evs := readUntil(t, b, func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit && ev.Proc.PID == pid })
	var execs int
	for _, ev := range evs {
		if ev.Kind == lineage.KindExec && ev.Proc.PID == pid && len(ev.Argv) == 2 && ev.Argv[1] == "while-no-sensor-reads" {
			execs++
		}
	}
	if execs != 1 {
		t.Errorf("the exec that happened while no sensor read was reported %d times by the next one", execs)
	}
	// The drained set goes once its ring is read to the end.
	cmd = exec.Command("/bin/true")
	cmd.Run()
	readUntil(t, b, func(ev lineage.Event) bool {
		return ev.Kind == lineage.KindExit && ev.Proc.PID == uint32(cmd.Process.Pid)
	})
	sets2, _ := filepath.Glob(filepath.Join(dir, "set-*"))
	if len(sets2) != 1 || sets2[0] == sets[0] {
		t.Errorf("pin sets after the takeover: %v, want only the new one (not %v)", sets2, sets)
	}
}

// TestUpgradeLosesNoEventOfAStorm switches from one build of the programs
// to another (variant: every program differs) while processes fork, exec
// and exit without pause: every one of them is reported by one sensor or
// the other. The storm runs until 100 of its processes were seen after
// the switch (at most 5,000 in all).
func TestUpgradeLosesNoEventOfAStorm(t *testing.T) {
	dir := pinDir(t)
	marker := fmt.Sprintf("mcptrace-upgrade-%d", os.Getpid())
	stopFile := filepath.Join(t.TempDir(), "stop")
	a := open(t, Options{PinDir: dir})
	var mu sync.Mutex
	seen := map[string]map[lineage.EventKind]int{} // by exec index
	pidIndex := map[uint32]string{}
	// Forks by creator pid, then by child pid: the storm shell's pid is
	// known only once it runs, and its first forks may be read before.
	forks := map[uint32]map[uint32]int{}
	record := func(ev lineage.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Kind {
		case lineage.KindFork:
			if forks[ev.Creator.PID] == nil {
				forks[ev.Creator.PID] = map[uint32]int{}
			}
			forks[ev.Creator.PID][ev.Proc.PID]++
		case lineage.KindExec:
			if len(ev.Argv) == 3 && ev.Argv[1] == marker {
				pidIndex[ev.Proc.PID] = ev.Argv[2]
				if seen[ev.Argv[2]] == nil {
					seen[ev.Argv[2]] = map[lineage.EventKind]int{}
				}
				seen[ev.Argv[2]][lineage.KindExec]++
			}
		case lineage.KindExit:
			if i, ok := pidIndex[ev.Proc.PID]; ok {
				seen[i][lineage.KindExit]++
			}
		}
	}
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for {
			ev, err := a.Read()
			if err != nil {
				return
			}
			record(ev)
		}
	}()
	storm := exec.Command("/bin/sh", "-c", `i=0; while [ ! -e "$1" ] && [ $i -lt 5000 ]; do /bin/true "$0" $i; i=$((i+1)); done; echo $i`, marker, stopFile)
	var count strings.Builder
	storm.Stdout = &count
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	seenSoFar := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	testenv.Eventually(t, "the storm under way", func() (bool, string) { return seenSoFar() >= 20, strconv.Itoa(seenSoFar()) })
	// The upgrade: the old agent stops reading and exits, the new build
	// takes over while the storm runs.
	a.Close()
	<-reading
	switchedAt := len(seen)
	b := open(t, Options{PinDir: dir, variant: 1})
	if tags := programTags(t, dir); len(tags) != 0 {
		t.Errorf("programs of the old build still attached: %v", tags)
	}
	// When the storm is over, a barrier behind its last events ends the
	// reading: every event of the storm is read before it.
	const over = 99
	stormErr := make(chan error, 1)
	go func() {
		err := storm.Wait()
		stormErr <- err
		if err := b.Barrier(over); err != nil {
			t.Error(err)
		}
	}()
	for reached := false; !reached; {
		bt, err := b.ReadBatch(256)
		if err != nil {
			t.Fatal(err)
		}
		b.Commit()
		for _, ev := range bt.Events {
			record(ev)
		}
		reached = bt.Barrier == over
		if seenSoFar() >= switchedAt+100 {
			os.WriteFile(stopFile, nil, 0o600)
		}
	}
	if err := <-stormErr; err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(count.String()))
	if err != nil {
		t.Fatalf("storm count %q: %v", count.String(), err)
	}
	lost, err := b.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Errorf("%d storm processes reported, the storm ran %d", len(seen), n)
	}
	var missing []string
	for i := 0; i < n; i++ {
		k := strconv.Itoa(i)
		if seen[k][lineage.KindExec] == 0 || seen[k][lineage.KindExit] == 0 {
			missing = append(missing, k)
		}
	}
	forksBy := forks[uint32(storm.Process.Pid)] // forks of the storm shell's children, by pid
	t.Logf("%d processes, %d seen before the switch; lost %v; forks of the storm's children reported %d", n, switchedAt, lost, len(forksBy))
	if len(missing) > 0 {
		t.Errorf("%d processes of the storm lack an exec or exit event: %v", len(missing), missing[:min(10, len(missing))])
	}
	if len(forksBy) != n {
		t.Errorf("%d forks of the storm reported, want %d", len(forksBy), n)
	}
	for k, v := range lost {
		if v != 0 {
			t.Errorf("lost %d %v events across the switch", v, k)
		}
	}
	if switchedAt == 0 || switchedAt == n {
		t.Errorf("the switch did not happen during the storm (%d of %d seen before)", switchedAt, n)
	}
}

// programTags returns the tags of programs pinned under dir by sets other
// than the newest: what should have been detached.
func programTags(t *testing.T, dir string) []string {
	t.Helper()
	sets, _, err := listSets(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range sets[:max(0, len(sets)-1)] {
		links, _ := filepath.Glob(filepath.Join(dir, name, linkPrefix+"*"))
		out = append(out, links...)
	}
	return out
}

func TestVariantProgramsDifferFromThisBuild(t *testing.T) {
	tag := func(variant int32) string {
		s := open(t, Options{variant: variant})
		info, err := s.objs.SchedProcessFork.Info()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return info.Tag
	}
	if a, b := tag(0), tag(1); a == b {
		t.Errorf("program tag %s for both builds: the upgrade test would not switch programs", a)
	}
}

func TestUninstallDetachesEverySet(t *testing.T) {
	dir := pinDir(t)
	a := open(t, Options{PinDir: dir})
	a.Close()
	n, err := Uninstall(dir)
	if err != nil || n != 1 {
		t.Fatalf("uninstall: %d sets, %v", n, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}
	// Nothing of ours runs anymore: a process's events reach no ring.
	var ids []ebpf.ProgramID
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		ids = append(ids, id)
	}
	t.Logf("%d programs loaded on the node after uninstall", len(ids))
}

// A pin directory another user owns or may write could hold a planted
// set (a forged doomed map is a kill order) or be held locked by that
// user: neither a sensor nor uninstall uses it.
func TestPinDirectoryOfAnotherUserIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		uid  int
		mode os.FileMode
	}{
		{"owned by another uid", 65534, 0o700},
		{"writable by others", 0, 0o777},
		{"writable by the group", 0, 0o770},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := pinDir(t)
			if err := os.Chown(dir, tt.uid, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chown(dir, 0, 0); os.Chmod(dir, 0o700) })
			if _, err := Open(Options{PinDir: dir, Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "writable by nobody else") {
				t.Errorf("sensor on the pin directory: %v, want a refusal", err)
			}
			if _, err := Uninstall(dir); err == nil || !strings.Contains(err.Error(), "writable by nobody else") {
				t.Errorf("uninstall of the pin directory: %v, want a refusal", err)
			}
		})
	}
}

// One agent per pin directory: a second sensor, or uninstall, is refused
// while one holds it, instead of taking over a running agent's programs.
func TestPinDirectoryHoldsOneSensorAtATime(t *testing.T) {
	dir := pinDir(t)
	a := open(t, Options{PinDir: dir})
	if _, err := Open(Options{PinDir: dir, Logger: a.log}); !errors.Is(err, ErrPinDirInUse) {
		t.Errorf("second sensor on the same pin directory: %v, want %v", err, ErrPinDirInUse)
	}
	if _, err := Uninstall(dir); !errors.Is(err, ErrPinDirInUse) {
		t.Errorf("uninstall while a sensor holds the pin directory: %v, want %v", err, ErrPinDirInUse)
	}
	a.Close()
	b := open(t, Options{PinDir: dir})
	b.Close()
}

// A set whose creation was cut short (the agent killed right after it
// made the directory) is taken over like any other: nothing to read, its
// directory removed.
func TestSetCutShortIsTakenOverAndRemoved(t *testing.T) {
	dir := pinDir(t)
	stub := filepath.Join(dir, "set-1-deadbeef")
	if err := os.Mkdir(stub, 0o700); err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{PinDir: dir})
	cmd := exec.Command("/bin/true")
	cmd.Run()
	readUntil(t, s, func(ev lineage.Event) bool {
		return ev.Kind == lineage.KindExit && ev.Proc.PID == uint32(cmd.Process.Pid)
	})
	if _, err := os.Stat(stub); !os.IsNotExist(err) {
		t.Errorf("the set cut short is still there: %v", err)
	}
}

// A start that fails before its agent serves takes its own programs out
// of the kernel (Withdraw): none of its links is left, nothing is left
// pinned. One that took over a previous agent's set keeps its own in
// that set's place.
func TestWithdrawLeavesNothingAttachedThatTheStartAttached(t *testing.T) {
	dir := pinDir(t)
	a := open(t, Options{PinDir: dir})
	var ids []link.ID
	for _, l := range a.links {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	if withdrawn, err := a.Withdraw(); !withdrawn || err != nil {
		t.Fatalf("withdraw of a first start: %v, %v", withdrawn, err)
	}
	a.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left pinned in %s: %v", dir, ents)
	}
	// The kernel frees a link once its last reference goes, which on
	// older kernels (5.10) can trail the close by a moment: each must be
	// gone within a bound, not at once.
	for _, id := range ids {
		testenv.Eventually(t, fmt.Sprintf("link %d detached after the start withdrew", id), func() (bool, string) {
			l, err := link.NewFromID(id)
			if err != nil {
				return true, ""
			}
			l.Close()
			return false, "still attached"
		})
	}

	prev := open(t, Options{PinDir: dir})
	prev.Close() // pinned: the previous agent's set
	b := open(t, Options{PinDir: dir})
	if withdrawn, err := b.Withdraw(); withdrawn || err != nil {
		t.Fatalf("withdraw after a takeover: %v, %v; want its set kept", withdrawn, err)
	}
	b.Close()
	// The previous set's maps stay until its ring is read; its programs
	// were detached at the takeover, and the new set's stay attached.
	sets, _, _ := listSets(dir)
	links := map[string]int{}
	for _, set := range sets {
		ents, _ := os.ReadDir(filepath.Join(dir, set))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), linkPrefix) {
				links[set]++
			}
		}
	}
	if len(sets) != 2 || links[sets[0]] != 0 || links[sets[1]] == 0 {
		t.Errorf("pinned links by set after a withdrawn takeover: %v of %v; want the new set's alone", links, sets)
	}
}

// The request reader is loaded beside the other programs (Sensor.load):
// a kernel that refuses it leaves the sensor open, the reader's refusal
// said (RequestsErr, naming it), and processes tracked.
func TestARefusedRequestReaderLeavesProcessTrackingOn(t *testing.T) {
	s := open(t, Options{refuseRequests: true, ContainerClients: []string{"docker"}})
	var ferr *FeatureError
	if err := s.RequestsErr(); !errors.As(err, &ferr) || !strings.Contains(err.Error(), "request reader") || !strings.Contains(err.Error(), "program "+requestsProgram) {
		t.Fatalf("RequestsErr = %v, want the request reader's refusal", err)
	}
	if err := s.SetEngineSockets([]string{"/nonexistent"}); !errors.As(err, &ferr) {
		t.Fatalf("SetEngineSockets of a sensor without its request reader: %v, want the reader's refusal", err)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	readUntil(t, s, func(e lineage.Event) bool { return e.Kind == lineage.KindExit && e.Proc.PID == pid })
}
