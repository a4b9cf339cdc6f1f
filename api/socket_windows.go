package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"unsafe"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/windows/winsec"
)

// DefaultSocket is where the agent serves and clients connect
// (api.socket): a named pipe.
const DefaultSocket = `\\.\pipe\mcptrace`

// pipeSockets: the API is served on a named pipe here.
const pipeSockets = true

// pipeSDDL is the security descriptor of the agent's pipe:
//
//	O:BA                   owned by Administrators, which only SYSTEM or
//	                       an administrator can give it: clients check it
//	                       (checkServer) before they send anything
//	D:P                    a protected DACL (nothing inherited)
//	(A;;GA;;;SY)           LocalSystem: full access
//	(A;;GA;;;BA)           Administrators (an elevated token): full access
//	(A;;0x0012019b;;;AU)   Authenticated Users: read and write
//
// 0x0012019b is FILE_GENERIC_READ | FILE_GENERIC_WRITE without
// FILE_APPEND_DATA, which on a pipe is FILE_CREATE_PIPE_INSTANCE: another
// user may connect, not create an instance of the pipe of their own,
// which clients could reach instead of the agent's. Anonymous and guest
// logons are not authenticated users; remote clients are refused by the
// pipe itself (PIPE_REJECT_REMOTE_CLIENTS). As with the unix socket,
// whoever connects is authorized per request by who they are (see peer),
// not by having connected.
const pipeSDDL = "O:BAD:P(A;;GA;;;SY)(A;;GA;;;BA)(A;;0x0012019b;;;AU)"

// pipeClientAccess is what a client opens the pipe for: reading and
// writing data, not FILE_CREATE_PIPE_INSTANCE (GENERIC_WRITE has it, and
// pipeSDDL grants it to no one but SYSTEM and administrators).
const pipeClientAccess = windows.GENERIC_READ | windows.FILE_WRITE_DATA

// pipeBuffer is the pipe's buffer each way.
const pipeBuffer = 64 << 10

// Listen serves on the named pipe path (\\.\pipe\NAME), with pipeSDDL.
// It creates the pipe: if the pipe exists (another agent serves it, or
// another program took its name), Listen fails. mode is for unix
// sockets: the pipe's DACL decides who may connect.
func Listen(path string, _ os.FileMode) (net.Listener, error) {
	if err := checkPipePath(path); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Creating the first instance of a pipe that exists fails on Windows
	// (ERROR_ACCESS_DENIED, as with FILE_FLAG_FIRST_PIPE_INSTANCE), not
	// under wine: ask first, as Listen on Linux dials first.
	switch err := waitNamedPipe(path, 1); {
	case err == nil || errors.Is(err, windows.ERROR_SEM_TIMEOUT):
		return nil, fmt.Errorf("listen on %s: %w (the pipe exists)", path, ErrServing)
	case !errors.Is(err, windows.ERROR_FILE_NOT_FOUND):
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Buffers of their own, so that the short refusal a caller over its
	// cap gets is written without waiting for that caller to read: the
	// accept loop writes it, and must not wait on anyone.
	l, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: pipeSDDL, InputBufferSize: pipeBuffer, OutputBufferSize: pipeBuffer})
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
		return nil, fmt.Errorf("listen on %s: %w (the pipe exists): %w", path, ErrServing, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	spendFirstInstance(path)
	return l, nil
}

// spendFirstInstance connects to the pipe Listen has just created, and
// disconnects. The listener's first instance is made without read or
// write access, which keeps clients off it on Windows 10 and later: there
// the open finds no instance listening (ERROR_PIPE_BUSY) and does
// nothing. Where that instance takes clients all the same (wine, older
// Windows: go-winio issues 173 and 313), it would take the first client
// and never answer it; this open takes it instead.
func spendFirstInstance(path string) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return
	}
	h, err := windows.CreateFile(p, 0, 0, nil, windows.OPEN_EXISTING, windows.SECURITY_SQOS_PRESENT|windows.SECURITY_ANONYMOUS, 0)
	if err == nil {
		windows.CloseHandle(h)
	}
}

var procWaitNamedPipe = windows.NewLazySystemDLL("kernel32.dll").NewProc("WaitNamedPipeW")

// waitNamedPipe waits up to ms milliseconds for an instance of pipe path
// to take a client: nil when one does, ERROR_SEM_TIMEOUT when none did,
// ERROR_FILE_NOT_FOUND when there is no such pipe.
func waitNamedPipe(path string, ms uint32) error {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	if r, _, err := procWaitNamedPipe.Call(uintptr(unsafe.Pointer(p)), uintptr(ms)); r == 0 {
		return err
	}
	return nil
}

// dial connects to the agent's pipe, at identification level: the agent
// reads who the client is from its token (see bindPeer) and cannot act
// as the client.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	c, err := winio.DialPipeAccessImpLevel(ctx, socket, pipeClientAccess, winio.PipeImpLevelIdentification)
	if err != nil {
		return nil, err
	}
	if err := checkServer(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", socket, err)
	}
	return c, nil
}

// checkServer refuses a pipe whose owner is not SYSTEM, Administrators
// or this client's own user (winsec.Trusted): whenever the agent does not
// serve (before it starts, while it restarts), any user may create a pipe
// of its name, and a client must not tell that user what it asks, nor
// believe what it answers. The agent's pipe is owned by Administrators
// (pipeSDDL's O:BA), which no other user can give a pipe of theirs.
func checkServer(c net.Conn) error {
	fc, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("pipe %T has no handle", c)
	}
	sd, err := windows.GetSecurityInfo(windows.Handle(fc.Fd()), windows.SE_KERNEL_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("the pipe's owner: %w", err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return fmt.Errorf("the pipe's owner: %v", err)
	}
	if !winsec.Trusted(owner) {
		return fmt.Errorf("the pipe is owned by %s, not by SYSTEM or Administrators: not the agent's; refusing to talk to it", owner)
	}
	return nil
}
