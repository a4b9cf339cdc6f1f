package winproc

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/lineage"
)

var (
	ntdll               = windows.NewLazySystemDLL("ntdll.dll")
	procNtResumeProcess = ntdll.NewProc("NtResumeProcess")
	kernel32            = windows.NewLazySystemDLL("kernel32.dll")
	procIsProcessInJob  = kernel32.NewProc("IsProcessInJob")
)

// MaxJobProcesses bounds how many processes Job.PIDs lists.
const MaxJobProcesses = 1 << 16

// Job is a Job Object whose processes all die when its last handle
// closes (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE), even if the process that
// holds it crashes. Processes a member starts are members too: the job
// does not allow breaking away.
type Job struct {
	h windows.Handle
}

// NewJob creates an unnamed job that kills its processes when closed.
func NewJob() (*Job, error) {
	h, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("create job object: %w", err)
	}
	j := &Job{h: h}
	if err := j.setKillOnClose(true); err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	return j, nil
}

func (j *Job) setKillOnClose(on bool) error {
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	if on {
		info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	}
	if _, err := windows.SetInformationJobObject(j.h, windows.JobObjectExtendedLimitInformation, uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		return fmt.Errorf("set the job's kill-on-close limit to %v: %w", on, err)
	}
	return nil
}

// KeepOnClose clears kill-on-close: what is still in the job when it
// closes keeps running (what an audit or a spare rule left alive).
func (j *Job) KeepOnClose() error { return j.setKillOnClose(false) }

// Close closes the job's handle: with kill-on-close set, every process
// still in it is terminated.
func (j *Job) Close() error {
	if j == nil || j.h == 0 {
		return nil
	}
	err := windows.CloseHandle(j.h)
	j.h = 0
	return err
}

// Start starts cmd inside the job: created suspended, assigned to the
// job, then resumed, so not one instruction of it runs outside the job
// and everything it starts is in the job too. It returns a Handle to the
// started process (cmd.Process holds another).
func (j *Job) Start(cmd *exec.Cmd) (*Handle, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Handle, error) {
		_ = cmd.Process.Kill() // suspended, never ran: nothing of it to end
		_ = cmd.Wait()
		return nil, err
	}
	// cmd.Process holds a handle: the PID cannot be reused meanwhile.
	pid := uint32(cmd.Process.Pid)
	h, err := windows.OpenProcess(accessEnd|windows.PROCESS_SET_QUOTA|windows.PROCESS_SUSPEND_RESUME, false, pid)
	if err != nil {
		return fail(fmt.Errorf("open the started process %d: %w", pid, err))
	}
	ph, err := FromHandle(h, pid)
	if err != nil {
		windows.CloseHandle(h)
		return fail(err)
	}
	if err := windows.AssignProcessToJobObject(j.h, h); err != nil {
		ph.Close()
		return fail(fmt.Errorf("assign process %d to the job: %w", pid, err))
	}
	if err := procNtResumeProcess.Find(); err != nil {
		ph.Close()
		return fail(fmt.Errorf("resume process %d: %w", pid, err))
	}
	if st, _, _ := procNtResumeProcess.Call(uintptr(h)); st != 0 {
		ph.Close()
		return fail(fmt.Errorf("resume process %d: %w", pid, windows.NTStatus(st)))
	}
	return ph, nil
}

// PIDs lists the processes in the job now. A PID may exit and be reused
// after this returns: open it, then check Contains on the handle.
func (j *Job) PIDs() ([]uint32, error) {
	n := 64
	for {
		buf := make([]byte, 8+n*int(unsafe.Sizeof(uintptr(0))))
		err := windows.QueryInformationJobObject(j.h, windows.JobObjectBasicProcessIdList, uintptr(unsafe.Pointer(&buf[0])), uint32(len(buf)), nil)
		assigned := *(*uint32)(unsafe.Pointer(&buf[0]))
		listed := *(*uint32)(unsafe.Pointer(&buf[4]))
		if err != nil && !errors.Is(err, windows.ERROR_MORE_DATA) {
			return nil, fmt.Errorf("list the job's processes: %w", err)
		}
		if int(assigned) > n && n < MaxJobProcesses {
			n = min(int(assigned)+64, MaxJobProcesses)
			continue
		}
		ids := unsafe.Slice((*uintptr)(unsafe.Pointer(&buf[8])), n)
		out := make([]uint32, 0, listed)
		for _, id := range ids[:min(int(listed), n)] {
			out = append(out, uint32(id))
		}
		if int(assigned) > len(out) {
			return out, fmt.Errorf("list the job's processes: %d assigned, %d listed (at most %d)", assigned, len(out), MaxJobProcesses)
		}
		return out, nil
	}
}

// Contains reports whether the process of h is in the job.
func (j *Job) Contains(h *Handle) (bool, error) {
	if err := procIsProcessInJob.Find(); err != nil {
		return false, fmt.Errorf("is process %d in the job: %w", h.PID, err)
	}
	var in int32
	if r, _, err := procIsProcessInJob.Call(uintptr(h.h), uintptr(j.h), uintptr(unsafe.Pointer(&in))); r == 0 {
		return false, fmt.Errorf("is process %d in the job: %w", h.PID, err)
	}
	return in != 0, nil
}

// Members returns the job's live processes as lineage processes on
// clock: each one opened, checked to be in the job through its handle
// (a PID listed a moment ago may name another process now), and
// described by its image and command line. Being in the job is the
// kernel's proof that a process descends from the job's root: the job
// lets nothing break away.
func (j *Job) Members(clock Clock) ([]lineage.Process, error) {
	pids, err := j.PIDs()
	out := make([]lineage.Process, 0, len(pids))
	for _, pid := range pids {
		h, oerr := open(pid, 0, windows.PROCESS_QUERY_INFORMATION)
		if oerr != nil {
			continue // exited since it was listed
		}
		in, cerr := j.Contains(h)
		h.Close()
		if cerr != nil || !in {
			continue
		}
		e := Describe(pid, 0, "")
		if e.Create != h.Create {
			continue // exited and its PID reused between the two opens
		}
		img := lineage.Image{Filename: e.Path, Argv: e.Argv, ArgvTruncated: e.ArgvTruncated, Source: lineage.SourceProc}
		out = append(out, lineage.Process{
			ID:     lineage.ID{PID: pid, Start: clock.Since(e.Create)},
			Comm:   ImageBase(e.Path),
			Images: []lineage.Image{img},
		})
	}
	return out, err
}
