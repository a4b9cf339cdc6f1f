// Package vmtests runs mcptrace's Go tests on real kernels booted in QEMU.
//
// It has two commands and the self-tests that keep them honest:
//
//   - cmd/vmexec is a go test -exec program. Given a kernel (-kernel 5.10,
//     6.1, 6.12, 7/sid, or a vmlinuz path) it resolves and caches the Debian
//     kernel image, builds an initramfs (static busybox, the test binary,
//     the package's testdata/, any -file), boots it with TCG, runs the test
//     binary (under a shim, so its parent is not PID 1) with the same
//     arguments in /src/<package dir>, streams the output back byte for
//     byte, and exits with the test binary's status.
//   - cmd/vmmatrix runs go test -json -exec vmexec for every kernel of
//     $KERNELS over a set of packages and prints a kernel × package table of
//     pass/fail/skip with the skip reasons and per-kernel timings.
//
// The guest has three serial ports: the console (kernel messages, kept out
// of test output and shown only when a run fails), a raw port carrying the
// test binary's stdout+stderr, and a control port on which the guest init
// reports the exit status with a per-run nonce. So go test -json parses
// exactly what the test printed, and a run counts as passed only if the
// guest reported exit status 0. A kernel panic, a guest that powers off
// without a status, a hang past the timeout (reported with the last
// console lines), or an interrupt is a failure with exit status 125.
//
// What it deliberately does not do:
//
//   - No KVM: guests run under TCG (-accel tcg -cpu max). On the machines
//     this project runs on, guests hang under KVM; TCG is slower but
//     deterministic.
//   - No patching of hot kernel code while tests run: the guest's init
//     holds skb_copy_datagram_iovec and the sched_process_fork/exec/exit tracepoints
//     with two no-op programs each (internal/vm/hotpatch_linux.go). A
//     test attaching to one of them would otherwise make the kernel
//     rewrite running code, which QEMU's multi-threaded TCG does not keep
//     coherent across vCPUs: the guest dies in an "Oops: int3" or locks
//     up (TestKernelSurvivesTheRequestReaderAttachedAndDetachedUnderSocketReads
//     in sensor/ showed it with vmexec -no-hold while the request reader
//     was on sys_enter). Single-threaded TCG
//     (vmexec -tcg-thread single) would be coherent, but delays each IPI
//     up to 100 ms, and the enforcer's tests then time out.
//   - No kernel modules, disks or network devices: Debian builds virtio,
//     9p and overlay as modules, so the guest is an initramfs only; the
//     loopback interface is up, nothing else.
//   - No full distribution in the guest: static busybox plus a fixed set
//     of host commands (dash as /bin/sh, coreutils, setsid, ps, …) copied
//     with their shared libraries, so that tests see a Debian-like
//     userland; anything else must be shipped with -file or -host-tool.
//     vmexec itself must be static (CGO_ENABLED=0): it is the guest's
//     /init. Dynamically linked test binaries and -file binaries get the
//     host's libraries.
//   - Files the test writes in the guest (coverage profiles, -test.outputdir,
//     CPU profiles) are not copied back.
//   - Only the package's testdata/ is shipped, not the rest of the source
//     tree; ship other files with -file host:guest.
//   - The host's environment is not forwarded, except MCPTRACE_* and names
//     given with -env.
//
// The self-tests in this package boot real guests on one kernel (6.1, or
// $MCPTRACE_VMTEST_KERNEL) with the fixture package in testdata/guestfixture.
// They skip, naming what is missing, without qemu, busybox, the go command
// or a reachable Debian mirror, and fail instead under MCPTRACE_REQUIRE_ALL=1.
package vmtests
