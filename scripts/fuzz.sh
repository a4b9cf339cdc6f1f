#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for a bounded time each.
#
#   scripts/fuzz.sh [FUZZTIME]     FUZZTIME per target, default 30s
#
# Targets are found, not listed: every `func FuzzX(` in a *_test.go file
# under the module, so a target added anywhere runs without editing this.
# The budget (targets × FUZZTIME) is printed before and the time taken
# after. A failure leaves the crashing input in the package's
# testdata/fuzz/FuzzX/ directory, where `go test` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${1:-30s}
if ! [[ $fuzztime =~ ^[0-9]+(s|m|x)$ ]]; then
	echo "fuzz: FUZZTIME $fuzztime: want a whole number of seconds, minutes or runs such as 30s, 5m or 1000x" >&2
	exit 2
fi
go=${GO:-go}

# "dir name" per target, sorted for a stable order.
mapfile -t targets < <(
	git ls-files --cached --others --exclude-standard -- '*_test.go' |
		xargs -r grep -H -o -E '^func Fuzz[A-Za-z0-9_]*\(' |
		sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
		sort -u
)
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

budget=""
case $fuzztime in
*[0-9]s) budget=$((${#targets[@]} * ${fuzztime%s}))s ;;
*[0-9]m) budget=$((${#targets[@]} * ${fuzztime%m}))m ;;
*[0-9]x) budget="$((${#targets[@]} * ${fuzztime%x})) runs" ;;
esac
echo "fuzz: ${#targets[@]} targets × $fuzztime${budget:+ = $budget} of fuzzing (plus building)"

# Go before 1.27 can fail a target that found nothing: when a duration
# FUZZTIME ends while a worker is busy, the coordinator reports the end of
# its own timer as "context deadline exceeded" (golang/go#75804, fixed in
# go1.27). Such a failure is recognised only when it is exactly that: the
# bare message, no failing input written, no panic or test error; the
# target's corpus is then replayed (go test -run, deterministic) and must
# pass. Anything else fails the run.
endRace=false
if [[ $fuzztime != *x ]] && ! $go version | grep -qE 'go1\.(2[7-9]|[3-9][0-9])'; then
	endRace=true
fi
isEndRace() { # log name
	$endRace &&
		grep -q "^--- FAIL: $2 " "$1" &&
		[ "$(sed -n "/^--- FAIL: $2 /{n;p;}" "$1" | tr -d '[:space:]')" = "contextdeadlineexceeded" ] &&
		! grep -qE 'Failing input written|^panic:|_test\.go:[0-9]+:' "$1"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
failed=()
raced=()
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	echo "fuzz: ./$dir $name"
	# -fuzzminimizetime 5s: Go minimizes every new interesting input for
	# up to 60 s by default, which spent a short run's whole budget on
	# a few inputs of the config rewriters (about 10 executions in 30 s).
	# shellcheck disable=SC2086 # FUZZFLAGS is words (make check: -p=1 -parallel=1)
	if $go test ${FUZZFLAGS:-} -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "./$dir" 2>&1 | tee "$log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
		continue
	fi
	if isEndRace "$log" "$name"; then
		echo "fuzz: ./$dir $name: the run reached $fuzztime and no input failed; Go's end-of-run race (golang/go#75804) reported its timer as a failure. Replaying the corpus:"
		if $go test -count=1 -run "^${name}\$" "./$dir"; then
			raced+=("./$dir $name")
			continue
		fi
	fi
	failed+=("./$dir $name")
done
if [ ${#raced[@]} -gt 0 ]; then
	printf 'fuzz: end-of-run race only (golang/go#75804; corpus replay passed): %s\n' "${raced[@]}"
fi
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
