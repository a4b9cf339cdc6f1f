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

start=$SECONDS
failed=()
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	echo "fuzz: ./$dir $name"
	if ! $go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir"; then
		failed+=("./$dir $name")
	fi
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
