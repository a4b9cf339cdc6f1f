// Package dockertest runs a private Docker engine for the tests of one
// test binary, so that tests can start real containers without touching
// any engine the machine runs.
//
// A package's TestMain calls Main (or Run), and its tests call Start:
//
//	func TestMain(m *testing.M) { dockertest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		e := dockertest.Start(t)
//		id := e.RunContainer(t, "--rm", e.Image, "sleep", "600")
//		…
//	}
//
// A program that is not a test binary (make bench) calls StartProgram
// instead, and Close when done: the same engine, owned by that process.
//
// The first Start starts Debian's dockerd (package docker.io) and imports
// a busybox image (package busybox-static) as Engine.Image; later calls
// return the same Engine. Main stops it after the binary's tests ran:
// every container is removed by force, dockerd gets SIGTERM (SIGKILL 20 s
// later), and whatever is still there is swept (below). Start fails a
// test whose binary has no Main, because nothing else would stop the
// engine. When dockerd, the docker CLI, containerd, runc or a static
// busybox is missing, Start calls testenv.Missing: the test is skipped,
// or fails under MCPTRACE_REQUIRE_ALL=1.
//
// # Isolation
//
// go test runs packages' test binaries in parallel, and a machine may run
// its own dockerd. Each engine keeps everything in one directory of its
// own, /tmp/mcptrace-dockerd-<pid>-<start>-<random> (the test binary's
// PID and start time, so a later binary can tell whether its owner
// died):
//
//   - its API socket (docker.sock), --data-root (data/), --exec-root
//     (exec/), --pidfile and log;
//   - the containerd dockerd starts and manages under the exec-root:
//     socket exec/containerd/containerd.sock, state exec/containerd/daemon,
//     root data/containerd/daemon; the containerd namespace "moby" is per
//     containerd, so it cannot collide;
//   - --config-file, so /etc/docker/daemon.json is never read, and in it
//     deprecated-key-path, so dockerd 20.10 does not write its identity
//     key to /etc/docker/key.json (it does without it, for every engine on
//     the machine).
//
// Its containers' cgroups are /mcptrace-test-<pid>-<start>-<random>/<id>
// (the cgroupfs driver, forced with native.cgroupdriver=cgroupfs, and
// --cgroup-parent): never /docker/<id> beside a system engine's
// containers, so the sweep can find and remove exactly its own. It has no
// networking of its own: no bridge, iptables, IP forwarding, masquerading
// or userland proxy; containers run with --network none. dockerd and the
// docker CLI run with a minimal environment (no proxies, no DOCKER_*
// variables of the caller; the CLI's configuration in the engine's
// directory, never ~/.docker), and the CLI is always Debian's
// /usr/bin/docker.
//
// One path is shared by every containerd on the machine:
// /run/containerd/s/, where each containerd-shim puts its socket, named
// by a hash of its containerd's address, namespace and container ID; the
// names cannot collide and a shim removes its socket when its container
// ends, but the directory stays.
//
// # Nothing left behind
//
// dockerd is started with a parent-death signal (SIGTERM) from a thread
// kept for as long as it runs, so a test binary that dies without running
// Main's cleanup (a panic, a timeout, SIGKILL) still stops its dockerd,
// which stops its containers and its containerd. Its directory and
// cgroups stay; the next Start on the machine sweeps every engine whose
// owner is dead: it kills every process whose command line names the
// directory (dockerd, containerd, containerd-shim) or that is in its
// cgroups (signalled through pidfds, after checking again), lazily
// unmounts everything below the directory (dockerd bind-mounts its
// data-root onto itself, and network namespaces are bind mounts), removes
// the cgroup directories deepest first, then the directory. Main's
// cleanup ends with the same sweep, and reports what it could not remove
// as a failure of the test binary. Every wait is bounded.
//
// # What it does not do
//
// It does not pull images (no registry is reachable from test machines),
// does not give containers a network, never talks to a system dockerd or
// /run/docker.sock, and does not run on anything but Linux as root.
package dockertest
