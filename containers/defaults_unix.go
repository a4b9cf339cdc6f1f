//go:build !windows

package containers

// DefaultEngineSocket is where Docker's engine listens unless told
// otherwise (configuration key containers.engine-socket; /var/run is /run
// on Debian, and both spellings are watched).
const DefaultEngineSocket = "/var/run/docker.sock"
