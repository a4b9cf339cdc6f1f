package roles

import (
	"regexp"
	"strings"
)

// A wrapper's argv names a server only when every option before the name
// is one the wrapper is known to have: an unknown option may take the next
// element as its value (npx --otp 123456 pkg), and the name read after it
// would then be that value. And a name is only ever read from a spec that
// fits the grammar of what it names (an npm package, a GitHub repository,
// a Python distribution or module, an image reference); anything else
// (user:password@host) names nothing.

// grammar is how a program writes its options.
type grammar struct {
	value    flagSet // options that take a value
	switches flagSet // options that take none
	// cluster: short options cluster as in getopt (-it, -itv X, -eFOO,
	// -p3.12); else a short option is written alone or as -x=value.
	cluster bool
	// nopt: npm's option parser: --no-X is a switch, and a switch followed
	// by "true" or "false" is ambiguous (npm exec reads the word as the
	// switch's value, npx as the package).
	nopt bool
}

func (g *grammar) isSwitch(name string) bool {
	return g.switches[name] || g.nopt && strings.HasPrefix(name, "--no-") && len(name) > len("--no-")
}

// boolWord reports whether argv[k] is a word nopt may read as the value
// of the switch before it.
func (g *grammar) boolWord(lv *level, k int) bool {
	return g.nopt && k < len(lv.argv) && (lv.argv[k] == "true" || lv.argv[k] == "false")
}

// read reads the option at argv[j] (a flag, not "--"). It returns the
// option's name, its value and the index of the element holding it (-1
// when none), the index after the option, and known: false when the
// option is in neither of g's sets or is ambiguous. An unknown option is
// read as a switch (next is j+1).
func (g *grammar) read(lv *level, j int) (name, value string, vi, next int, known bool) {
	a := lv.argv[j]
	takeNext := func(name string) (string, string, int, int, bool) {
		if j+1 < len(lv.argv) {
			return name, lv.argv[j+1], j + 1, j + 2, true
		}
		return name, "", -1, j + 1, true
	}
	if strings.HasPrefix(a, "--") {
		if k := strings.IndexByte(a, '='); k >= 0 {
			name, value = a[:k], a[k+1:]
			switch {
			case g.value[name]:
				return name, value, j, j + 1, true
			case g.isSwitch(name):
				return name, "", -1, j + 1, true
			}
			return name, "", -1, j + 1, false
		}
		switch {
		case g.value[a]:
			return takeNext(a)
		case g.isSwitch(a):
			return a, "", -1, j + 1, !g.boolWord(lv, j+1)
		}
		return a, "", -1, j + 1, false
	}
	switch {
	case g.value[a]:
		return takeNext(a)
	case g.switches[a]:
		return a, "", -1, j + 1, !g.boolWord(lv, j+1)
	}
	if !g.cluster {
		if len(a) > 2 && a[2] == '=' {
			if f := a[:2]; g.value[f] {
				return f, a[3:], j, j + 1, true
			}
		}
		return a, "", -1, j + 1, false
	}
	for x := 1; x < len(a); x++ {
		f := "-" + a[x:x+1]
		if g.switches[f] {
			continue
		}
		if g.value[f] {
			if x+1 < len(a) {
				return f, strings.TrimPrefix(a[x+1:], "="), j, j + 1, true
			}
			return takeNext(f)
		}
		return f, "", -1, j + 1, false
	}
	return a, "", -1, j + 1, true
}

// options reads the options from argv[j] on per g, calls visit (when not
// nil) with each one's name, value and value index (-1 when it has none),
// and returns the index of the first operand (after "--", or the first
// element that is no flag) and whether every option was known. An unknown
// option is read as a switch, or with unknownTakes, when written without
// "=", as taking the next element; either way, what follows it names
// nothing.
func (g *grammar) options(lv *level, j int, unknownTakes bool, visit func(name, value string, vi int)) (int, bool) {
	known := true
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" {
			return j + 1, known
		}
		if !isFlag(a) {
			return j, known
		}
		name, value, vi, next, ok := g.read(lv, j)
		if !ok {
			known = false
			if unknownTakes && !strings.Contains(a, "=") {
				next = j + 2
			}
		} else if visit != nil {
			visit(name, value, vi)
		}
		j = next
	}
	return j, known
}

// npm's options (npx, npm exec and npm before its command).
var (
	npmValue = []string{
		"--registry", "--cache", "--loglevel", "--userconfig", "--globalconfig",
		"--prefix", "-C", "-w", "--workspace", "--node-options", "--shell",
		"--script-shell", "--location", "-L", "--omit", "--include", "--before",
		"--enjoy-by", "--tag", "--scope", "--npm", "--node-arg", "--otp",
		"--auth-type", "--cafile", "--ca", "--cert", "--key", "--proxy",
		"--https-proxy", "--noproxy", "--user-agent", "--fetch-retries",
		"--fetch-retry-factor", "--fetch-retry-mintimeout", "--fetch-retry-maxtimeout",
		"--fetch-timeout", "--logs-dir", "--logs-max", "--maxsockets", "--install-strategy",
		"--package", "-p", "--call", "-c",
	}
	npmSwitches = []string{
		"-y", "--yes", "--no", "--no-install", "--ignore-existing", "--shell-auto-fallback",
		"--always-spawn", "-q", "--quiet", "-s", "--silent", "-d", "--verbose", "--silly",
		"--prefer-offline", "--prefer-online", "--offline", "--ignore-scripts",
		"--legacy-peer-deps", "--strict-peer-deps", "--foreground-scripts", "-f", "--force",
		"-g", "--global", "--local", "-ws", "--workspaces", "-iwr", "--include-workspace-root",
		"--audit", "--fund", "--progress", "--json", "--parseable", "--long", "--dry-run",
		"--install-links", "--strict-ssl", "--update-notifier", "--unicode", "--timing",
		"--usage", "-h", "--help", "-v", "--version", "--package-lock", "--engine-strict",
		"--bin-links", "--save", "--global-style", "--prefer-dedupe",
	}
	npmGrammar = &grammar{value: flags(npmValue...), switches: flags(npmSwitches...), nopt: true}

	bunxGrammar = &grammar{
		value:    flags("-p", "--package", "--cwd", "--registry"),
		switches: flags("--bun", "--silent", "--verbose", "--no-install", "-h", "--help", "--version"),
	}
	pnpmGrammar = &grammar{
		value: flags("--package", "--reporter", "--allow-build", "--dir", "-C", "--filter", "-F",
			"--loglevel", "--workspace-dir", "--config-dir", "--store-dir", "--cache-dir",
			"--virtual-store-dir", "--use-node-version", "--registry"),
		switches: flags("-c", "--shell-mode", "-s", "--silent", "-h", "--help", "-w",
			"--workspace-root", "-r", "--recursive", "--color", "--use-stderr", "--stream",
			"--offline", "--prefer-offline", "--ignore-scripts", "--aggregate-output", "-v", "--version"),
		nopt: true,
	}
	yarnGrammar = &grammar{
		value:    flags("-p", "--package", "--cwd"),
		switches: flags("-q", "--quiet", "-h", "--help"),
	}
)

// Python runners' options (uv, uvx, pipx).
var (
	uvGrammar = &grammar{
		value: uvValue,
		switches: flags(
			"-q", "--quiet", "-v", "--verbose", "-n", "--no-cache", "--offline", "--no-offline",
			"--native-tls", "--no-native-tls", "--no-config", "--no-progress", "--preview",
			"--no-preview", "--isolated", "--managed-python", "--no-managed-python",
			"--no-python-downloads", "--allow-python-downloads", "-h", "--help", "-V", "--version",
			"-U", "--upgrade", "--no-upgrade", "--reinstall", "--no-reinstall", "--refresh",
			"--no-refresh", "--no-build", "--build", "--no-binary", "--binary", "--no-build-isolation",
			"--build-isolation", "--no-sources", "--no-index", "--compile-bytecode",
			"--no-compile-bytecode", "--no-sync", "--frozen", "--locked", "--all-packages",
			"--all-extras", "--no-dev", "--dev", "--only-dev", "--no-default-groups", "--all-groups",
			"--no-editable", "--exact", "--inexact", "--active", "--no-active", "--no-env-file",
			"--no-project", "--script", "-s", "--gui-script", "--no-install-project",
			"--no-install-workspace", "--no-install-local", "--show-resolution", "--lfs",
			"--no-build-isolation-package", "--no-workspace", "--system-certs",
		),
		cluster: true,
	}
	pipxGrammar = &grammar{
		value: flags("--spec", "--python", "--index-url", "-i", "--pip-args", "--backend"),
		switches: flags("-h", "--help", "--version", "-q", "--quiet", "-v", "--verbose",
			"--no-cache", "--pypackages", "--path", "--system-site-packages", "-e", "--editable",
			"--fetch-missing-python", "--global"),
		cluster: true,
	}
)

// Docker's and podman's options.
var (
	dockerGlobal = &grammar{
		value: flags("--config", "-c", "--context", "-H", "--host", "-l", "--log-level",
			"--tlscacert", "--tlscert", "--tlskey",
			// podman
			"--cgroup-manager", "--conmon", "--connection", "--events-backend", "--hooks-dir",
			"--identity", "--imagestore", "--module", "--network-cmd-path", "--network-config-dir",
			"--out", "--registries-conf", "--root", "--runroot", "--runtime", "--runtime-flag",
			"--ssh", "--storage-driver", "--storage-opt", "--tmpdir", "--url", "--volumepath",
			"--cdi-spec-dir", "--db-backend"),
		switches: flags("-D", "--debug", "--tls", "--tlsverify", "-v", "--version",
			"--remote", "-r", "--syslog", "--noout", "--transient-store", "--help", "-h"),
		cluster: true,
	}
	dockerRun = &grammar{
		value: flags(
			"-e", "--env", "--env-file", "-v", "--volume", "--mount", "-p", "--publish",
			"--name", "--network", "--net", "-w", "--workdir", "-u", "--user", "--entrypoint",
			"-l", "--label", "--label-file", "-h", "--hostname", "--cpus", "-m", "--memory",
			"--restart", "--pull", "--platform", "--cap-add", "--cap-drop", "--device", "--dns",
			"--dns-search", "--dns-option", "--dns-opt", "--add-host", "--log-driver", "--log-opt",
			"--security-opt", "--ulimit", "--tmpfs", "--shm-size", "--ipc", "--pid", "--userns",
			"--cidfile", "--gpus", "--stop-signal", "--stop-timeout", "--health-cmd",
			"--health-interval", "--health-retries", "--health-start-period", "--health-timeout",
			"--health-start-interval", "--health-on-failure", "--health-startup-cmd",
			"--health-log-destination", "--health-max-log-count", "--health-max-log-size",
			"--group-add", "--runtime", "--annotation", "--arch", "--os", "--variant", "--pod",
			"--pod-id-file", "--secret", "--expose", "--link", "--link-local-ip", "--volumes-from",
			"--cgroupns", "--cgroup-parent", "--cgroups", "--cgroup-conf", "--uts", "--init-path",
			"--mac-address", "--ip", "--ip6", "--isolation", "--kernel-memory", "--memory-swap",
			"--memory-reservation", "--memory-swappiness", "--cpu-shares", "-c", "--cpuset-cpus",
			"--cpuset-mems", "--cpu-period", "--cpu-quota", "--cpu-rt-period", "--cpu-rt-runtime",
			"--cpu-count", "--cpu-percent", "--blkio-weight", "--blkio-weight-device",
			"--device-cgroup-rule", "--device-read-bps", "--device-write-bps", "--device-read-iops",
			"--device-write-iops", "--oom-score-adj", "--pids-limit", "--sysctl", "--storage-opt",
			"--attach", "-a", "--detach-keys", "--domainname", "--hooks-dir", "--preserve-fds",
			"--preserve-fd", "--requires", "--sdnotify", "--seccomp-policy", "--timeout", "--tz",
			"--umask", "--chrootdirs", "--personality", "--decryption-key", "--authfile", "--creds",
			"--cert-dir", "--network-alias", "--net-alias", "--alias", "--env-merge", "--unsetenv",
			"--gidmap", "--uidmap", "--subgidname", "--subuidname", "--systemd", "--image-volume",
			"--pidfile", "--conmon-pidfile", "--passwd-entry", "--group-entry", "--retry",
			"--retry-delay", "--shm-size-systemd", "--hostuser", "--mask", "--unmask", "--rdt-class",
			"--io-maxbandwidth", "--io-maxiops", "--volume-driver", "--runtime-flag"),
		switches: flags(
			"-i", "-t", "-d", "-P", "-q", "--rm", "--init", "--privileged", "--read-only",
			"--interactive", "--tty", "--detach", "--publish-all", "--quiet", "--no-healthcheck",
			"--oom-kill-disable", "--sig-proxy", "--disable-content-trust", "--use-api-socket",
			"--replace", "--rmi", "--tls-verify", "--env-host", "--http-proxy", "--no-hosts",
			"--no-hostname", "--rootfs", "--passwd", "--unsetenv-all", "--read-only-tmpfs", "--help"),
		cluster: true,
	}
	composeGlobal = &grammar{
		value: flags("-f", "--file", "-p", "--project-name", "--profile", "--env-file",
			"--project-directory", "--ansi", "--parallel", "--progress"),
		switches: flags("--verbose", "--dry-run", "--compatibility", "--all-resources", "--help"),
		cluster:  true,
	}
	composeRun = &grammar{
		value: flags("-e", "--env", "--env-from-file", "-v", "--volume", "-p", "--publish",
			"--name", "-w", "--workdir", "-u", "--user", "--entrypoint", "-l", "--label",
			"--cap-add", "--cap-drop", "--pull"),
		switches: flags("-d", "-T", "-i", "-P", "--rm", "--detach", "--no-TTY", "--interactive",
			"--no-deps", "--service-ports", "--use-aliases", "--build", "--remove-orphans",
			"--quiet-pull", "--quiet", "-q", "--help", "--tty", "-t"),
		cluster: true,
	}
)

var (
	npmNameRe  = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9~][a-z0-9._~-]*$`)
	repoRe     = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	pyNameRe   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	pyModuleRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	imageRe    = regexp.MustCompile(`^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
	serviceRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// fits reports whether s matches re and is no longer than a name may be
// (a longer one would be shown cut, as a different name).
func fits(re *regexp.Regexp, s string) bool { return len(s) <= maxName && re.MatchString(s) }

// isNpmName reports whether s is an npm package name (npm allows 214
// bytes; names are cut at maxName).
func isNpmName(s string) bool { return fits(npmNameRe, s) }

// isRepoName reports whether s is a repository or file name: what a
// GitHub shorthand, a URL or a path names.
func isRepoName(s string) bool { return fits(repoRe, s) }

func isPyName(s string) bool   { return fits(pyNameRe, s) }
func isPyModule(s string) bool { return fits(pyModuleRe, s) }
