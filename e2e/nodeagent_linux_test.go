package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/daemonset"
	"github.com/mcptrace/mcptrace/internal/dockertest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// The agent's container image (scripts/image.sh) run under Debian's
// dockerd exactly as the DaemonSet (deploy/kubernetes) declares the pod:
// the `docker run` arguments come from the rendered DaemonSet
// (internal/daemonset), with the node's /run/mcptrace and
// /var/lib/mcptrace replaced by directories of the test.

const kustomizeBase = "../deploy/kubernetes"

// daemonSetCaps are the capabilities the DaemonSet declares, as the
// agent's /proc/PID/status must show them (CapEff, CapPrm, CapBnd).
var daemonSetCaps = []string{"cap_kill", "cap_sys_ptrace", "cap_sys_admin", "cap_sys_resource", "cap_sys_nice"}

var (
	imageOnce sync.Once
	imageErr  error
)

// buildImage runs scripts/image.sh against the engine once per test
// binary: mcptrace:latest is then the image of this checkout.
func buildImage(t *testing.T, eng *dockertest.Engine) {
	t.Helper()
	imageOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			imageErr = fmt.Errorf("scripts/image.sh needs the go toolchain: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "../scripts/image.sh")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "DOCKER") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		for _, kv := range eng.Docker().Env {
			if strings.HasPrefix(kv, "DOCKER") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "GO="+gobin, "DOCKER="+dockerCLI, "IMAGE_TAR=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			imageErr = fmt.Errorf("scripts/image.sh: %v\n%s", err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
}

// nodeAgent is the image running as the DaemonSet's pod on node Node.
type nodeAgent struct {
	eng     *dockertest.Engine
	ID      string // container ID
	Node    string
	Socket  string // the API socket, on the host
	Metrics string // host:port of /metrics
	Args    []string
	PinDir  string // bpf.pin-dir, the same path in the container
	Run     string // the node's /run/mcptrace, on the host
}

// startNodeAgent renders the DaemonSet, runs its pod as a container named
// after node and waits until the agent answers on the socket the host
// sees. extra are agent flags after the DaemonSet's: the test agent's
// narrowing (a private pin directory, no host rules, within this test
// binary's PID, a free metrics port) and the test's own.
func startNodeAgent(t *testing.T, eng *dockertest.Engine, node string, extra ...string) *nodeAgent {
	t.Helper()
	buildImage(t, eng)
	objs, err := daemonset.Render(kustomizeBase)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mcptrace-node-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := filepath.Join(dir, "run")
	args, err := daemonset.DockerRunArgs(objs, daemonset.DockerOptions{
		HostPaths: map[string]string{"/run/mcptrace": run, "/var/lib/mcptrace": filepath.Join(dir, "history")},
		Scratch:   filepath.Join(dir, "configmaps"),
		Fields:    map[string]string{"status.hostIP": "127.0.0.1", "spec.nodeName": node},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A capability this machine cannot grant (it is not in the test's
	// own bounding set) cannot be added to a container either: runc
	// fails. The container runs without it, said in the log, and the
	// capability check below expects the same.
	own := capSet(t, uint32(os.Getpid()), "CapBnd")
	args = slices.DeleteFunc(args, func(a string) bool {
		c, ok := strings.CutPrefix(a, "--cap-add=")
		if ok && !slices.Contains(own, strings.ToLower(c)) {
			t.Logf("this machine's capability bounding set lacks %s: the container runs without it", c)
			return true
		}
		return false
	})
	metrics := freePort(t)
	pin := agenttest.PinDir(t)
	args = append(args, "--bpf.pin-dir="+pin, "--sessions.default-rules=false", agenttest.WithinFlag(),
		"--metrics.listen-address="+metrics)
	args = append(args, extra...)
	name := fmt.Sprintf("mcptrace-%s-%d", node, os.Getpid())
	id := eng.Output(t, append([]string{"run", "-d", "--name", name}, args...)...)
	a := &nodeAgent{eng: eng, ID: id, Node: node, Socket: filepath.Join(run, "mcptrace.sock"), Metrics: metrics, Args: args, PinDir: pin, Run: run}
	t.Cleanup(func() {
		// SIGTERM, as the kubelet stops a pod: the agent saves its state.
		if out, err := eng.Docker("stop", "--time", "30", id).CombinedOutput(); err != nil {
			t.Errorf("docker stop %s: %v\n%s", name, err, out)
		}
		if t.Failed() {
			t.Logf("agent %s logs:\n%s", node, a.logs())
		}
		eng.Docker("rm", "--force", id).Run()
	})
	a.waitServing(t)
	return a
}

func (a *nodeAgent) logs() string {
	out, _ := a.eng.Docker("logs", a.ID).CombinedOutput()
	return string(out)
}

// waitServing waits until `mcptrace status` on the host reaches the agent
// through the mounted socket.
func (a *nodeAgent) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := a.client().Status(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s not serving on %s after 60s: %v\n%s", a.Node, a.Socket, err, a.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *nodeAgent) client() *api.Client { return api.NewClient(a.Socket) }

// pid is the agent's PID on the host.
func (a *nodeAgent) pid(t *testing.T) uint32 {
	t.Helper()
	out := a.eng.Output(t, "inspect", "--format", "{{.State.Pid}}", a.ID)
	pid, err := strconv.ParseUint(out, 10, 32)
	if err != nil || pid == 0 {
		t.Fatalf("docker inspect: agent PID %q", out)
	}
	return uint32(pid)
}

// cli runs the mcptrace command line on the host against the agent.
func (a *nodeAgent) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.Binary(t), append(args, "--api.socket", a.Socket)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mcptrace %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hostSession is a session started on the host, outside the container,
// by uid:
//
//	mcptrace run --session ID -- bash -c 'sh -c "setsid sleep 1000 & exit"; sleep 1001 & [setpriv … sleep 1011 &] exec sleep 1002'
//
// a daemon whose wrapper exited, a child of the root, the root, and, in a
// session of root's, a member that changed to uid nobody (65534): only
// CAP_KILL lets the agent signal processes of other uids.
type hostSession struct {
	env     string
	root    agenttest.Proc
	members []agenttest.Proc // what must end with the root
}

const nobody = 65534

func startHostSession(t *testing.T, a *nodeAgent, id string, uid uint32) *hostSession {
	t.Helper()
	s := &hostSession{env: fmt.Sprintf("MCPTRACE_NODE_TEST=%s-%d", id, os.Getpid())}
	script := `sh -c "setsid sleep 1000 & exit"; sleep 1001 & `
	want := []string{"sleep 1000", "sleep 1001", "sleep 1002"}
	if uid == 0 {
		script += `setpriv --reuid=65534 --regid=65534 --clear-groups sleep 1011 & `
		want = append(want, "sleep 1011")
	}
	cmd := exec.Command(testenv.Binary(t), "run", "--session", id, "--api.socket", a.Socket, "--", "bash", "-c", script+`exec sleep 1002`)
	cmd.Env = append(os.Environ(), s.env)
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() {
		for _, p := range agenttest.WithEnv(s.env) {
			p.Kill()
		}
	})
	testenv.Eventually(t, "the processes of session "+id, func() (bool, string) {
		ps := agenttest.WithEnv(s.env)
		s.root, s.members = agenttest.Proc{}, nil
		for _, p := range ps {
			switch argv := strings.Join(p.Argv, " "); {
			case argv == "sleep 1002":
				s.root = p
			case slices.Contains(want, argv):
				s.members = append(s.members, p)
			}
		}
		return s.root.PID != 0 && len(s.members) == len(want)-1, fmt.Sprint(ps)
	})
	agenttest.WaitMembers(t, a.client(), id, &uid, append([]agenttest.Proc{s.root}, s.members...))
	return s
}

// waitEnded kills the session's root and waits until its members are
// gone.
func (s *hostSession) waitEnded(t *testing.T) {
	t.Helper()
	s.root.Kill()
	testenv.Eventually(t, "the session's members to be ended after the root died", func() (bool, string) {
		var left []string
		for _, p := range s.members {
			if p.Alive() {
				st, _ := procfs.ReadStat("/proc", p.PID)
				left = append(left, fmt.Sprintf("%s (state %c)", p, st.State))
			}
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
}

// capSet reads capability set field (CapEff, CapPrm, CapBnd) of pid from
// /proc as names.
func capSet(t *testing.T, pid uint32, field string) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			var names []string
			for bit := range 64 {
				if mask&(1<<bit) != 0 {
					names = append(names, capabilityNames[bit])
				}
			}
			return names
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return nil
}

// capabilityNames by number, as capabilities(7) lists them (up to
// CAP_CHECKPOINT_RESTORE, 40).
var capabilityNames = func() map[int]string {
	names := []string{"cap_chown", "cap_dac_override", "cap_dac_read_search", "cap_fowner", "cap_fsetid", "cap_kill",
		"cap_setgid", "cap_setuid", "cap_setpcap", "cap_linux_immutable", "cap_net_bind_service", "cap_net_broadcast",
		"cap_net_admin", "cap_net_raw", "cap_ipc_lock", "cap_ipc_owner", "cap_sys_module", "cap_sys_rawio", "cap_sys_chroot",
		"cap_sys_ptrace", "cap_sys_pacct", "cap_sys_admin", "cap_sys_boot", "cap_sys_nice", "cap_sys_resource", "cap_sys_time",
		"cap_sys_tty_config", "cap_mknod", "cap_lease", "cap_audit_write", "cap_audit_control", "cap_setfcap", "cap_mac_override",
		"cap_mac_admin", "cap_syslog", "cap_wake_alarm", "cap_block_suspend", "cap_audit_read", "cap_perfmon", "cap_bpf",
		"cap_checkpoint_restore"}
	m := map[int]string{}
	for i := range 64 {
		m[i] = fmt.Sprintf("cap_%d", i)
	}
	for i, n := range names {
		m[i] = n
	}
	return m
}()

// The image, run with exactly the DaemonSet's privileges and mounts: the
// agent has exactly the declared capabilities, no new privileges, the
// runtime's seccomp filter, a read-only root, and no AppArmor confinement
// where AppArmor is on. It knows the exe of a process that ran before it
// (CAP_SYS_PTRACE), tracks sessions started on the host by root and by
// another user through the mounted socket, keeps them across a restart
// of the container (the pins on the node's bpffs, the state on the node's
// /run/mcptrace), and ends their members, other uids' included (CAP_KILL),
// when the roots die; `mcptrace tree` on the host talks to it through the
// socket; `mcptrace uninstall` in a container, as the README says, takes
// it out of the kernel.
func TestNodeAgentImageRunsWithTheDaemonSetsPrivileges(t *testing.T) {
	eng := dockertest.Start(t)
	before := exec.Command("sleep", "1005")
	if err := before.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { before.Process.Kill(); before.Wait() })

	a := startNodeAgent(t, eng, "node-a")
	t.Logf("docker run %s", strings.Join(a.Args, " "))

	// Exactly the capabilities declared, no more: the agent runs as
	// root in the container, so these are the whole of its privilege.
	pid := a.pid(t)
	own := capSet(t, uint32(os.Getpid()), "CapBnd")
	want := slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(daemonSetCaps), func(c string) bool { return !slices.Contains(own, c) })))
	for _, field := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if got := slices.Sorted(slices.Values(capSet(t, pid, field))); !slices.Equal(got, want) {
			t.Errorf("the agent's %s is %v, want the DaemonSet's %v", field, got, want)
		}
	}
	// With SYS_NICE the agent in its container runs at enforcer.nice.
	tids, err := procfs.Threads("", pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if st, err := procfs.ReadStat(fmt.Sprintf("/proc/%d/task", pid), tid); err == nil && st.Nice != enforcer.DefaultNice {
			t.Errorf("the agent's thread %d runs at nice %d in its container, want %d", tid, st.Nice, enforcer.DefaultNice)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NoNewPrivs:\t1\n", "Seccomp:\t2\n"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("the agent's /proc/%d/status lacks %q", pid, strings.TrimSpace(want))
		}
	}
	if mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); err != nil || !regexp.MustCompile(`(?m)^\S+ \S+ \S+ \S+ / (ro,|ro$|ro )`).Match(mi) {
		t.Errorf("the agent's root file system is not read-only (%v)", err)
	}
	if on, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled"); strings.TrimSpace(string(on)) == "Y" {
		if label, _ := os.ReadFile(fmt.Sprintf("/proc/%d/attr/current", pid)); strings.TrimSpace(string(label)) != "unconfined" {
			t.Errorf("the agent runs under AppArmor profile %q, want unconfined", label)
		}
	} else {
		t.Logf("AppArmor is off on this machine: appArmorProfile Unconfined is translated, not exercised")
	}
	for line := range strings.Lines(string(status)) {
		if strings.HasPrefix(line, "VmRSS:") {
			t.Logf("agent in its container: %s", strings.TrimSpace(line))
		}
	}

	// A process that ran before the agent: its exe is read from /proc,
	// which needs CAP_SYS_PTRACE.
	pl, err := a.client().Tree(context.Background(), uint32(before.Process.Pid))
	if err != nil || len(pl.Processes) == 0 || len(pl.Processes[0].Images) == 0 {
		t.Fatalf("the agent's tree of the earlier sleep: %+v, %v", pl, err)
	}
	if img := pl.Processes[0].Images[len(pl.Processes[0].Images)-1]; img.Filename == "" {
		t.Errorf("the agent does not know the exe of pid %d, which ran before it: %+v", before.Process.Pid, img)
	}

	s := startHostSession(t, a, "node-s", 0)
	u := startHostSession(t, a, "node-u", nobody)
	tree := a.cli(t, "tree", strconv.Itoa(int(s.root.PID)))
	for _, p := range append([]agenttest.Proc{s.root}, s.members...) {
		if !regexp.MustCompile(`(?m)^[├└─│ ]*` + strconv.Itoa(int(p.PID)) + ` alive `).MatchString(tree) {
			t.Errorf("`mcptrace tree %d` on the host does not show %s alive:\n%s", s.root.PID, p, tree)
		}
	}
	t.Logf("mcptrace tree %d, from the host through the mounted socket:\n%s", s.root.PID, tree)

	// A restart of the container, as a rollout or a crash would: the
	// sessions are still enforced by the agent that comes back.
	a.eng.Output(t, "restart", "--time", "30", a.ID)
	a.waitServing(t)
	for _, id := range []string{"node-s", "node-u"} {
		owner := uint32(0)
		if id == "node-u" {
			owner = nobody
		}
		if d, err := a.client().Session(context.Background(), id, &owner); err != nil {
			t.Fatalf("after the container's restart the agent lost session %s: %v\n%s", id, err, a.logs())
		} else if d.Session.State != sessions.Active {
			t.Fatalf("after the restart session %s is %v, want active", id, d.Session.State)
		}
	}
	s.waitEnded(t)
	u.waitEnded(t)

	// Uninstall as the README says: the agent stopped, `mcptrace
	// uninstall` in a container with the agent's mounts.
	a.eng.Output(t, "stop", "--time", "30", a.ID)
	if ents, _ := os.ReadDir(a.PinDir); len(ents) == 0 {
		t.Fatalf("the stopped agent left nothing pinned in %s: the uninstall below would prove nothing", a.PinDir)
	}
	out := a.eng.Output(t, "run", "--rm", "--volumes-from", a.ID, "--user=0", "--cap-drop=ALL", "--cap-add=CAP_SYS_ADMIN",
		"mcptrace:latest", "uninstall", "--bpf.pin-dir="+a.PinDir)
	t.Logf("mcptrace uninstall, in a container:\n%s", out)
	if ents, err := os.ReadDir(a.PinDir); err == nil && len(ents) > 0 {
		t.Errorf("after uninstall %s still holds %d entries", a.PinDir, len(ents))
	}
	if _, err := os.Stat(filepath.Join(a.Run, "state")); err == nil {
		t.Errorf("after uninstall the saved state %s is still there", filepath.Join(a.Run, "state"))
	}
}
