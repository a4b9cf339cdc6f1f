package containers

// Clients are the programs whose engine API requests the kernel reads
// (by process name, comm): the Docker CLI and its compose plugin or
// Python tool, nerdctl, and podman's remote client. Their requests go to
// the engine socket; nothing else any program sends anywhere is read.
var Clients = []string{"docker", "docker-compose", "nerdctl", "podman"}
