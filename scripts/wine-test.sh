#!/usr/bin/env bash
# Runs the Windows tests (every package with a _windows_test.go file) for
# real under wine: each package's test binary is cross-compiled with
# GOOS=windows and run by Debian's wine64 in a private prefix, with
# -test.v, and its exit status is the verdict. Under
# MCPTRACE_REQUIRE_ALL=1 a skipped test fails the run.
#
# The prefix lives in the cache (XDG_CACHE_HOME, else ~/.cache) under
# mcptrace/wine; it is made once (wineboot, about 10 s) with the shim DLL
# Go needs under wine 8 (scripts/wine/bcryptprimitives.c). Every wine
# process of the prefix is ended when the script exits (wineserver -k):
# the prefix is the tests' own.
#
#   scripts/wine-test.sh [PKG…]     default: every package with Windows tests
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
for tool in wine wineboot wineserver x86_64-w64-mingw32-gcc; do
	command -v "$tool" >/dev/null || { echo "wine-test: $tool is missing: run scripts/setup.sh test (Debian's wine64, wine and gcc-mingw-w64-x86-64)" >&2; exit 1; }
done
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mcptrace/wine
export WINEPREFIX=$cache/prefix WINEARCH=win64 WINEDEBUG=-all WINEDLLOVERRIDES="bcryptprimitives=n"
mkdir -p "$cache"
shim=$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll
trap 'wineserver -k 2>/dev/null || true' EXIT
if [ ! -f "$shim" ] || [ scripts/wine/bcryptprimitives.c -nt "$shim" ]; then
	echo "wine-test: preparing the wine prefix $WINEPREFIX" >&2
	x86_64-w64-mingw32-gcc -shared -O2 -o "$cache/bcryptprimitives.dll" \
		scripts/wine/bcryptprimitives.c scripts/wine/bcryptprimitives.def -ladvapi32
	timeout 300 wineboot -i >/dev/null 2>&1 || { echo "wine-test: wineboot -i failed in $WINEPREFIX" >&2; exit 1; }
	wineserver -w
	cp "$cache/bcryptprimitives.dll" "$shim"
fi

if [ $# -gt 0 ]; then
	pkgs=("$@")
else
	mapfile -t pkgs < <(find . -name node_modules -prune -o -name '*_windows_test.go' -printf '%h\n' | sort -u)
fi
[ ${#pkgs[@]} -gt 0 ] || { echo "wine-test: no package has Windows tests" >&2; exit 1; }
bin=$(mktemp -d)
trap 'wineserver -k 2>/dev/null || true; rm -rf "$bin"' EXIT
start=$(date +%s)
failed=()
for pkg in "${pkgs[@]}"; do
	exe=$bin/$(echo "${pkg#./}" | tr / _).test.exe
	GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $GO test -c -o "$exe" "$pkg"
	echo "wine-test: $pkg" >&2
	log=$bin/log
	set +e
	# In the package's directory, as go test runs a test: testdata/ is
	# found where the test looks for it.
	(cd "$pkg" && timeout 600 wine "$exe" -test.v -test.count=1 -test.timeout=5m) 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	if [ "$rc" != 0 ]; then
		failed+=("$pkg (exit $rc)")
	elif [ "${MCPTRACE_REQUIRE_ALL:-}" = 1 ] && grep -q -- '--- SKIP' "$log"; then
		failed+=("$pkg (a test skipped under MCPTRACE_REQUIRE_ALL=1)")
	elif ! grep -q -- '--- PASS' "$log"; then
		failed+=("$pkg (no test passed)")
	fi
	wineserver -k 2>/dev/null || true
done
echo "wine-test: ${#pkgs[@]} packages in $(( $(date +%s) - start ))s" >&2
if [ ${#failed[@]} -gt 0 ]; then
	printf 'wine-test: FAIL %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "wine-test: PASS" >&2
