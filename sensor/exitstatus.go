package sensor

// ExitUnsupported is the exit status of `mcptrace agent` when Open fails
// with a FeatureError: the kernel lacks what the agent needs, and
// restarting cannot help. The systemd unit names it in
// RestartPreventExitStatus (a test in deploy/ holds the two together).
const ExitUnsupported = 3

// ExitNoPrivilege is the exit status of `mcptrace agent` run without the
// privilege to load BPF programs (not root, nor the capabilities): not
// the kernel's fault, and a restart cannot help either; the systemd unit
// names it in RestartPreventExitStatus too.
const ExitNoPrivilege = 4
