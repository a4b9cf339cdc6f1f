package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows:
// a real pipe, real client processes, their real tokens.

func TestMain(m *testing.M) {
	helpers := maps.Clone(testenv.WindowsHelpers)
	helpers["pipe-client"] = helperPipeClient
	helpers["pipe-open"] = helperPipeOpen
	testenv.RunHelper(helpers)
	os.Exit(m.Run())
}

// pipeVar names the pipe a helper connects to.
const pipeVar = "API_TEST_PIPE"

// helperLife bounds how long a helper waits to be ended.
const helperLife = 2 * time.Minute

// helperPipeClient is a Client of the pipe: for every line read, "status"
// or "mark", it asks the agent its status or sends a destroy marker for
// its own session, and prints the answer on one line (an error as
// "error …").
func helperPipeClient() {
	c := NewClient(os.Getenv(pipeVar))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var (
			v   any
			err error
		)
		switch in.Text() {
		case "status":
			v, err = c.Status(ctx)
		case "mark":
			v, err = c.MarkDestroy(ctx, "")
		default:
			err = fmt.Errorf("no such request %q", in.Text())
		}
		cancel()
		if err != nil {
			fmt.Println("error", err)
			continue
		}
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
	}
}

// helperPipeOpen opens the pipe as Client does, synchronously (see
// openPipeSync), prints the handle's value for the test to duplicate, and
// waits to be ended.
func helperPipeOpen() {
	h, err := openPipeSync(os.Getenv(pipeVar))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(uintptr(h))
	time.Sleep(helperLife)
}

// openPipeSync opens the pipe path as Client does (read and write data,
// at identification level), for synchronous I/O. While the server has no
// instance waiting for a client (ERROR_PIPE_BUSY) it tries again, for 10
// seconds at most, as winio's dial does.
func openPipeSync(path string) (windows.Handle, error) {
	name, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := windows.CreateFile(name, pipeClientAccess, 0, nil, windows.OPEN_EXISTING,
			windows.SECURITY_SQOS_PRESENT|windows.SECURITY_IDENTIFICATION, 0)
		if !errors.Is(err, windows.ERROR_PIPE_BUSY) || time.Now().After(deadline) {
			return h, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var pipeSeq atomic.Uint64

// servePipe runs s on a pipe of its own until the test ends, and returns
// the pipe's path.
func servePipe(t *testing.T, s *Server) string {
	t.Helper()
	path := fmt.Sprintf(`\\.\pipe\mcptrace-test-%d-%d`, os.Getpid(), pipeSeq.Add(1))
	l, err := Listen(path, DefaultSocketMode)
	if err != nil {
		t.Fatal(err)
	}
	serveUntilDone(t, s, l)
	return path
}

// pipeWorld is a world served on a pipe with a fresh owners table,
// recording the callers its handlers resolved (Sync gets the request's
// context).
type pipeWorld struct {
	*world
	owners  *owners.Table
	pipe    string
	mu      sync.Mutex
	callers []Caller
}

func newPipeWorld(t *testing.T) *pipeWorld {
	t.Helper()
	tab, err := owners.Load("")
	if err != nil {
		t.Fatal(err)
	}
	w := &pipeWorld{world: newWorld(t), owners: tab}
	w.s.Log = testenv.Logger(t, slog.LevelDebug)
	w.s.Owners = tab
	w.s.Sync = func(ctx context.Context) error {
		c, ok := CallerFrom(ctx)
		if !ok {
			return errors.New("no caller in the request's context")
		}
		w.mu.Lock()
		w.callers = append(w.callers, c)
		w.mu.Unlock()
		return nil
	}
	w.pipe = servePipe(t, w.s)
	return w
}

func (w *pipeWorld) seen() []Caller {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Caller(nil), w.callers...)
}

// ownerOf is the owner the table gives the token of process pid, read
// through a handle on the process itself.
func ownerOf(t *testing.T, tab *owners.Table, pid uint32) (uint32, owners.Token) {
	t.Helper()
	h, err := winproc.Open(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tok, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	uid, err := tab.Owner(tok)
	if err != nil {
		t.Fatal(err)
	}
	return uid, tok
}

// line reads the next line a helper printed.
func line(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("the helper said nothing: %v", sc.Err())
	}
	return sc.Text()
}

// A client process is served on the pipe as itself: the handler sees
// the PID of the process that connected and the owner its token maps
// to, and a destroy marker without a session ID ends the session whose
// root created that process, found by the PID the server read.
func TestPipeClientIsItsProcessAndItsTokensOwner(t *testing.T) {
	w := newPipeWorld(t)
	cmd := testenv.Helper("pipe-client")
	cmd.Env = append(cmd.Env, pipeVar+"="+w.pipe)
	in, out := testenv.StartPiped(t, cmd)
	pid := uint32(cmd.Process.Pid)
	want, tok := ownerOf(t, w.owners, pid)
	t.Logf("the helper %d runs as %+v: owner %d", pid, tok, want)

	// Its place in the lineage: the child of a session's root. Windows
	// PIDs are multiples of 4: pid+2 names no other process.
	root := w.spawn(init1, pid+2, want, "host")
	w.begin(root, "pipe-session")
	w.spawn(root, pid, want, "helper")

	fmt.Fprintln(in, "status")
	var st Status
	if l := line(t, out); json.Unmarshal([]byte(l), &st) != nil {
		t.Fatalf("status: %s", l)
	}
	if st.API.PeerIdentity != "process-handle" {
		t.Errorf("peer identity %q, want process-handle", st.API.PeerIdentity)
	}
	fmt.Fprintln(in, "mark")
	l := line(t, out)
	var res MarkResult
	if json.Unmarshal([]byte(l), &res) != nil || !marked(res, "pipe-session") {
		t.Fatalf("mark from the session's member: %s, want session pipe-session marked", l)
	}
	seen := w.seen()
	if len(seen) != 1 {
		t.Fatalf("the handlers resolved %d callers, want 1 (the marker's): %+v", len(seen), seen)
	}
	if c := seen[0]; c.PID != pid || c.UID != want || c.peer == nil {
		t.Errorf("caller %+v, want PID %d and uid %d (its token's owner), bound to its process", c, pid, want)
	}
}

// marked reports whether res ended session id or a generation of it.
func marked(res MarkResult, id string) bool {
	for _, g := range res.Generations {
		if g.Session == id {
			return true
		}
	}
	return slices.Contains(res.Ended, id)
}

// handleRW reads and writes a synchronous pipe handle.
type handleRW windows.Handle

func (h handleRW) Read(b []byte) (int, error) {
	var n uint32
	err := windows.ReadFile(windows.Handle(h), b, &n, nil)
	if errors.Is(err, windows.ERROR_BROKEN_PIPE) {
		return int(n), io.EOF
	}
	return int(n), err
}

func (h handleRW) Write(b []byte) (int, error) {
	var n uint32
	err := windows.WriteFile(windows.Handle(h), b, &n, nil)
	return int(n), err
}

// getOnHandle sends GET /v1/status on a pipe handle and returns the
// answer as "CODE body" on one line.
func getOnHandle(t *testing.T, h windows.Handle, br *bufio.Reader) string {
	t.Helper()
	return answerOn(t, h, br, "GET /v1/status HTTP/1.1\r\nHost: mcptrace\r\n\r\n")
}

// answerOn sends req (if any) on a pipe handle and returns the answer
// read from br as "CODE body" on one line; it fails the test after 10s
// without one.
func answerOn(t *testing.T, h windows.Handle, br *bufio.Reader, req string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if req != "" {
			if _, err := io.WriteString(handleRW(h), req); err != nil {
				got <- "error " + err.Error()
				return
			}
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			got <- "error " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(b))
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no answer on the pipe in 10s")
		return ""
	}
}

// A connection whose connecting process exited acts for nobody: a
// request on it (the pipe kept open by a duplicate of the process's
// handle) is refused and counted, though it was answered while the
// process ran.
func TestPipeRequestIsRefusedOnceTheConnectingProcessExited(t *testing.T) {
	w := newPipeWorld(t)
	cmd := testenv.Helper("pipe-open")
	cmd.Env = append(cmd.Env, pipeVar+"="+w.pipe)
	_, out := testenv.StartPiped(t, cmd)
	l := line(t, out)
	hv, err := strconv.ParseUint(l, 10, 64)
	if err != nil {
		t.Fatalf("helper: %s", l)
	}
	child, err := windows.OpenProcess(windows.PROCESS_DUP_HANDLE, false, uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(child)
	var h windows.Handle
	if err := windows.DuplicateHandle(child, windows.Handle(hv), windows.CurrentProcess(), &h, 0, false, windows.DUPLICATE_SAME_ACCESS); err != nil {
		t.Fatalf("duplicate the helper's pipe handle: %v", err)
	}
	defer windows.CloseHandle(h)
	br := bufio.NewReader(handleRW(h))
	if l := getOnHandle(t, h, br); !strings.HasPrefix(l, "200 ") {
		t.Fatalf("while the connecting process runs: %s, want 200", l)
	}
	cmd.Process.Kill()
	cmd.Wait()
	before := w.s.gone.Load()
	if l := getOnHandle(t, h, br); !strings.HasPrefix(l, "403 ") || !strings.Contains(l, "exited or changed") {
		t.Fatalf("after the connecting process exited: %s, want 403", l)
	}
	if w.s.gone.Load() != before+1 {
		t.Errorf("refusal not counted")
	}
}

// The agent's pipe is its own: a second Listen on it fails, saying
// another agent serves there, and the first goes on serving.
func TestSecondListenOnAPipeFails(t *testing.T) {
	w := newPipeWorld(t)
	l, err := Listen(w.pipe, DefaultSocketMode)
	if err == nil {
		l.Close()
		t.Fatalf("a second Listen on %s succeeded", w.pipe)
	}
	if !strings.Contains(err.Error(), "another agent is already serving there") {
		t.Errorf("second Listen: %v, want it to say another agent serves there", err)
	}
	t.Logf("second Listen: %v", err)
	if _, err := NewClient(w.pipe).Status(context.Background()); err != nil {
		t.Errorf("the first listener after the second Listen: %v", err)
	}
}

// Without an owners table no caller can be given a uid: every connection
// is refused as unidentified, and counted.
func TestPipeServerWithoutOwnersRefusesEveryConnection(t *testing.T) {
	w := newWorld(t)
	w.s.Log = testenv.Logger(t, slog.LevelDebug)
	pipe := servePipe(t, w.s)
	// The refusal comes at once, before any request (a Client may not
	// have written its own yet, and calls the answer unsolicited).
	h := openPipe(t, pipe)
	if l := answerOn(t, h, bufio.NewReader(handleRW(h)), ""); !strings.HasPrefix(l, "503 ") || !strings.Contains(l, "could not be identified") {
		t.Fatalf("connection without an owners table: %s, want 503 could not be identified", l)
	}
	if n := w.s.apiStatus().RefusedIdentity; n != 1 {
		t.Errorf("%d connections refused as unidentified, want 1", n)
	}
}

// openPipe opens the pipe as Client does, synchronously, from this
// process, and closes it when the test ends.
func openPipe(t *testing.T, path string) windows.Handle {
	t.Helper()
	h, err := openPipeSync(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { windows.CloseHandle(h) })
	return h
}

// The pipe carries pipeSDDL, read back from the pipe itself: a protected
// DACL that lets SYSTEM and administrators do anything, and
// authenticated users read and write but not create an instance of the
// pipe (one clients could reach instead of the agent's); no one else is
// let in.
func TestPipeLetsUsersConnectButNotServe(t *testing.T) {
	w := newPipeWorld(t)
	sd, err := windows.GetSecurityInfo(openPipe(t, w.pipe), windows.SE_KERNEL_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pipe's security descriptor: %s", sd)
	if control, _, err := sd.Control(); err != nil || control&windows.SE_DACL_PROTECTED == 0 {
		t.Errorf("control %#x (%v): want a protected DACL", control, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		t.Fatal(err)
	}
	masks := map[string]windows.ACCESS_MASK{}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			t.Fatal(err)
		}
		if ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE {
			t.Errorf("ACE %d is of type %d, want only allowing ACEs", i, ace.Header.AceType)
			continue
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart)).String()
		masks[sid] |= ace.Mask
	}
	const fileAllAccess = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1ff // FILE_ALL_ACCESS
	all := func(m windows.ACCESS_MASK) bool {
		return m&windows.GENERIC_ALL != 0 || m&fileAllAccess == fileAllAccess
	}
	const (
		system         = "S-1-5-18"
		administrators = "S-1-5-32-544"
		authenticated  = "S-1-5-11"
	)
	if !all(masks[system]) || !all(masks[administrators]) {
		t.Errorf("SYSTEM %#x, Administrators %#x: want full access for both", masks[system], masks[administrators])
	}
	rw := windows.ACCESS_MASK(windows.FILE_READ_DATA | windows.FILE_WRITE_DATA | windows.SYNCHRONIZE)
	if m := masks[authenticated]; m&rw != rw || m&windows.FILE_APPEND_DATA != 0 || m&(windows.GENERIC_WRITE|windows.GENERIC_ALL|windows.WRITE_DAC|windows.WRITE_OWNER) != 0 {
		t.Errorf("authenticated users %#x: want read and write data, not FILE_CREATE_PIPE_INSTANCE (%#x) nor the DACL", m, windows.FILE_APPEND_DATA)
	}
	delete(masks, system)
	delete(masks, administrators)
	delete(masks, authenticated)
	if len(masks) != 0 {
		t.Errorf("the DACL lets in others too: %#x", masks)
	}
}

// A client of a pipe no agent serves says the agent is unreachable.
func TestClientOfAMissingPipeSaysTheAgentIsUnreachable(t *testing.T) {
	path := fmt.Sprintf(`\\.\pipe\mcptrace-test-%d-none`, os.Getpid())
	_, err := NewClient(path).Status(context.Background())
	if !errors.Is(err, ErrAgentUnreachable) {
		t.Fatalf("status from %s: %v, want %v", path, err, ErrAgentUnreachable)
	}
	t.Log(err)
}
