package sensor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/bpf"
)

// A pin set is the kernel side one Open created, pinned on bpffs under
// PinDir/set-<N>-<layout> so that it outlives the agent:
//
//	events, lost_events, recovered, doomed, doom_kills   the maps
//	link_<program>                                       the attached programs
//
// N grows with every Open; <layout> is a hash of the record layouts and the
// doomed map's key and value (see recordLayout): a later build reads a
// previous set's ring buffer only when its layout is the same.

// set is one pin set: this sensor's own, or one taken over.
type set struct {
	name   string // "set-3-1a2b3c4d"; "" when not pinned
	dir    string
	layout string
	maps   setMaps
	ring   *ring
	// Taken-over sets only: the primary programs (for their skip counts)
	// and the state of draining.
	primaries map[string]*ebpf.Program // by link name, e.g. "sched_process_fork"
	readable  bool                     // same layout: records can be decoded
	settled   bool                     // drained once, then waited for late writers
	skipped   atomic.Uint64            // records of another layout, discarded unread
	read      atomic.Uint64            // records read and decoded
	closeOnce sync.Once
}

// setMaps are the maps of a set that outlive its agent.
type setMaps struct {
	events, lost, recovered, doomed, doomKills *ebpf.Map
}

func (s *Sensor) ownMaps() setMaps {
	o := &s.objs
	return setMaps{events: o.Events, lost: o.LostEvents, recovered: o.Recovered, doomed: o.Doomed, doomKills: o.DoomKills}
}

// mapPins names the pinned maps of a set.
func (m *setMaps) pins() []struct {
	name string
	m    **ebpf.Map
} {
	return []struct {
		name string
		m    **ebpf.Map
	}{
		{"events", &m.events}, {"lost_events", &m.lost}, {"recovered", &m.recovered},
		{"doomed", &m.doomed}, {"doom_kills", &m.doomKills},
	}
}

const linkPrefix = "link_"

// linkPath is where the link of the program named prog is pinned (the
// kernel keeps only 15 bytes of a program's name, so the name comes from
// the object, not from the kernel).
func (st *set) linkPath(prog string) string {
	return filepath.Join(st.dir, linkPrefix+prog)
}

// pinOwn creates the sensor's own set under pinDir and pins its maps. It
// returns the directories of the sets found there before, oldest first.
func (s *Sensor) pinOwn(pinDir string, spec *ebpf.CollectionSpec) ([]string, error) {
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory %s: %w", pinDir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(pinDir, &st); err != nil {
		return nil, fmt.Errorf("pin directory %s: %w", pinDir, err)
	}
	if int64(st.Type) != unix.BPF_FS_MAGIC {
		return nil, fmt.Errorf("pin directory %s is not on a BPF file system (mount -t bpf -o mode=0700 bpf DIR, or set bpf.pin-dir under %s)", pinDir, "/sys/fs/bpf")
	}
	lock, err := lockPinDir(pinDir)
	if err != nil {
		return nil, err
	}
	s.pinLock = lock
	prev, next, err := listSets(pinDir)
	if err != nil {
		return nil, err
	}
	layout, err := recordLayout(spec)
	if err != nil {
		return nil, err
	}
	s.own.layout = layout
	s.own.name = fmt.Sprintf("set-%d-%s", next, layout)
	s.own.dir = filepath.Join(pinDir, s.own.name)
	if err := os.Mkdir(s.own.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin set %s: %w", s.own.dir, err)
	}
	for _, p := range s.own.maps.pins() {
		if err := (*p.m).Pin(filepath.Join(s.own.dir, p.name)); err != nil {
			return nil, fmt.Errorf("pin map %s: %w", p.name, err)
		}
	}
	for i := range prev {
		prev[i] = filepath.Join(pinDir, prev[i])
	}
	return prev, nil
}

// listSets returns the set directories in pinDir, oldest first, and the
// number the next set takes.
func listSets(pinDir string) ([]string, int, error) {
	ents, err := os.ReadDir(pinDir)
	if err != nil {
		return nil, 0, fmt.Errorf("read pin directory: %w", err)
	}
	type found struct {
		n    int
		name string
	}
	var sets []found
	next := 1
	for _, e := range ents {
		n, ok := setNumber(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		sets = append(sets, found{n, e.Name()})
		next = max(next, n+1)
	}
	slices.SortFunc(sets, func(a, b found) int { return a.n - b.n })
	names := make([]string, len(sets))
	for i, f := range sets {
		names[i] = f.name
	}
	return names, next, nil
}

// setNumber parses "set-<N>-<layout>".
func setNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "set-")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "-")
	n, err := strconv.Atoi(num)
	return n, ok && err == nil && n > 0
}

func setLayout(name string) string {
	i := strings.LastIndexByte(name, '-')
	return name[i+1:]
}

// openSet opens the maps of the set in dir (its programs still run), so
// that its doomed processes can be copied before they are detached and
// its ring buffer drained after.
func openSet(dir, layout string) (*set, error) {
	st := &set{name: filepath.Base(dir), dir: dir, primaries: map[string]*ebpf.Program{}}
	st.layout = setLayout(st.name)
	st.readable = st.layout == layout
	for _, p := range st.maps.pins() {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, p.name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a set whose creation was cut short
		}
		if err != nil {
			st.close()
			return nil, fmt.Errorf("load pinned map %s: %w", p.name, err)
		}
		*p.m = m
	}
	if st.maps.events != nil {
		var err error
		if st.ring, err = newRing(st.maps.events); err != nil {
			st.close()
			return nil, fmt.Errorf("open ring buffer of %s: %w", st.name, err)
		}
	}
	return st, nil
}

// detach detaches the programs of a set opened with openSet, keeping its
// primaries open for their final skip counts.
func (st *set) detach(log *slog.Logger) error {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return fmt.Errorf("read pin set: %w", err)
	}
	detached := 0
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), linkPrefix)
		if !ok {
			continue
		}
		path := filepath.Join(st.dir, e.Name())
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return fmt.Errorf("load pinned link %s: %w", path, err)
		}
		if !strings.HasSuffix(name, "_backup") {
			if info, err := l.Info(); err == nil {
				if p, err := ebpf.NewProgramFromID(info.Program); err == nil {
					st.primaries[name] = p
				}
			}
		}
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("unpin link %s: %w", path, err)
		}
		if err := l.Close(); err != nil {
			return fmt.Errorf("detach %s: %w", path, err)
		}
		detached++
	}
	log.Info("took over a previous agent's programs", "set", st.name, "detached", detached,
		"unread_records", st.ring != nil && st.ring.Buffered(), "same_layout", st.readable)
	return nil
}

// lockPinDir takes the pin directory's lock: one agent (or uninstall) at a
// time may attach, take over or remove the sets in it. The directory must
// be the agent's own: a directory another user made or may write could
// hold a planted set (a forged doomed map is a kill order), or be held
// locked to keep every agent from starting.
func lockPinDir(pinDir string) (*os.File, error) {
	fd, err := unix.Open(pinDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pin directory: %w", &fs.PathError{Op: "open", Path: pinDir, Err: err})
	}
	f := os.NewFile(uintptr(fd), pinDir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat pin directory %s: %w", pinDir, err)
	}
	if euid := os.Geteuid(); st.Uid != uint32(euid) || st.Mode&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("pin directory %s (bpf.pin-dir) is owned by uid %d with mode %04o; it must belong to uid %d and be writable by nobody else: remove it (or chown %d and chmod 0700 it) and start again",
			pinDir, st.Uid, st.Mode&0o7777, euid, euid)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (bpf.pin-dir): stop that agent first", ErrPinDirInUse, pinDir)
		}
		return nil, fmt.Errorf("lock pin directory %s: %w", pinDir, err)
	}
	return f, nil
}

// ErrPinDirInUse: another running agent (or uninstall) holds the pin
// directory.
var ErrPinDirInUse = errors.New("the pin directory is in use by another running mcptrace agent")

// close releases what the sensor holds of a taken-over set; its pins stay.
// Safe to call twice (Close and the reader's retire may both call it).
func (st *set) close() error {
	var err error
	st.closeOnce.Do(func() { err = st.release() })
	return err
}

func (st *set) release() error {
	var errs []error
	if st.ring != nil {
		errs = append(errs, st.ring.Close())
		st.ring = nil
	}
	for _, p := range st.primaries {
		errs = append(errs, p.Close())
	}
	st.primaries = nil
	for _, p := range st.maps.pins() {
		if *p.m != nil {
			errs = append(errs, (*p.m).Close())
			*p.m = nil
		}
	}
	return errors.Join(errs...)
}

// recordLayout hashes what a reader of another build's pin set depends on:
// the layouts of the ring buffer records and of the doomed map's key and
// value, from the object's BTF, and the records' format number
// (RECORD_FORMAT in bpf/events.h) for what the layouts do not show.
func recordLayout(spec *ebpf.CollectionSpec) (string, error) {
	var b strings.Builder
	for _, name := range []string{"event", "exec_event", "barrier_event", "request_event"} {
		var s *btf.Struct
		if err := spec.Types.TypeByName(name, &s); err != nil {
			return "", fmt.Errorf("record layout: struct %s: %w", name, err)
		}
		writeLayout(&b, s, 0)
	}
	d := spec.Maps[bpf.McptraceMapDoomed]
	fmt.Fprintf(&b, "doomed %d %d %d;", d.KeySize, d.ValueSize, d.MaxEntries)
	fmt.Fprintf(&b, "format %d;", bpf.McptraceRecordFormatRECORD_FORMAT)
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:4]), nil
}

func writeLayout(b *strings.Builder, t btf.Type, depth int) {
	size, _ := btf.Sizeof(t)
	fmt.Fprintf(b, "%s:%d{", t.TypeName(), size)
	if s, ok := btf.UnderlyingType(t).(*btf.Struct); ok && depth < 4 {
		for _, m := range s.Members {
			fmt.Fprintf(b, "%s@%d ", m.Name, m.Offset)
			writeLayout(b, m.Type, depth+1)
		}
	}
	b.WriteString("}")
}

// differ makes every program of spec differ from this build's by a no-op
// jump after its first instruction, which keeps its relocations and
// function information. Tests use it to stand for another build of the
// programs; variant is how many no-ops.
func differ(spec *ebpf.CollectionSpec, variant int32) {
	nop := asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource)}
	for _, p := range spec.Programs {
		ins := p.Instructions
		if len(ins) < 2 || ins[0].OpCode.JumpOp() != asm.InvalidJumpOp {
			continue
		}
		extra := make(asm.Instructions, variant)
		for i := range extra {
			extra[i] = nop
		}
		p.Instructions = append(append(asm.Instructions{ins[0]}, extra...), ins[1:]...)
	}
}

// Uninstall removes every pin set under pinDir: it detaches their
// programs and unpins their maps, so nothing of mcptrace stays in the
// kernel. Events still in their ring buffers are dropped. It returns how
// many sets it removed. Stop the agent first: an agent running on pinDir
// keeps its own programs and maps open.
func Uninstall(pinDir string) (int, error) {
	lock, err := lockPinDir(pinDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	sets, _, err := listSets(pinDir)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, name := range sets {
		dir := filepath.Join(pinDir, name)
		ents, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), linkPrefix) {
				continue
			}
			l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("load pinned link %s: %w", e.Name(), err))
				continue
			}
			errs = append(errs, l.Unpin(), l.Close())
		}
		errs = append(errs, os.RemoveAll(dir))
	}
	os.Remove(pinDir) // only when empty
	if err := errors.Join(errs...); err != nil {
		return len(sets), fmt.Errorf("uninstall %s: %w", pinDir, err)
	}
	return len(sets), nil
}
