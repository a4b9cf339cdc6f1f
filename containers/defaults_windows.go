package containers

// DefaultEngineSocket is "" on Windows, off: containers are attributed from
// the requests the Linux kernel reads, which Windows has no counterpart
// of here, so none are (configuration key containers.engine-socket).
const DefaultEngineSocket = ""
