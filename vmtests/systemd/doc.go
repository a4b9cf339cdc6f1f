// Package systemd boots the Debian package under systemd: a Debian 12
// root made by debootstrap, with the package installed as apt would, is
// packed into an initramfs and booted in QEMU with Debian 12's kernel,
// systemd as PID 1. A check unit inside (testdata/) then proves that
// mcptrace.service starts the agent under the unit's hardening, that
// `systemctl restart mcptrace` keeps a running session enforced, and
// what `systemd-analyze security` rates the unit, booted.
//
// It has no code besides its test, runs on the host only (QEMU cannot
// run inside the VM matrix's guests), and boots one kernel, not the
// matrix: the matrix proves the agent on every kernel, this the unit.
package systemd
