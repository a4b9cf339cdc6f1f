package sensor

// ExitUnsupported is the exit status of `mcptrace agent` when Open fails
// with a FeatureError: the kernel lacks what the agent needs, and
// restarting cannot help. The systemd unit names it in
// RestartPreventExitStatus (a test in deploy/ holds the two together).
const ExitUnsupported = 3
