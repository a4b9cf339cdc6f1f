package sensor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// Tasks reads every process of the node from the kernel's task iterator
// (bpf/tasks.bpf.c): what procfs.Scan reads from a dozen files and links
// per process, in a few read(2) calls for the whole node. Only the
// executable's path is read from /proc, one readlink for each executable
// file and user (Scan): bpf_d_path does not take the iterator's task
// pointers.
//
// Tasks does not replace procfs: it needs Linux 5.18 (OpenTasks says why
// it cannot load), reads the host's processes only (not a /proc root of
// another mount), and leaves to procfs.Read every process whose record
// would not say what /proc says (Scan lists them).
type Tasks struct {
	objs bpf.TasksObjects
	root string
	// mu makes one Scan at a time: dump_tasks builds each record in a
	// per-CPU slot and may sleep (reading argv), so a second reader of
	// the same object on that CPU would write into a record mid-way.
	mu sync.Mutex
}

// OpenTasks loads the iterator; root is the /proc the executables' paths
// are read from ("" for procfs.DefaultRoot), kernelTypes the kernel's
// BTF the caller shares with other loads (Options.KernelTypes; nil:
// decoded here). A kernel that cannot run it returns a *FeatureError.
func OpenTasks(root string, kernelTypes *btf.Cache) (*Tasks, error) {
	spec, err := bpf.LoadTasks()
	if err != nil {
		return nil, fmt.Errorf("load the task iterator's spec: %w", err)
	}
	t := &Tasks{root: root}
	if err := spec.LoadAndAssign(&t.objs, &ebpf.CollectionOptions{Cache: kernelTypes}); err != nil {
		needs := "Linux 5.18 or newer, for bpf_copy_from_user_task"
		if release, _, _, ok := kernelRelease(); ok {
			needs += ", this is " + release
		}
		return nil, &FeatureError{Feature: "the kernel's task iterator (iter.s/task)", Needs: needs, Err: err}
	}
	return t, nil
}

// Close unloads the iterator.
func (t *Tasks) Close() error { return t.objs.Close() }

// taskArgsOffset is where a task record's argv begins: records are cut
// after ArgsLen bytes of it.
const taskArgsOffset = int(unsafe.Offsetof(bpf.TasksTaskRecord{}.Args))

// The head is all of a record before its argv.
var _ [taskArgsOffset - int(unsafe.Sizeof(bpf.TasksTaskHead{}))]struct{}
var _ [int(unsafe.Sizeof(bpf.TasksTaskHead{})) - taskArgsOffset]struct{}

// Scan returns every live process, as procfs.Scan does, and how many
// of them were read from /proc's files instead.
//
// The executables' paths are read from /proc, one readlink for each
// executable file and user: the iterator gives each process's executable
// as the mount and dentry /proc's link names (struct exe_ident), and
// processes of one user whose executables are the same mount and dentry
// read the same path. A path is a process's only when the process had
// started before the readlinks began and the iterator shows it, after
// they ended (list_tasks), with the same start time, the same
// executable and no exec since its record: it lived all through on the
// same file, so its PID named it, and so did the PID whose link was read
// for it (checked the same way). One user's processes share a link, no
// two users': a process that changes its own executable (prctl
// PR_SET_MM_EXE_FILE) back and forth while its link is read can misname
// only its own user's processes. Any other process, one /proc lists that
// the iterator did not show (one that started since, or one the kernel
// keeps from iterators: seen with a sandbox's init), and one whose
// record would not say what /proc says (an argv cut, unreadable or
// retitled; a leader that exited before its threads; an exec during the
// scan) is read whole from /proc's files: none is missing, none has
// another's executable, and rules see what they would see in /proc.
func (t *Tasks) Scan() (snaps []lineage.Snapshot, fromFiles int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := procfs.BootTimeNow()
	// /proc's listing runs beside the iterator.
	var (
		listed  []uint32
		listErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		listed, listErr = procfs.PIDs(t.root)
	}()
	recs, err := t.read()
	<-done
	if err == nil {
		err = listErr
	}
	if err != nil {
		return nil, 0, err
	}
	links := t.readLinks(recs, before)
	alive, err := t.alive()
	if err != nil {
		return nil, 0, err
	}
	seen := make(map[uint32]bool, len(recs))
	var whole []lineage.Snapshot // read from /proc's files: ID.PID only
	snaps = make([]lineage.Snapshot, 0, len(recs))
	for i := range recs {
		k := &recs[i]
		seen[k.head.Proc.Pid] = true
		s, ok := k.snapshot()
		if !ok {
			continue
		}
		now, ok := alive[s.ID]
		switch {
		case links[i] < 0 && !s.Kernel:
			// Started since the readlinks began; argv cut, unreadable
			// or retitled; a leader that exited before its threads
			// (its file table is gone, /proc shows fd/ empty). Read
			// whole whatever list_tasks said: /proc decides.
			whole = append(whole, s)
		case !ok: // exited during the scan: its exit event says so
		case s.Kernel:
			snaps = append(snaps, s)
		case now != k.head.Exe: // an exec or a new executable since its record
			whole = append(whole, s)
		default:
			l := links[i]
			if rep := &recs[l]; rep.link.err != nil || alive[rep.id()] != rep.head.Exe {
				whole = append(whole, s)
				continue
			}
			s.Filename = recs[l].link.path
			snaps = append(snaps, s)
		}
	}
	for _, pid := range listed {
		if !seen[pid] {
			whole = append(whole, lineage.Snapshot{ID: lineage.ID{PID: pid}})
		}
	}
	read, err := t.readWhole(whole)
	if err != nil {
		return nil, 0, err
	}
	return append(snaps, read...), len(read), nil
}

// exeKey is what processes whose executable's path one readlink reads
// for all share (Scan).
type exeKey struct {
	mnt, dentry uint64
	uid         uint32
}

// readLinks reads the executables' paths of recs: for each record, the
// index of the record whose link names its executable (its own or its
// exeKey's first), into whose link field the path was read; -1 for one
// that is read whole (see Scan) or is a kernel thread. A link that
// cannot be read (no ptrace access, an exited mm) leaves the path empty,
// as procfs.Read has none then either; when the first of a key cannot
// be read, each of the others is read on its own.
func (t *Tasks) readLinks(recs []task, before uint64) []int32 {
	links := make([]int32, len(recs))
	first := make(map[exeKey]int32)
	var read []int32
	for i := range recs {
		k := &recs[i]
		links[i] = -1
		if k.flag(bpf.TasksTaskFlagsTASK_FLAG_KERNEL) || k.head.Exe.Dentry == 0 || k.head.Proc.Start >= before || k.retitled() ||
			k.flag(bpf.TasksTaskFlagsTASK_FLAG_ARGS_TRUNCATED|bpf.TasksTaskFlagsTASK_FLAG_ARGS_UNREADABLE|bpf.TasksTaskFlagsTASK_FLAG_ZOMBIE|bpf.TasksTaskFlagsTASK_FLAG_DEAD) {
			continue
		}
		key := exeKey{k.head.Exe.Mnt, k.head.Exe.Dentry, k.head.Uid}
		f, ok := first[key]
		if !ok {
			f = int32(i)
			first[key] = f
			read = append(read, f)
		}
		links[i] = f
	}
	readEach := func(idx []int32) {
		procfs.Each(len(idx), func(j int, _ *procfs.Reader) error {
			k := &recs[idx[j]]
			k.link.path, k.link.err = procfs.ReadExe(t.root, k.head.Proc.Pid)
			return nil
		})
	}
	readEach(read)
	read = read[:0]
	for i, f := range links {
		if f >= 0 && int(f) != i && recs[f].link.err != nil {
			links[i] = int32(i)
			read = append(read, int32(i))
		}
	}
	readEach(read)
	for i, f := range links {
		if f >= 0 && int(f) == i && recs[i].link.err != nil && !errors.Is(recs[i].link.err, fs.ErrNotExist) {
			// Unreadable but there: no path, as in procfs.Read.
			recs[i].link.err = nil
		}
	}
	return links
}

// readWhole reads the processes of snaps from /proc's files: each that
// is still the process the iterator showed (or any process at a PID it
// did not show: ID.Start 0), proven through procfs.Read's handle on its
// directory. What is gone, or another process now, is left out.
func (t *Tasks) readWhole(snaps []lineage.Snapshot) ([]lineage.Snapshot, error) {
	err := procfs.Each(len(snaps), func(i int, _ *procfs.Reader) error {
		s := &snaps[i]
		full, err := procfs.Read(t.root, s.ID.PID)
		switch {
		case errors.Is(err, fs.ErrNotExist) || err == nil && s.ID.Start != 0 && full.ID != s.ID:
			s.ID.PID = 0
		case err != nil:
			return err
		default:
			*s = full
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := snaps[:0]
	for _, s := range snaps {
		if s.ID.PID != 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// task is one record of the iterator, argv still NUL-separated, and
// the path of its executable once read (Tasks.readLinks).
type task struct {
	head bpf.TasksTaskHead
	args []byte
	link struct {
		path string
		err  error
	}
}

// id is the process's identity to /proc's precision (lineage.Snapshot).
func (k *task) id() lineage.ID { return identity(k.head.Proc.Pid, k.head.Proc.Start) }

// identity is a process's identity to /proc's precision, from its tgid
// and start_boottime.
func identity(pid uint32, start uint64) lineage.ID {
	return lineage.ID{PID: pid, Start: start / lineage.TickNS * lineage.TickNS}
}

func (k *task) flag(f bpf.TasksTaskFlags) bool { return bpf.TasksTaskFlags(k.head.Flags)&f != 0 }

// retitled says whether the process wrote over its argv's last NUL
// (setproctitle(3), node's process.title): /proc then reads its command
// line as one title that may run on into the environment, so the
// iterator's bytes are not what /proc says, and procfs.Read is asked.
func (k *task) retitled() bool { return len(k.args) > 0 && k.args[len(k.args)-1] != 0 }

// snapshot is the record as procfs.Read would return it, without the
// executable's path; false for a process that has exited.
func (k *task) snapshot() (lineage.Snapshot, bool) {
	if procfs.HasExited(k.flag(bpf.TasksTaskFlagsTASK_FLAG_DEAD), k.flag(bpf.TasksTaskFlagsTASK_FLAG_ZOMBIE), int(k.head.Threads)) {
		return lineage.Snapshot{}, false
	}
	s := lineage.Snapshot{
		ID:     k.id(),
		PPID:   k.head.Ppid,
		UID:    k.head.Uid,
		Comm:   string(cBytes(k.head.Comm[:])),
		Kernel: k.flag(bpf.TasksTaskFlagsTASK_FLAG_KERNEL),
		Stdio:  lineage.Stdio{In: stdioKind(k.head.StdinMode), Out: stdioKind(k.head.StdoutMode)},
	}
	if !s.Kernel {
		s.Argv = splitArgs(k.args)
	}
	return s, true
}

// read runs the iterator once and returns its records.
func (t *Tasks) read() ([]task, error) {
	var out []task
	err := t.iterate(t.objs.DumpTasks, func(r *bufio.Reader) (err error) {
		out, err = parseTasks(r)
		return err
	})
	return out, err
}

// alive returns the live processes (list_tasks): their identities and
// executables.
func (t *Tasks) alive() (map[lineage.ID]bpf.TasksExeIdent, error) {
	ids := make(map[lineage.ID]bpf.TasksExeIdent)
	err := t.iterate(t.objs.ListTasks, func(r *bufio.Reader) error {
		var id bpf.TasksTaskIdent
		b := unsafe.Slice((*byte)(unsafe.Pointer(&id)), unsafe.Sizeof(id))
		for {
			if _, err := io.ReadFull(r, b); err == io.EOF {
				return nil
			} else if err != nil {
				return fmt.Errorf("read the task iterator: %w", err)
			}
			ids[identity(id.Proc.Pid, id.Proc.Start)] = id.Exe
		}
	})
	return ids, err
}

// iterate runs the iterator prog once and hands its output to parse.
func (t *Tasks) iterate(prog *ebpf.Program, parse func(*bufio.Reader) error) error {
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("create the task iterator: %w", err)
	}
	defer it.Close()
	rc, err := it.Open()
	if err != nil {
		return fmt.Errorf("open the task iterator: %w", err)
	}
	defer rc.Close()
	return parse(bufio.NewReaderSize(rc, 64<<10))
}

// parseTasks reads task records, each cut after its argv bytes, until
// the end of r.
func parseTasks(r io.Reader) ([]task, error) {
	var (
		out  []task
		head = make([]byte, taskArgsOffset)
	)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return nil, fmt.Errorf("read the task iterator: %w", err)
		}
		var k task
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&k.head)), taskArgsOffset), head)
		if n := int(k.head.ArgsLen); n > len(bpf.TasksTaskRecord{}.Args) {
			return nil, fmt.Errorf("read the task iterator: a record of pid %d holds %d bytes of argv, more than %d", k.head.Proc.Pid, n, len(bpf.TasksTaskRecord{}.Args))
		} else if n > 0 {
			k.args = make([]byte, n)
			if _, err := io.ReadFull(r, k.args); err != nil {
				return nil, fmt.Errorf("read the task iterator: %w", err)
			}
		}
		out = append(out, k)
	}
}
