package e2e_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/dockertest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/orphans"
)

// attachedRun is a `docker run -i --rm` client, as MCP hosts run a
// server in a container, with its stdin kept open by this test.
type attachedRun struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	id    string // the container's full ID (--cidfile)
}

// runAttached starts one as uid (a user of the engine's group when not
// root).
func runAttached(t *testing.T, eng *dockertest.Engine, uid int) *attachedRun {
	t.Helper()
	if _, err := os.Stat(dockerCLI); err != nil {
		testenv.Missing(t, "Debian's docker client "+dockerCLI, "package docker.io; make setup-test installs it")
	}
	dir := t.TempDir()
	cidfile := filepath.Join(dir, "cid")
	args := []string{"run", "-i", "--rm", "--network", "none", "--cidfile", cidfile, eng.Image, "sleep", "600"}
	r := &attachedRun{cmd: eng.Docker(args...)}
	if uid != 0 {
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
		r.cmd = eng.DockerAs(t, uid, args...)
	}
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.kill()
		eng.Docker("rm", "--force", r.id).Run()
	})
	waitFor(t, containerWait, "the container's ID in --cidfile", func() (bool, string) {
		b, _ := os.ReadFile(cidfile)
		r.id = string(b)
		return len(r.id) == 64, fmt.Sprintf("%q", b)
	})
	waitFor(t, containerWait, "container "+r.id[:12]+" to run", func() (bool, string) { return eng.Running(t, r.id), "not running" })
	return r
}

// kill SIGKILLs the client, as a host's crash does: the engine closes
// the container's stdin, and the container runs on.
func (r *attachedRun) kill() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.stdin.Close()
		r.cmd.Wait()
	}
}

// A node's leaked container: one whose docker run -i client was
// SIGKILLed under the agent (the kernel saw its client start it and exit;
// likely, its busybox image has no MCP name); and bystanders: a detached
// container, a docker run -i whose client still runs, the same whose
// client's own stdin reached EOF (the engine closed the container's
// stdin; the client waits for the output, as `echo … | docker run -i` in
// a CI job does), once started before the agent and once under it, and
// one whose client was SIGKILLed before the agent started (nothing the
// kernel saw says which client started it: never listed). orphans lists
// the leaked one and no bystander; another user sees nothing; --end
// (certain only) stops nothing, --end --include-likely stops it and
// leaves the bystanders running.
func TestOrphanedContainersAreListedAndStoppedLeavingBystanders(t *testing.T) {
	eng := dockertest.Start(t)
	before := runAttached(t, eng, 0)
	before.kill()
	eofBefore := runAttached(t, eng, 0)
	eofBefore.stdin.Close()
	a := agenttest.Start(t, agent.Options{ContainerEngineSocket: eng.Socket, OrphansEvery: time.Millisecond, OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	c := api.NewClient(a.Socket())
	waitFor(t, containerWait, "container attribution to be on", func() (bool, string) {
		st := a.Status().Containers
		return st.Attribution == "on", fmt.Sprintf("%+v", st)
	})
	leaked := runAttached(t, eng, 0)
	leaked.kill()
	live := runAttached(t, eng, 0)
	eof := runAttached(t, eng, 0)
	eof.stdin.Close()
	detached := eng.RunContainer(t, eng.Image, "sleep", "600")
	bystanders := []string{live.id, eof.id, eofBefore.id, before.id, detached}

	byContainer := func(l api.OrphanList) map[string]orphans.Orphan {
		m := map[string]orphans.Orphan{}
		for _, o := range l.Orphans {
			if o.Container != "" {
				m[o.Container] = o
			}
		}
		return m
	}
	var got map[string]orphans.Orphan
	testenv.Eventually(t, "the leaked container to be listed", func() (bool, string) {
		l := orphansOf(t, c)
		got = byContainer(l)
		return len(got) >= 1, fmt.Sprintf("%+v (%s)", l.Orphans, l.ContainersWhy)
	})
	// The bystanders' stdin has been cut off as long as the leaked one's:
	// had a cut stdin been evidence, they would be listed by now.
	time.Sleep(time.Second)
	got = byContainer(orphansOf(t, c))
	if len(got) != 1 {
		t.Errorf("listed %d containers, want the leaked one: %+v", len(got), got)
	}
	if o, ok := got[leaked.id]; !ok || o.Confidence != orphans.Likely || o.Kind != orphans.ClientGone || o.Proof != orphans.ProofContainer ||
		o.Client.PID != uint32(leaked.cmd.Process.Pid) || o.Name != eng.Image || o.Processes != 1 {
		t.Errorf("the container whose client the agent saw die: %+v", o)
	}
	for _, id := range bystanders {
		if o, ok := got[id]; ok {
			t.Errorf("a bystander container is listed: %+v", o)
		}
	}
	byKind := map[string]int{}
	for k, u := range a.Sample().Unowned {
		byKind[k.Kind+"/"+k.Confidence] += u.Servers
	}
	if byKind["client-gone/certain"] != 0 || byKind["client-gone/likely"] != 1 {
		t.Errorf("the metrics' picture: %v, want one likely client-gone", byKind)
	}
	// It was started by root's client: another user sees nothing.
	if code, out := agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--json"); code != 0 || strings.Contains(out, `"container"`) {
		t.Errorf("nobody's list (exit %d) shows root's containers:\n%s", code, out)
	}
	code, out := agenttest.CLIAs(t, a.Socket(), 0, "orphans")
	t.Logf("mcptrace orphans:\n%s", out)
	if code != 0 || !strings.Contains(out, "container "+leaked.id[:12]) || strings.Contains(out, "container "+before.id[:12]) {
		t.Errorf("mcptrace orphans exited %d without the leaked container, or with the unproven one", code)
	}
	if code, out = agenttest.CLIAs(t, a.Socket(), 0, "orphans", "--end"); code != 0 || !eng.Running(t, leaked.id) {
		t.Errorf("--end (certain ones only) exited %d or stopped the likely container:\n%s", code, out)
	}
	code, out = agenttest.CLIAs(t, a.Socket(), 0, "orphans", "--end", "--include-likely")
	t.Logf("mcptrace orphans --end --include-likely:\n%s", out)
	if code != 0 {
		t.Errorf("--end exited %d", code)
	}
	if eng.Running(t, leaked.id) {
		t.Errorf("leaked container %s still runs after --end --include-likely", leaked.id[:12])
	}
	for _, id := range bystanders {
		if !eng.Running(t, id) {
			t.Errorf("bystander container %s was stopped", id[:12])
		}
	}
	for _, r := range []*attachedRun{live, eof, eofBefore} {
		if r.cmd.ProcessState != nil {
			t.Errorf("the client of bystander %s exited", r.id[:12])
		}
	}
}

// A user who may use the engine sees and ends the containers their own
// clients started and leaked, and nothing of root's.
func TestOrphanedContainersOfAnotherUserAreTheirsAlone(t *testing.T) {
	eng := dockertest.Start(t)
	a := agenttest.Start(t, agent.Options{ContainerEngineSocket: eng.Socket, OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	waitFor(t, containerWait, "container attribution to be on", func() (bool, string) {
		st := a.Status().Containers
		return st.Attribution == "on", fmt.Sprintf("%+v", st)
	})
	roots := runAttached(t, eng, 0)
	mine := runAttached(t, eng, nobody)
	roots.kill()
	mine.kill()
	c := api.NewClient(a.Socket())
	testenv.Eventually(t, "both users' containers to be listed", func() (bool, string) {
		l := orphansOf(t, c)
		n := 0
		for _, o := range l.Orphans {
			if o.Container == roots.id || o.Container == mine.id && o.UID == nobody && o.Confidence == orphans.Likely {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%+v (%s)", l.Orphans, l.ContainersWhy)
	})
	code, out := agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--json")
	if code != 0 || strings.Count(out, `"container":`) != 1 || !strings.Contains(out, mine.id) {
		t.Errorf("nobody's list (exit %d):\n%s", code, out)
	}
	code, out = agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--end", "--include-likely")
	t.Logf("nobody's --end:\n%s", out)
	if code != 0 {
		t.Errorf("nobody's --end exited %d", code)
	}
	if eng.Running(t, mine.id) {
		t.Error("nobody's leaked container survived its --end")
	}
	if !eng.Running(t, roots.id) {
		t.Error("root's leaked container was stopped by nobody's --end")
	}
}

// On a node with no container engine (no socket where one is configured,
// as the default /var/run/docker.sock on a node without Docker), the
// list says nothing about containers; with an engine that does not
// answer, it says they were not looked at.
func TestOrphansSayNothingOfContainersWhereThereIsNoEngine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "docker.sock")
	a := agenttest.Start(t, agent.Options{ContainerEngineSocket: missing, OrphansConfirmAfter: time.Second})
	if l := orphansOf(t, api.NewClient(a.Socket())); l.ContainersWhy != "" || l.ContainersUnchecked != 0 {
		t.Errorf("no engine on the node, yet the list says %q (%d unchecked)", l.ContainersWhy, l.ContainersUnchecked)
	}
	// The stand-in engine agenttest gives every agent closes what
	// connects: an engine that is there and does not answer.
	b := agenttest.Start(t, agent.Options{OrphansConfirmAfter: time.Second})
	testenv.Eventually(t, "the list to say the containers were not looked at", func() (bool, string) {
		l := orphansOf(t, api.NewClient(b.Socket()))
		return strings.HasPrefix(l.ContainersWhy, "the running containers were not looked at"), l.ContainersWhy
	})
}
