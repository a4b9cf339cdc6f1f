package containers

// Defaults of the container settings (configuration keys containers.*).
const (
	// DefaultEngineSocket is where Docker's engine listens unless told
	// otherwise (/var/run is /run on Debian; both spellings are watched).
	DefaultEngineSocket = "/var/run/docker.sock"
)

// Clients are the programs whose engine API requests the kernel reads
// (by process name, comm): the Docker CLI and its compose plugin or
// Python tool, nerdctl, and podman's remote client. Their requests go to
// the engine socket; nothing else any program sends anywhere is read.
var Clients = []string{"docker", "docker-compose", "nerdctl", "podman"}
