#!/usr/bin/env bash
# Runs the tests that ever failed once and passed on a rerun (in CI or a
# dry run) many times under load: two busy loops beside them, as on a CI
# machine whose other stage or neighbour is busy. A flake is a bug to
# find; this is how its fix is proven (docs/ci.md lists each one and its
# cause).
#
#   scripts/stress.sh host [COUNT]          default 20, on this machine's kernel
#   scripts/stress.sh vm KERNELS [COUNT]    default 5, e.g. vm "5.10 7" 5
#
# Not part of make check (it takes 20 to 40 minutes); `make stress` runs
# both. vm mode goes through make vmtest (VMMATRIX_ARGS carries the go
# test flags), so a failure leaves its output under bin/vmtest-runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

# package  tests (a go test -run pattern)
suspects=(
	"./agent/      ^(TestDoomKillsAForkLoopWhileTheAgentIsDown|TestMarkerWithoutSessionFromAnotherUIDUnderARootHostIsRefused|TestSelfExecLoopHoldsBoundedImages)$"
	"./enforcer/   ^(TestSweepCatchesMembersForkingWhileBeingKilled)$"
	"./api/        ^(TestHeldConnectionActsForNobodyWithTheKernelsBinding|TestReusePIDGivesWayToAProcessHoldingThePID)$"
	"./sensor/     ^(TestKernelSurvivesTheRequestReaderAttachedAndDetachedUnderSocketReads|TestRingGathersLongerOnlyUnderAStorm|TestRingWaitsForABusyRecord)$"
	"./containers/ ^(TestCgroupKillEndsEveryProcessOfAContainer)$"
	"./e2e/        ^(TestContainersOfEndedSessionsAreStoppedAndTheClientAloneStopsNothing|TestRealHostsAreRecognisedDrawnRightAndLeaveNothing)$"
)
# Not here: TestHostileUsersSwitchNothingOff (e2e), which measures root's
# latency with the machine to itself; beside two busy loops it measures
# them (docs/ci.md).
# Packages with no guest (Makefile VMTEST_HOST_ONLY).
host_only=" ./containers/ ./e2e/ "

busy_pids=()
busy() {
	for _ in 1 2; do
		(while :; do :; done) &
		busy_pids+=($!)
	done
	trap 'kill "${busy_pids[@]}" 2>/dev/null || true' EXIT
	echo "stress: two busy loops running (pids ${busy_pids[*]})"
}

mode=${1:-}
case $mode in
host)
	count=${2:-20}
	busy
	failed=0
	for s in "${suspects[@]}"; do
		read -r pkg pattern <<<"$s"
		echo "stress: host: $pkg $pattern × $count"
		if ! $GO test -count="$count" -timeout 60m -run "$pattern" "$pkg"; then
			failed=1
		fi
	done
	exit $failed
	;;
vm)
	kernels=${2:?usage: $0 vm KERNELS [COUNT]}
	count=${3:-5}
	busy
	pkgs=() run=()
	for s in "${suspects[@]}"; do
		read -r pkg pattern <<<"$s"
		[[ $host_only == *" $pkg "* ]] && continue
		pkgs+=("$pkg")
		run+=("${pattern#^(}")
	done
	# One -run pattern for every package: the names are unique.
	pattern="^($(IFS='|'; echo "${run[*]%)\$}"))\$"
	echo "stress: vm $kernels: ${pkgs[*]} $pattern × $count"
	VMMATRIX_ARGS="-- -count=$count -run $pattern" \
		make --no-print-directory vmtest KERNELS="$kernels" PKGS="${pkgs[*]}" VMTEST_PLAN=
	;;
*)
	echo "usage: $0 host [COUNT] | vm KERNELS [COUNT]" >&2
	exit 2
	;;
esac
