#!/usr/bin/env bash
# Prints mcptrace's version for a build of this checkout, the one
# definition the Debian package (scripts/deb.sh) and the container image
# (scripts/image.sh) use: 0.1.0~gitTIME.HASH from the last commit, commit
# time (UTC) first, so that later commits sort as upgrades (dpkg
# --compare-versions) and every builder makes the same version.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "0.1.0~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$(git rev-parse --short=12 HEAD)"
