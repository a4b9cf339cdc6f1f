#!/usr/bin/env bash
# Installs what the VM test runner (vmtests/cmd/vmexec, vmmatrix) needs on
# Debian 12: QEMU for x86-64 (run with TCG), a static busybox for the guest,
# the archive keyring apt checks kernel packages with, and xz/zstd to
# unpack kernel images once so that guests boot faster (without them the
# runner still works, booting the compressed image). dpkg-deb and apt-get
# come with every Debian system. Idempotent and quiet: apt runs only when a
# package is missing.
set -euo pipefail

want=(qemu-system-x86 busybox-static debian-archive-keyring xz-utils zstd)

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "vmtests/setup.sh: missing ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "vmtests/setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
