package procfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// MaxScannedFDs bounds how many descriptors PipeWriters reads in one
// scan of the node.
const MaxScannedFDs = 1 << 20

// ReadFacts reads process id's standard input and cgroup through one
// handle on /proc/PID, checking its start time first: a recycled PID
// reads as gone (an error wrapping fs.ErrNotExist).
func ReadFacts(root string, id lineage.ID) (Facts, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(id.PID), 10))
	dfd, err := openDir(dir)
	if err != nil {
		return Facts{}, readErr(id.PID, err)
	}
	defer unix.Close(dfd)
	var rd reader
	b, err := rd.file(dfd, "stat")
	if err != nil {
		return Facts{}, readErr(id.PID, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return Facts{}, fmt.Errorf("procfs: %s/stat: %w", dir, err)
	}
	if !(lineage.ID{PID: id.PID, Start: st.StartTicks * lineage.TickNS}).SameTick(id) {
		return Facts{}, readErr(id.PID, fmt.Errorf("%w: %w", errGone, fs.ErrNotExist))
	}
	var f Facts
	target, err := rd.link(dfd, "fd/0")
	switch {
	case err == nil:
		var ino uint64
		f.Stdin, ino = stdinOf(target)
		switch f.Stdin {
		case StdinPipe:
			f.StdinPipe = ino
		case StdinSocket:
			f.StdinSocket = ino
		}
	case isNotExist(err):
		f.Stdin = StdinClosed
	default:
		return Facts{}, readErr(id.PID, err)
	}
	if b, err := rd.file(dfd, "cgroup"); err == nil {
		f.Cgroup = cgroupOf(string(b))
	}
	return f, nil
}

func isNotExist(err error) bool {
	pe, ok := err.(*fs.PathError)
	return ok && pe.Err == unix.ENOENT
}

// PipeWriters scans the open descriptors of every process under root
// and returns, for each pipe inode in pipes, the PIDs that hold it open
// for writing (fdinfo's flags say O_WRONLY or O_RDWR). A pipe absent
// from the answer has no writer left: whoever reads it will only ever
// read end of file. Processes that exit during the scan are skipped;
// descriptors of processes it may not read (another user's, without
// CAP_SYS_PTRACE) are not seen, and unseen says how many processes that
// was, so a caller knows when "no writer" is not proven. The scan reads
// at most MaxScannedFDs descriptors and fails beyond.
func PipeWriters(root string, pipes map[uint64]bool) (writers map[uint64][]uint32, unseen int, err error) {
	if root == "" {
		root = DefaultRoot
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, 0, fmt.Errorf("procfs: %w", err)
	}
	writers = map[uint64][]uint32{}
	var rd reader
	scanned := 0
	for _, e := range ents {
		pid, perr := strconv.ParseUint(e.Name(), 10, 32)
		if perr != nil {
			continue
		}
		fdDir := filepath.Join(root, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			if !os.IsNotExist(err) {
				unseen++
			}
			continue
		}
		dfd, err := openDir(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if scanned++; scanned > MaxScannedFDs {
				unix.Close(dfd)
				return nil, unseen, fmt.Errorf("procfs: more than %d open descriptors on the node", MaxScannedFDs)
			}
			target, err := rd.link(dfd, "fd/"+fd.Name())
			if err != nil {
				continue
			}
			ino := pipeInode(target)
			if ino == 0 || !pipes[ino] {
				continue
			}
			info, err := rd.file(dfd, "fdinfo/"+fd.Name())
			if err == nil && writes(string(info)) {
				writers[ino] = append(writers[ino], uint32(pid))
			}
		}
		unix.Close(dfd)
	}
	return writers, unseen, nil
}
