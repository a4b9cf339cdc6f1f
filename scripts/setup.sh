#!/usr/bin/env bash
# Installs what building, running and testing mcptrace needs on Debian 12,
# from Debian packages only. Idempotent and quiet: apt runs only when a
# package is missing. No system service is started or enabled: the tests
# start their own Prometheus and dockerd and never touch the machine's.
#
#   scripts/setup.sh agent   what `make run` needs (nothing beyond Go today)
#   scripts/setup.sh test    + clang-19/libbpf (make generate), qemu and
#                            busybox (VM kernel matrix), Node.js and the
#                            MCP host's npm packages and the real agent
#                            hosts from npm: Claude Code, Codex, Copilot
#                            CLI, Gemini CLI, MCP Inspector (end-to-end
#                            tests), git (Claude Code runs it),
#                            prometheus (promtool for deploy/, the server
#                            the end-to-end test starts), docker.io,
#                            docker-compose and busybox-static (the private
#                            Docker engine, the clients and
#                            image of internal/dockertest), graphviz and
#                            librsvg2-bin (the tests render the session
#                            pictures: dot for --format dot, rsvg-convert
#                            for the SVG timeline), debootstrap and systemd
#                            (the Debian package is installed, upgraded and
#                            purged in a fresh Debian 12 root, its unit
#                            checked with systemd-analyze), wine64, wine
#                            and gcc-mingw-w64-x86-64 (the Windows tests run
#                            under wine, with a shim DLL built by mingw),
#                            python3-pylsp, tmux and gnupg (real bystanders
#                            `mcptrace orphans` must never list: an editor's
#                            stdio language server, a tmux server, a
#                            gpg-agent)
#   scripts/setup.sh hosts   the real agent hosts from npm alone (see
#                            below); MCPTRACE_SETUP_HOSTS=later makes
#                            `test` leave them out, for make check, which
#                            installs them while vet and the build run
#   scripts/setup.sh bench   + bpftrace and forkstat (the tracers make bench
#                            compares against), gcc for its workloads,
#                            bpftool, taskset; Node.js and the MCP host's
#                            npm packages (the realistic mix runs npm exec)
set -euo pipefail

want=()
case "${1:-test}" in
agent) ;;
hosts) ;;
test) want+=(clang-19 llvm-19 libbpf-dev bpftool util-linux procps prometheus docker.io docker-compose busybox-static graphviz librsvg2-bin debootstrap systemd wine64 wine gcc-mingw-w64-x86-64 tmux git python3-pylsp gnupg) ;;
bench) want+=(bpftrace forkstat gcc libc6-dev make util-linux bpftool procps) ;;
*) echo "usage: $0 [agent|test|hosts|bench]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (installs Debian packages, the agent loads BPF programs)" >&2
	exit 1
fi

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# Packages whose postinst starts a system service (and enables it under
# systemd) where there is an init system, with the units it starts: a
# Prometheus on :9090; a dockerd on /run/docker.sock with its containerd
# (docker.io pulls containerd and runc). The tests only run their binaries.
declare -A services=(
	[prometheus]="prometheus.service"
	[docker.io]="docker.service docker.socket containerd.service"
)
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	units=()
	for p in "${missing[@]}"; do
		if [ -n "${services[$p]:-}" ]; then
			read -ra u <<<"${services[$p]}"
			units+=("${u[@]}")
		fi
	done
	# A policy-rc.d that exits 101 forbids service starts for the length of
	# the install. One that exists already is left as it is.
	policy=
	if [ ${#units[@]} -gt 0 ] && [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		trap 'rm -f "$policy"' EXIT
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	if [ -n "$policy" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
	# Nor enabled at boot: the postinst enables the units under systemd.
	# One unit at a time, so a unit a package version lacks stops no other.
	if [ ${#units[@]} -gt 0 ] && [ -d /run/systemd/system ]; then
		for u in "${units[@]}"; do
			systemctl disable --now "$u" >/dev/null 2>&1 || true
		done
	fi
fi
if [ "${1:-test}" = test ]; then
	"$(dirname "$0")/../vmtests/setup.sh"
fi
if [ "${1:-test}" = test ] || [ "${1:-test}" = bench ] || [ "${1:-test}" = hosts ]; then
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		echo "setup: installing nodejs npm" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
	fi
	host="$(dirname "$0")/../e2e/testdata/mcphost"
	if [ ! -d "$host/node_modules/@modelcontextprotocol/sdk" ] || [ "$host/package-lock.json" -nt "$host/node_modules/.package-lock.json" ]; then
		echo "setup: npm ci in e2e/testdata/mcphost" >&2
		(cd "$host" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	fi
fi
if { [ "${1:-test}" = test ] && [ "${MCPTRACE_SETUP_HOSTS:-now}" != later ]; } || [ "${1:-test}" = hosts ]; then
	# The real agent hosts from npm, pinned by their package-lock.json, for
	# the end-to-end tests (e2e/hosts_linux_test.go; claude also for
	# wrap-config): Claude Code, Codex, the Copilot CLI, the Gemini CLI,
	# the MCP Inspector. A fresh machine installs the five side by side
	# in about 2 minutes, 1.2 GB in node_modules; once installed (and the
	# lock unchanged) nothing runs, and npm's cache keeps the tarballs.
	pids=()
	for h in claude codex copilot gemini inspector; do
		dir="$(dirname "$0")/../e2e/testdata/$h"
		if [ ! -d "$dir/node_modules/.bin" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
			echo "setup: npm ci in e2e/testdata/$h" >&2
			(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) &
			pids+=($!)
		fi
	done
	for p in "${pids[@]}"; do
		wait "$p"
	done
fi
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || { echo "setup: Go is not installed (expected on PATH or /usr/local/go)" >&2; exit 1; }
