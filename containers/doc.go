// Package containers asks a Docker engine about containers and stops
// them, and kills a container's processes through its cgroup when the
// engine cannot.
//
// # The engine client
//
// Engine speaks the Docker Engine API (JSON over HTTP) on the engine's
// unix socket, with net/http and nothing else: version negotiation,
// inspect, stop, kill and a list of the running containers. It is written
// by hand on purpose. The Docker SDK (github.com/docker/docker/client)
// brings in dozens of modules (docker/docker, docker/go-connections,
// docker/go-units, opencontainers/image-spec, gogo/protobuf,
// distribution/reference, otel, …) for the five calls this package makes,
// and every one of them is code the agent would run as root and we would
// have to follow for security fixes; the five calls are a few hundred
// lines.
//
// NewEngine does no I/O. The first call negotiates the API version (the
// unversioned GET /version, as Negotiate does): the client speaks the
// engine's newest version up to MaxAPIVersion and refuses an engine
// whose range does not meet MinAPIVersion..MaxAPIVersion. MaxAPIVersion
// is 1.44 rather than the 1.41 of Docker 20.10 because Docker 29 accepts
// nothing older; nothing this package sends or reads changed between
// 1.24 and 1.44. An engine that refuses the version later (it was
// upgraded under a running agent) is asked again once.
//
// Every request is bounded in time by its context and by Engine.Timeout
// (Stop adds its grace), and every response body is read through a limit
// (1 MiB; 32 MiB and 10,000 entries for List). Container IDs go into URL
// paths only after ValidID accepted them, and names only after ValidRef
// did (Inspect alone takes a name or ID prefix): callers capture them
// from bytes other users control, and a path such as
// "../../v1.41/containers/create" must never reach the engine.
//
// Errors are *Error values that say which engine, what was asked and,
// where it helps, what to do; callers print them as they are, e.g.
//
//	container engine at /var/run/docker.sock: connect: no such file or directory (is dockerd running? set containers.engine-socket)
//
// errors.Is(err, ErrNotFound) means the container does not exist (gone:
// for a caller that wants it ended, success); errors.Is(err,
// ErrUnreachable) means the engine did not answer at all, which is when a
// caller falls back to CgroupKill.
//
// # The cgroup fallback (Linux)
//
// CgroupDir finds a container's cgroup directory from its init process
// (/proc/PID/cgroup, and /proc/self/mountinfo for where each hierarchy is
// mounted) and accepts only a directory whose last path element holds the
// container's full 64-hex ID (`/docker/<id>` under the cgroupfs driver,
// `docker-<id>.scope` under systemd). CgroupKill kills every process in
// such a directory: through cgroup.kill on cgroup v2 (Linux 5.14+), else
// one pidfd per process, signalled only if the process is still in the
// cgroup after its pidfd was opened, so a recycled PID never gets a
// signal.
//
// # Requests
//
// ParseRequest reads an engine API request line that the kernel captured
// from a container client (Clients) and returns the container a start
// request names, as it names it: a full ID (docker run), or a name or ID
// prefix (docker start NAME); Request is the canonical form the agent
// keeps instead of the bytes.
//
// # What it does not do
//
// It does not start, create, pull or remove containers, does not attach
// to their streams, does not follow events, and does not speak TCP or TLS
// to remote engines: the agent acts on the engine of its own node. It
// does not decide whether a container may be stopped; callers do. Only
// Inspect resolves a name (and says which container it names now); Stop
// and Kill take full IDs only.
//
// An Engine is safe for concurrent use.
package containers
