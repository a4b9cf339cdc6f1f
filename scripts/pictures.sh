#!/usr/bin/env bash
# Draws the README's pictures of one real session with mcptrace itself:
# docs/session-timeline.svg (tree --session --format svg) and
# docs/session-graph.svg (tree --session --format dot, laid out by
# Graphviz's dot). Root; needs make build, Node.js and the end-to-end
# host's npm packages (scripts/setup.sh test).
#
# The session: the end-to-end MCP host (e2e/testdata/mcphost, the official
# SDK client) run under `mcptrace run`, starting the filesystem server
# through npx twice (a refresh that leaks the first), a destroy marker
# that ends both, one more server, then the host's exit, which ends the
# last one. The agent is private to this script: its own socket, pins,
# state and history, no host rules, narrowed to this script's processes.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin=$repo/bin/mcptrace
host=$repo/e2e/testdata/mcphost
[ -x "$bin" ] || { echo "pictures: build first: make build" >&2; exit 1; }
[ -d "$host/node_modules/@modelcontextprotocol/sdk" ] || { echo "pictures: the host's packages are missing: scripts/setup.sh test" >&2; exit 1; }
command -v dot >/dev/null || { echo "pictures: Graphviz's dot is missing: apt-get install graphviz" >&2; exit 1; }

# Fixed, plain paths: they show in the pictures' command lines.
work=/tmp/mcptrace-demo
[ -e "$work" ] && { echo "pictures: $work exists (another run?): remove it first" >&2; exit 1; }
mkdir -m 0755 "$work"
cp -r "$host" "$work/mcphost"
pins=$(mktemp -d /sys/fs/bpf/mcptrace-pictures-XXXXXX)
sock=$work/mcptrace.sock
agent=
cleanup() {
	[ -n "$agent" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null || true
	"$bin" uninstall --api.socket="$sock" --bpf.pin-dir="$pins" --state.dir="$work/state" --history.dir= >/dev/null || true
	rmdir "$pins" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
"$bin" agent --api.socket="$sock" --bpf.pin-dir="$pins" --state.dir="$work/state" --history.dir="$work/history" \
	--sessions.default-rules=false --sessions.within-pid=$$ --metrics.listen-address=127.0.0.1:0 \
	--enforcer.grace-period=500ms 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do "$bin" status --api.socket="$sock" >/dev/null 2>&1 && break; sleep 0.1; done

mkdir -p "$work/project"
export MCPTRACE_API_SOCKET=$sock PATH=$repo/bin:$PATH
coproc HOST { cd "$work/mcphost" && exec mcptrace run --session readme-demo -- node host.mjs "$work/project"; }
expect() { local line; while read -r line <&"${HOST[0]}"; do [ "$line" = "$1" ] && return; [[ $line == $1* ]] && return; done; echo "pictures: the host did not say $1" >&2; exit 1; }
expect ready
sleep 1
echo mark >&"${HOST[1]}"
expect marked
sleep 1
echo start >&"${HOST[1]}"
expect ready
sleep 1
echo exit >&"${HOST[1]}"
wait "$HOST_PID" || true
for _ in $(seq 50); do "$bin" tree --session readme-demo --api.socket="$sock" | grep -q "killed by mcptrace" && break; sleep 0.1; done
sleep 1 # the enforcer's reports

"$bin" tree --session readme-demo --api.socket="$sock" --format svg >docs/session-timeline.svg
"$bin" tree --session readme-demo --api.socket="$sock" --format dot | dot -Tsvg >docs/session-graph.svg
"$bin" tree --session readme-demo --api.socket="$sock" --width 200
echo "pictures: wrote docs/session-timeline.svg and docs/session-graph.svg" >&2
