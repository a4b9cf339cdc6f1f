#!/usr/bin/env bash
# Prints mcptrace's version for a build of this checkout, the one
# definition the Debian package (scripts/deb.sh), the container image
# (scripts/image.sh) and make build use: 0.1.0~gitTIME.HASH from the
# last commit, commit time (UTC) first, so that later commits sort as
# upgrades (dpkg --compare-versions) and every builder makes the same
# version. Outside a git checkout (a tarball, no git) it prints nothing
# and fails: a build then reports what Go recorded, or "devel".
set -euo pipefail
cd "$(dirname "$0")/.."
time=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)
hash=$(git rev-parse --short=12 HEAD)
echo "0.1.0~git$time.$hash"
