#!/usr/bin/env bash
# Measures the agent's memory (root): one agent narrowed to this script
# (sessions.within-pid, no host rules) on its own pins, state and socket,
# removed with `mcptrace uninstall` when done.
#
#   scripts/agent-memory.sh [BIN] idle          RSS 5 s after it serves
#   scripts/agent-memory.sh [BIN] storm N       RSS before and after N short forks
#   scripts/agent-memory.sh [BIN] procs N       RSS before and with N live sleep processes
#
# BIN defaults to bin/mcptrace; AGENT_FLAGS adds flags to the agent
# (AGENT_FLAGS=--history.dir= measures it without its history). RssAnon is the agent's own heap and stacks;
# VmRSS adds file pages: the binary, and the ring buffer the reader maps
# (twice its bpf.ring-buffer-size once the ring has wrapped). The graph
# holds every process on the node: run it on a quiet machine.
set -euo pipefail
bin=bin/mcptrace
if [ -x "${1:-}" ]; then bin=$1; shift; fi
mode=${1:-idle}
n=${2:-10000}
pin=/sys/fs/bpf/mcpmem-$$
dir=$(mktemp -d)
sock=$dir/api.sock
pids=$dir/pids
touch "$pids"

"$bin" agent --sessions.within-pid $$ --sessions.default-rules=false --bpf.pin-dir "$pin" \
	--state.dir "$dir/state" --history.dir "$dir/history" --api.socket "$sock" --log.level warn ${AGENT_FLAGS:-} &
agent=$!
cleanup() {
	xargs -r kill -9 <"$pids" 2>/dev/null || true
	kill "$agent" 2>/dev/null && wait "$agent" || true
	"$bin" uninstall --bpf.pin-dir "$pin" --state.dir "$dir/state" >/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "agent-memory: the agent did not serve within 60 s" >&2; exit 1; }
sleep 5

rss() { awk '/^(VmRSS|RssAnon):/ {printf "%s %d kB  ", $1, $2}' "/proc/$agent/status"; }
tracked() {
	"$bin" status --json --api.socket "$sock" |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print("tracked", d["tracked_processes"], "exited", d["exited_processes"], "dropped", d.get("dropped_processes_total", "n/a"))'
}
echo "serving: $(rss) $(tracked)"
case $mode in
idle) ;;
storm)
	start=$(date +%s.%N)
	bash -c 'for ((i = 0; i < $0; i++)); do ( : ); done' "$n"
	echo "$n forks in $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
	sleep 2
	echo "after:   $(rss) $(tracked)"
	;;
procs)
	bash -c 'for ((i = 0; i < $0; i++)); do sleep 3600 >/dev/null 2>&1 & echo $!; done' "$n" >"$pids"
	sleep 5
	echo "with $n: $(rss) $(tracked)"
	;;
*)
	echo "agent-memory: unknown mode $mode (idle, storm N, procs N)" >&2
	exit 2
	;;
esac
