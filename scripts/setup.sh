#!/usr/bin/env bash
# Installs what building, running and testing mcptrace needs on Debian 12,
# from Debian packages only, and checks that the Go toolchain is new
# enough. Idempotent and quiet: apt runs only when a package is missing.
# No system service is started or enabled: the tests start their own
# Prometheus and dockerd and never touch the machine's.
#
#   scripts/setup.sh agent   what `make run` needs: make, git (the build
#                            stamps its version), ca-certificates (Go
#                            downloads modules over HTTPS), and a Go at
#                            least as new as go.mod's go line (checked)
#   scripts/setup.sh go      fetches that Go through the Go module proxy
#                            (golang.org/toolchain, checked against
#                            sum.golang.org) into /usr/local/go when no Go
#                            there or on PATH is new enough; an older Go
#                            (Debian 12's golang-go is 1.19) downloads it
#   scripts/setup.sh check-go [GO]   only the check: says what to do and
#                            exits 1 when GO (default: which-go's) is too old
#   scripts/setup.sh which-go        prints the Go to build with: the first
#                            new enough of PATH's go and /usr/local/go/bin/go
#   scripts/setup.sh test    + clang-19/libbpf (make generate), qemu and
#                            busybox (VM kernel matrix), Node.js and the
#                            MCP host's npm packages and the Claude Code
#                            CLI from npm (end-to-end tests),
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
#                            checked with systemd-analyze), lintian (the
#                            package is checked with it), wine64, wine
#                            and gcc-mingw-w64-x86-64 (the Windows tests run
#                            under wine, with a shim DLL built by mingw)
#   scripts/setup.sh hosts   the real agent hosts from npm alone (Claude
#                            Code, Codex, Copilot, Gemini, the MCP
#                            Inspector: e2e); MCPTRACE_SETUP_HOSTS=later
#                            makes `test` leave them out, for make check,
#                            which installs them while vet and builds run
#   scripts/setup.sh bench   + bpftrace and forkstat (the tracers make bench
#                            compares against), gcc for its workloads,
#                            bpftool, taskset; Node.js and the MCP host's
#                            npm packages (the realistic mix runs npm exec);
#                            docker.io and busybox-static (a private dockerd
#                            the agents watch, and a docker run -i client
#                            beside one storm)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)

# wantgo is the Go go.mod asks for at least (its go line).
wantgo() { sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$repo/go.mod"; }

# gover GO prints GO's own version (1.19.8), or nothing when GO does not
# run. Outside the module and with GOTOOLCHAIN=local: the binary's own
# version, not a toolchain it would switch to.
gover() { { (cd / && GOTOOLCHAIN=local GOFLAGS= "$1" env GOVERSION) 2>/dev/null || true; } | sed -n 's/^go\([0-9][0-9.]*\).*/\1/p'; }

# atleast A B: version A >= version B.
atleast() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

# gocandidates lists the Go binaries there are: PATH's, /usr/local/go's.
gocandidates() {
	local g
	g=$(command -v go 2>/dev/null) && echo "$g"
	[ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go
	return 0
}

# whichgo prints the first Go new enough, else the first there is, else go.
whichgo() {
	local g first= want
	want=$(wantgo)
	for g in $(gocandidates); do
		first=${first:-$g}
		v=$(gover "$g")
		if [ -n "$v" ] && atleast "$v" "$want"; then
			echo "$g"
			return
		fi
	done
	echo "${first:-go}"
}

# checkgo GO says what to do and fails when GO cannot build mcptrace.
# A Go from 1.21 on fetches the toolchain go.mod names by itself
# (GOTOOLCHAIN, through the module proxy) unless GOTOOLCHAIN=local.
checkgo() {
	local g=$1 want v
	want=$(wantgo)
	v=$(gover "$g")
	if [ -n "$v" ] && atleast "$v" "$want"; then
		return 0
	fi
	if [ -n "$v" ] && atleast "$v" 1.21 && [ "${GOTOOLCHAIN:-auto}" != local ]; then
		echo "setup: Go $v ($g) will fetch Go $want through the Go module proxy itself (GOTOOLCHAIN)" >&2
		return 0
	fi
	{
		if [ -z "$v" ]; then
			echo "setup: no Go found (looked on PATH and in /usr/local/go): mcptrace needs Go $want or newer (go.mod)."
		else
			echo "setup: Go $v ($g) is too old: mcptrace needs Go $want or newer (go.mod's go line)."
			if [ -n "${GOTOOLCHAIN:-}" ] && atleast "$v" 1.21; then
				echo "  GOTOOLCHAIN=$GOTOOLCHAIN forbids fetching it: unset GOTOOLCHAIN, or"
			fi
		fi
		echo "  Fix (as root): scripts/setup.sh go"
		echo "    fetches Go $want through the Go module proxy (golang.org/toolchain, checked against sum.golang.org) into /usr/local/go;"
		echo "  or install Go $want or newer from https://go.dev/dl/ into /usr/local/go."
		echo "  Nothing was built."
	} >&2
	return 1
}

# fetchgo puts Go $(wantgo) into /usr/local/go, downloaded as the module
# golang.org/toolchain by whatever Go there is (any version since 1.17
# can download a module; Debian 12's 1.19 does), or by Debian's
# golang-1.19-go installed for the purpose and removed after.
fetchgo() {
	local want g v mod dir arch old installed=
	want=$(wantgo)
	g=$(whichgo)
	v=$(gover "$g")
	if [ -n "$v" ] && atleast "$v" "$want"; then
		echo "setup: Go $v ($g) is new enough (go.mod: $want)" >&2
		return 0
	fi
	if [ -z "$v" ]; then
		install golang-1.19-go
		g=/usr/lib/go-1.19/bin/go
		installed=golang-1.19-go
	fi
	install ca-certificates
	case "$(uname -m)" in
	x86_64) arch=amd64 ;;
	aarch64) arch=arm64 ;;
	*) echo "setup: no Go toolchain module for $(uname -m): install Go $want from https://go.dev/dl/" >&2; exit 1 ;;
	esac
	mod=golang.org/toolchain@v0.0.1-go$want.linux-$arch
	gotmp=$(mktemp -d)
	trap 'chmod -R u+w "$gotmp" 2>/dev/null; rm -rf "$gotmp"' EXIT
	local tmp=$gotmp
	echo "setup: fetching Go $want ($mod) through the Go module proxy with Go ${v:-1.19} ($g)" >&2
	# Outside any module, with a private module cache: go.mod's newer go
	# line is not read, and nothing is left behind but /usr/local/go.
	dir=$(cd "$tmp" && GO111MODULE=on GOFLAGS=-modcacherw GOTOOLCHAIN=local GOMODCACHE="$tmp/mod" "$g" mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$dir" ] || [ ! -f "$dir/bin/go" ]; then
		echo "setup: downloading $mod failed (is the Go module proxy reachable? GOPROXY=$("$g" env GOPROXY))" >&2
		exit 1
	fi
	rmdir /usr/local/go 2>/dev/null || true # an empty one (a mount point) is nothing to keep
	if [ -e /usr/local/go ]; then
		old=/usr/local/go.old-$(gover /usr/local/go/bin/go || true)-$(date +%s)
		mv /usr/local/go "$old"
		echo "setup: moved the older /usr/local/go aside to $old" >&2
	fi
	cp -r "$dir" /usr/local/go
	# A module zip keeps no file modes: the toolchain's programs are made
	# executable, as Go's own toolchain switch does.
	chmod -R u+w,go-w /usr/local/go
	chmod 755 /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
	if [ -n "$installed" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$installed" >/dev/null
	fi
	echo "setup: Go $(gover /usr/local/go/bin/go) is in /usr/local/go (add /usr/local/go/bin to PATH; make finds it there)" >&2
}

mode=${1:-test}
case "$mode" in
which-go) whichgo; exit 0 ;;
check-go) checkgo "${2:-$(whichgo)}"; exit ;;
esac

want=()
case "$mode" in
agent | go) want+=(make git ca-certificates) ;;
hosts) ;;
test) want+=(make git ca-certificates lintian clang-19 llvm-19 libbpf-dev bpftool util-linux procps prometheus docker.io docker-compose busybox-static graphviz librsvg2-bin debootstrap systemd wine64 wine gcc-mingw-w64-x86-64 tmux python3-pylsp gnupg) ;;
bench) want+=(make git ca-certificates bpftrace forkstat gcc libc6-dev util-linux bpftool procps docker.io busybox-static) ;;
*) echo "usage: $0 [agent|go|check-go [GO]|which-go|test|hosts|bench]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (installs Debian packages, the agent loads BPF programs)" >&2
	exit 1
fi

# install installs the Debian packages among its arguments that are missing.
install() {
	local p u missing=() units=()
	policy=
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	# Packages whose postinst starts a system service (and enables it under
	# systemd) where there is an init system, with the units it starts: a
	# Prometheus on :9090; a dockerd on /run/docker.sock with its containerd
	# (docker.io pulls containerd and runc). The tests only run their binaries.
	local -A services=(
		[prometheus]="prometheus.service"
		[docker.io]="docker.service docker.socket containerd.service"
	)
	if [ ${#missing[@]} -gt 0 ]; then
		echo "setup: installing ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		for p in "${missing[@]}"; do
			if [ -n "${services[$p]:-}" ]; then
				read -ra u <<<"${services[$p]}"
				units+=("${u[@]}")
			fi
		done
		# A policy-rc.d that exits 101 forbids service starts for the length of
		# the install. One that exists already is left as it is.
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
}

# checkspace GIB DIR...: each filesystem that holds a DIR (or the nearest
# part of its path that exists) has at least GIB GiB free; otherwise it
# says which filesystem, what writes there and what to do, and exits 1.
# A full disk otherwise surfaces minutes later as an ENOSPC from whichever
# tool wrote last (npm, the linker, debootstrap), far from its cause.
checkspace() {
	local need=$1 d p fs avail bad=0
	local -A holds=()
	shift
	for d in "$@"; do
		p=$d
		while [ ! -e "$p" ]; do p=$(dirname "$p"); done
		fs=$(df -P "$p" | awk 'NR == 2 { print $6 }')
		holds[$fs]+=" $d"
	done
	for fs in "${!holds[@]}"; do
		avail=$(df -P -k "$fs" | awk 'NR == 2 { print int($4 / 1048576) }')
		if [ "$avail" -lt "$need" ]; then
			echo "setup: $fs has $avail GiB free; the tests need $need GiB there (it holds${holds[$fs]}): free space, or point TMPDIR, XDG_CACHE_HOME, GOCACHE and npm_config_cache at a filesystem with room" >&2
			bad=1
		fi
	done
	return "$bad"
}

# What a full `make check` writes, measured on a fresh machine (docs/ci.md):
# the Go build and module caches, the kernels and the Debian root under
# XDG_CACHE_HOME, node_modules and npm's cache, bin/ and the tests' temporary
# directories.
if [ "$mode" = test ]; then
	checkspace 8 "$repo" "${TMPDIR:-/tmp}" "${XDG_CACHE_HOME:-$HOME/.cache}" \
		"$(go env GOCACHE 2>/dev/null || echo "$HOME/.cache/go-build")" \
		"$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")" \
		"${npm_config_cache:-$HOME/.npm}" || exit 1
fi
install "${want[@]}"
if [ "$mode" = test ]; then
	"$(dirname "$0")/../vmtests/setup.sh"
fi
if [ "$mode" = test ] || [ "$mode" = bench ] || [ "$mode" = hosts ]; then
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
if { [ "$mode" = test ] && [ "${MCPTRACE_SETUP_HOSTS:-now}" != later ]; } || [ "$mode" = hosts ]; then
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
if [ "$mode" = go ]; then
	fetchgo
else
	checkgo "$(whichgo)"
fi
