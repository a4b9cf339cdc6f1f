package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// TestSelfExecLoopHoldsBoundedImages: a process that execs itself 2,000
// times with a 4 KiB argv keeps its first and latest images only, the rest
// counted as dropped, so its node holds a few tens of KiB by the graph's own
// accounting instead of the ~8 MiB it held with one image per exec (~80 MiB
// for the 20,000 of the issue that found it: the bound does not depend on
// the count, and 2,000 is 250 times the cap of 8). In an emulated guest
// (ten times slower) 300 execs prove the same bound on that kernel.
func TestSelfExecLoopHoldsBoundedImages(t *testing.T) {
	execs := testenv.Sized(2_000, 300)
	a := startAgent(t, agent.Options{})
	<-a.Ready()

	script := filepath.Join(t.TempDir(), "selfexec.sh")
	// Exec itself n times with the same 4 KiB argument, then report and
	// wait for stdin to close.
	if err := os.WriteFile(script, []byte(`n=$1; shift
if [ "$n" -gt 0 ]; then exec /bin/sh "$0" $((n-1)) "$@"; fi
echo done
read x
`), 0o755); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 4000)
	cmd := exec.Command("/bin/sh", script, strconv.Itoa(execs), payload)
	start := time.Now()
	_, out := testenv.StartPiped(t, cmd)
	read := make(chan string, 1)
	go func() { out.Scan(); read <- out.Text() }()
	select {
	case line := <-read:
		if line != "done" {
			t.Fatalf("self-exec loop did not finish: %q, %v", line, out.Err())
		}
	case <-time.After(testenv.Bound(2 * time.Minute)):
		t.Fatalf("self-exec loop of %d execs not done after %v", execs, testenv.Bound(2*time.Minute))
	}
	t.Logf("%d execs in %s", execs, time.Since(start))
	pid := uint32(cmd.Process.Pid)

	var p lineage.Process
	waitFor(t, "the last exec applied to the graph", func() (bool, string) {
		var ok bool
		p, ok = a.Graph().Lookup(pid)
		cur := p.Current().Argv
		return ok && len(cur) >= 3 && cur[2] == "0", "current image " + strings.Join(cur[:min(3, len(cur))], " ")
	})
	if p.ImagesDropped == 0 {
		t.Error("no image counted as dropped")
	}
	if len(p.Images) != lineage.DefaultMaxImages {
		t.Errorf("node keeps %d images, want %d (the first and the latest)", len(p.Images), lineage.DefaultMaxImages)
	}
	if first := p.Images[0]; first.Source != lineage.SourceInherited {
		t.Errorf("first image kept is %q from %s, want the one inherited from the test", first.Argv, first.Source)
	}
	// Bound: DefaultMaxImages images of at most the kernel's 4 KiB argv
	// capture and 256-byte filename, plus headers.
	const perImage = 4096 + 256 + 512
	bytes := p.ImageBytes()
	t.Logf("node %d: %d images kept, %d dropped, %d bytes of images (graph total %d)",
		pid, len(p.Images), p.ImagesDropped, bytes, a.Graph().Stats().ImageBytes)
	if bytes > lineage.DefaultMaxImages*perImage {
		t.Errorf("node holds %d bytes of images, want at most %d", bytes, lineage.DefaultMaxImages*perImage)
	}
	st := a.Status()
	if st.ImagesDropped < p.ImagesDropped {
		t.Errorf("status counts %d dropped images, the node alone %d", st.ImagesDropped, p.ImagesDropped)
	}
}

// TestForkAndExitChainStaysBoundedAndEndsWithItsSession: a member that
// forks the next link and exits, in a loop, leaves a chain of exited
// creators above its last process. With lineage.max-nodes at its
// minimum (1,000), the agent folds that chain instead of keeping one node
// per link, yet the last process still descends from the session's root:
// the root's exit ends it. In an emulated guest 600 links (1,201 exited
// processes) show the same on that kernel; the host runs 1,500 (3,001,
// three times the cap).
func TestForkAndExitChainStaysBoundedAndEndsWithItsSession(t *testing.T) {
	links := testenv.Sized(1500, 600) // past the cap either way
	a := startAgent(t, agent.Options{
		MaxNodes: lineage.MinMaxNodes,
		Sessions: sessions.Config{},
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: 500 * time.Millisecond},
	})
	<-a.Ready()
	// Each link is a background job of a subshell that exits at once, and
	// exits itself after starting the next: two exited processes per link
	// and one more for the first subshell. (Not a recursive function:
	// dash stops at a depth of 1,000, subshells included.)
	link := filepath.Join(t.TempDir(), "link.sh")
	if err := os.WriteFile(link, []byte(`n=$1
if [ "$n" -gt 0 ]; then (exec /bin/sh "$0" $((n-1)) </dev/null &); exit 0; fi
echo leaf $$; echo ready; exec sleep 300
`), 0o755); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, "fold", `(exec /bin/sh `+link+` `+strconv.Itoa(links)+` </dev/null &)
read line`, "leaf")
	leaf := h.procs["leaf"]

	var anc []lineage.Process
	waitFor(t, "the leaf below the session's root", func() (bool, string) {
		anc = a.Graph().Ancestors(lineage.ID{PID: leaf.PID, Start: leaf.Tick * lineage.TickNS})
		for _, p := range anc {
			if p.ID.PID == h.procs["host"].PID {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d ancestors, none the host", len(anc))
	})
	kept, elided := 0, 0
	for _, p := range anc {
		if p.ID.PID == h.procs["host"].PID {
			break
		}
		kept++
		elided += int(p.CreatorsElided)
	}
	kept-- // the leaf itself
	st := a.Graph().Stats()
	t.Logf("%d links: %d exited creators between the root and the leaf kept, %d folded; graph holds %d processes, %d folded in all",
		links, kept, elided, st.Tracked, st.Folded)
	if kept+elided != 2*links+1 {
		t.Errorf("%d kept + %d folded creators between the root and the leaf, want %d", kept, elided, 2*links+1)
	}
	if elided == 0 || kept >= lineage.MinMaxNodes {
		t.Errorf("a chain of %d exited creators holds %d nodes at a cap of %d", 2*links+1, kept, lineage.MinMaxNodes)
	}

	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Wait()
	waitDead(t, leaf)
	var rep enforcer.Report
	waitFor(t, "the enforcer's report", func() (bool, string) {
		var ok bool
		rep, ok = a.SessionReport("fold", 0)
		return ok, ""
	})
	if rep.Survivors != 0 || rep.Killed == 0 {
		t.Errorf("report: %+v, want the leaf killed and no survivor", rep)
	}
}
