#!/usr/bin/env bash
# Builds the container image of the mcptrace agent without pulling
# anything: a root file system holding only the static binary
# (/usr/bin/mcptrace), imported with `docker import`. The DaemonSet
# (deploy/kubernetes) and the README's `docker run` line run it.
#
#   scripts/image.sh [VERSION]     default: scripts/version.sh
#
# Tags mcptrace:VERSION (a ~ in the version becomes -) and mcptrace:latest
# in the engine DOCKER_HOST names (default: the local one), and writes
# IMAGE_TAR (default dist/mcptrace-image.tar; empty: none) with `docker
# save`, to load on nodes that have no registry:
# `ctr -n k8s.io images import dist/mcptrace-image.tar`.
# DOCKER is the docker CLI (default: docker on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
docker=${DOCKER:-docker}
umask 022
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
version=${1:-$(scripts/version.sh)}
tag=${version//\~/-}
if ! [[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
	echo "image: version $version: not a docker tag (letters, digits, _ . - and ~)" >&2
	exit 2
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

echo "image: building mcptrace:$tag"
# The version and commit `mcptrace version` and mcptrace_build_info show.
stamp="-X github.com/mcptrace/mcptrace/internal/version.version=$version -X github.com/mcptrace/mcptrace/internal/version.revision=$(git rev-parse HEAD)"
CGO_ENABLED=0 $go build -trimpath -ldflags "-s -w $stamp" -o "$stage/root/usr/bin/mcptrace" ./cmd/mcptrace
# The mount points the DaemonSet uses exist in the image, so a read-only
# root file system needs none made.
mkdir -p "$stage"/root/{etc/mcptrace,run/mcptrace,var/lib/mcptrace,sys,proc,tmp}
chmod 1777 "$stage/root/tmp"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$stage/root" -cf "$stage/rootfs.tar" .
id=$($docker import \
	--change 'ENTRYPOINT ["/usr/bin/mcptrace"]' \
	--change 'CMD ["agent"]' \
	--change "LABEL org.opencontainers.image.title=mcptrace org.opencontainers.image.version=$version" \
	--message "mcptrace $version" \
	"$stage/rootfs.tar" "mcptrace:$tag")
$docker tag "mcptrace:$tag" mcptrace:latest
echo "image: mcptrace:$tag ($id), also mcptrace:latest"
out=${IMAGE_TAR-dist/mcptrace-image.tar}
if [ -n "$out" ]; then
	mkdir -p "$(dirname "$out")"
	$docker save -o "$out" "mcptrace:$tag" mcptrace:latest
	echo "image: saved to $out ($(du -h "$out" | cut -f1))"
fi
