#!/usr/bin/env bash
# Builds the Debian package of mcptrace with Debian's own dpkg-deb.
#
#   scripts/deb.sh [VERSION [OUTDIR]]    default: a version from the last
#                                        commit (0.1.0~gitTIME.HASH), dist/
#
# The package holds the static binary, the systemd unit, a commented
# /etc/mcptrace/config.yaml generated from the agent's options (a
# conffile), a man page per command, bash/zsh/fish completions, and the
# Prometheus rules and Grafana dashboard under /usr/share/mcptrace.
# Maintainer scripts: deploy/debian/{postinst,prerm,postrm}.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
# Modes do not depend on the builder's umask, and times on when it ran:
# every file's date (and the man pages') is the last commit's.
umask 022
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}

version=${1:-}
if [ -z "$version" ]; then
	version=$(scripts/version.sh)
fi
if ! [[ $version =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
	echo "deb: version $version: want a Debian version (digits first; letters, digits, . + ~ -)" >&2
	exit 2
fi
out=${2:-dist}
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root

echo "deb: building mcptrace $version for $arch"
# The version and commit `mcptrace version` and mcptrace_build_info show.
stamp="-X github.com/mcptrace/mcptrace/internal/version.version=$version -X github.com/mcptrace/mcptrace/internal/version.revision=$(git rev-parse HEAD)"
CGO_ENABLED=0 $go build -trimpath -ldflags "-s -w $stamp" -o "$root/usr/bin/mcptrace" ./cmd/mcptrace
bin=$root/usr/bin/mcptrace

install -D -m 0644 deploy/debian/mcptrace.service "$root/lib/systemd/system/mcptrace.service"
mkdir -p "$root/etc/mcptrace"
"$bin" config example >"$root/etc/mcptrace/config.yaml"

man=$root/usr/share/man/man1
mkdir -p "$man"
CGO_ENABLED=0 $go run -tags mangen -ldflags "$stamp" ./cmd/mcptrace gen-man "$man"
rm "$man"/mcptrace-completion-powershell.1 # no PowerShell completion is shipped
gzip -9n "$man"/*.1

install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d"
"$bin" completion bash >"$root/usr/share/bash-completion/completions/mcptrace"
"$bin" completion zsh >"$root/usr/share/zsh/vendor-completions/_mcptrace"
"$bin" completion fish >"$root/usr/share/fish/vendor_completions.d/mcptrace.fish"

install -D -m 0644 -t "$root/usr/share/mcptrace/prometheus" deploy/prometheus/mcptrace.rules.yml deploy/prometheus/prometheus.yml deploy/prometheus/fleet.yml deploy/prometheus/kubernetes.yml
install -D -m 0644 -t "$root/usr/share/mcptrace/grafana" deploy/grafana/mcptrace.json
install -D -m 0644 deploy/debian/copyright "$root/usr/share/doc/mcptrace/copyright"
# A native package's changelog (lintian: no-changelog): this version, the
# commits that led to it, dated as the last commit, as every builder
# makes it.
{
	echo "mcptrace ($version) unstable; urgency=medium"
	echo
	git log -20 --no-merges --format='  * %s (%h)' | cut -c1-79
	echo
	echo " -- mcptrace developers <mcptrace@users.noreply.github.com>  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$root/usr/share/doc/mcptrace/changelog.gz"
chmod 0644 "$root/usr/share/doc/mcptrace/changelog.gz"
install -D -m 0644 deploy/debian/lintian-overrides "$root/usr/share/lintian/overrides/mcptrace"

install -d "$root/DEBIAN"
install -m 0755 -t "$root/DEBIAN" deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm
echo /etc/mcptrace/config.yaml >"$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: mcptrace
Version: $version
Architecture: $arch
Maintainer: mcptrace developers <mcptrace@users.noreply.github.com>
Installed-Size: $size
Depends: init-system-helpers (>= 1.54~)
Section: admin
Priority: optional
Homepage: https://github.com/mcptrace/mcptrace
Description: lineage of AI agent sessions, and the end of what they leave
 A node agent that watches process creation in the kernel (eBPF), keeps a
 live lineage graph from each AI agent session (Claude Code, Codex,
 Copilot, Cursor, goose, OpenClaw, VS Code) through every wrapper (npx,
 uvx, sh -c, docker run) to the MCP servers and containers below, and ends
 every descendant once the session ends. Prometheus metrics for leak
 alerts; mcptrace tree and mcptrace history for forensics.
CONTROL
# Every file but the conffile, as dh_md5sums does.
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
mkdir -p "$out"
deb=$out/mcptrace_${version}_${arch}.deb
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "deb: wrote $deb ($(du -h "$deb" | cut -f1))"
