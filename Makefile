# Build, run and test mcptrace. Every target that needs a Debian package
# installs it through scripts/setup.sh first. Run as root: the agent and
# its tests load BPF programs.
SHELL := /bin/bash
# The first Go new enough for go.mod of PATH's and /usr/local/go's
# (scripts/setup.sh which-go); check-go says what to do when none is.
ifndef GO
GO := $(shell scripts/setup.sh which-go)
endif
export PATH := $(dir $(GO)):$(PATH)
export GOFLAGS ?= -mod=mod

.PHONY: all build check-go run setup setup-test generate check-generate vet vet-linux vet-ports test wine-test bench-once fuzz vmtest vmtest-kernels stress check bench deb image clean

all: build

# Static (no cgo): one file that runs on any Linux, and no libc mapped into
# the agent. The version and commit are stamped in (`mcptrace version`,
# mcptrace_build_info); outside a git checkout they are left to what Go
# records, and read "devel". Expanded when build runs, after setup has
# installed git.
VERSION ?= $(shell scripts/version.sh 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
STAMP = -X github.com/mcptrace/mcptrace/internal/version.version=$(VERSION) -X github.com/mcptrace/mcptrace/internal/version.revision=$(REVISION)
build: check-go
	CGO_ENABLED=0 $(GO) build -ldflags "$(STAMP)" -o bin/mcptrace ./cmd/mcptrace

setup:
	scripts/setup.sh agent

# Go must be at least go.mod's go line: a message that says what to do,
# before anything is built, instead of go.mod's parse errors.
check-go:
	@scripts/setup.sh check-go "$(GO)"

setup-test:
	scripts/setup.sh test

# Run the agent in the foreground with its default configuration.
run: setup build
	bin/mcptrace agent

# Rebuild the BPF objects and their Go bindings (needs clang-19). clang
# numbers an object's BTF types in an order that depends on the
# checkout's path; when that is all that changed, bpfsame puts the
# committed bytes back (internal/bpfobj).
generate: setup-test
	cd bpf && $(GO) generate ./...
	for o in bpf/mcptrace_bpfel.o bpf/tasks_bpfel.o; do $(GO) run ./internal/bpfobj/cmd/bpfsame -keep $$o || exit 1; done

# CI: the committed bpf2go output must match the sources: the Go bindings
# byte for byte, the object program for program.
check-generate: generate
	git diff --exit-code -- bpf/ || { echo "bpf/: generated files are stale: run 'make generate' and commit" >&2; exit 1; }

# Formatting and vet, on Linux and for Windows, and a build for a system
# neither supports (darwin): what a system does differently is split by
# file name, and elsewhere a stub says it is not supported. (go vet
# compiles every package it checks, tests included, so a separate
# GOOS=windows build would only compile the same packages again.) For
# Windows and darwin, not the packages that check the Kubernetes manifests
# and the end-to-end tests (PORTABLE_SKIP): they have no file of their own
# for a system, Linux vets them, and their 127 k8s.io packages compiled
# twice more cost 80 s of a cold CI run (docs/ci.md).
PORTABLE_SKIP = -e '/deploy$$' -e '/e2e$$' -e '/internal/daemonset$$'
# `make vet` is both halves: vet-linux (formatting, go vet for Linux) and
# vet-ports (Windows and darwin); make check runs vet-ports beside the VM
# matrix (scripts/check.sh).
vet: vet-linux vet-ports
vet-linux:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
vet-ports:
	GOOS=windows $(GO) vet $$(GOOS=windows $(GO) list ./... | grep -v $(PORTABLE_SKIP))
	GOOS=darwin $(GO) build $$(GOOS=darwin $(GO) list ./... | grep -v $(PORTABLE_SKIP))

# Unit and integration tests on this machine's kernel. The longest
# packages are named first: go test starts packages in the order given
# (./... adds the rest, each once), so the longest does not start last
# and leave one core idle at the end (docs/ci.md has their times).
TEST_FIRST = ./e2e/ ./deploy/ ./agent/ ./vmtests/ ./vmtests/systemd/ ./enforcer/ ./sensor/ ./containers/
# Tests that measure the whole machine (root's latency while other users
# attack the agent) run after the others, alone: beside other packages
# they would measure those.
ALONE = ^TestHostileUsersSwitchNothingOff$$
test:
	$(GO) test -count=1 -timeout 20m -skip '$(ALONE)' $(TEST_FIRST) ./...
	$(GO) test -count=1 -timeout 10m -run '$(ALONE)' ./e2e/

# The Windows tests, cross-compiled and run for real under wine: process
# snapshots, command lines read from the PEB, handle-checked ends, the Job
# Object (scripts/wine-test.sh). No Windows machine runs them here.
wine-test: setup-test
	GO=$(GO) scripts/wine-test.sh

# Every Go benchmark once (-benchtime 1x, -short scales the large ones
# down), so none can rot: CI does not measure with them, a quiet machine
# does (docs/benchmarks.md says how).
bench-once:
	$(GO) test -short -count=1 -run '^$$' -bench . -benchtime 1x -timeout 10m ./...

# Every Go fuzz target in the repository (every func FuzzX in a _test.go
# file, found by scripts/fuzz.sh), FUZZTIME each; the total is printed
# before and after. `make fuzz FUZZTIME=5m` for a longer run; FUZZFLAGS
# go to go test (make check: -p=1 -parallel=1, beside the VM matrix).
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) FUZZFLAGS="$(FUZZFLAGS)" scripts/fuzz.sh $(FUZZTIME)

# Everything CI runs: formatting, vet, generated code, host tests, every
# benchmark once, fuzzing, the VM kernel matrix; one stage after another,
# each under a time budget, with a table of the stages' times at the end
# (scripts/check.sh; docs/ci.md says what each stage runs and why).
check:
	MAKE="$(MAKE)" scripts/check.sh

# VM kernel matrix: the packages' tests in QEMU guests booted with real
# Debian kernels (vmtests/README.md), as vmtests/matrix.txt plans them:
# what depends on the kernel on every kernel, everything on 5.10.
# `make vmtest KERNELS=6.1`, `make vmtest PKGS=./sensor/`. e2e needs Node.js and runs on the host only,
# and so do the packages whose tests need a Docker engine (containers/, a
# private dockerd from internal/dockertest): the guests have none; and
# vmtests/systemd, which boots its own QEMU guest (systemd as PID 1).
# The packages whose tests use no kernel feature (no BPF, process, signal,
# socket or /proc: they compute on synthetic input or parse files) run on
# the host only, where `make test` runs them; in a guest they would only
# repeat the same computation ten times slower. `make vmtest VMTEST_EXCLUDE=` runs
# everything.
KERNELS ?= 5.10 6.1 6.12 7
PKGS ?= ./...
# Which tests run on which kernel (vmtests/matrix.txt says why);
# `make vmtest VMTEST_PLAN=` runs every package whole on every kernel.
VMTEST_PLAN ?= vmtests/matrix.txt
# Where each run leaves its raw go test streams, guest consoles and the
# whole output of every failed test (failed-<kernel>/), readable after it.
VMMATRIX_OUT ?= $(CURDIR)/bin/vmtest-runs/$(shell date +%Y%m%d-%H%M%S)
VMTEST_PURE = ./bench/... ./bpf/... ./internal/version/... ./hosts/... ./history/... ./lineage/... ./sessions/... ./redact/... ./treeview/... ./config/... ./internal/ratelog/... ./internal/quota/... ./procmatch/... ./roles/... ./exporter/... ./deploy/... ./internal/debian/... ./internal/daemonset/... ./windows/... ./orphans/... ./wrapconfig/... ./safefile/... ./events/...
VMTEST_HOST_ONLY = ./e2e/... ./containers/... ./internal/dockertest/... ./vmtests/systemd/...
VMTEST_EXCLUDE ?= $(VMTEST_HOST_ONLY) $(VMTEST_PURE)
# The matrix's kernels, resolved and downloaded into the cache without
# running anything (make check does this beside its first stages).
vmtest-kernels:
	CGO_ENABLED=0 $(GO) build -o bin/vmexec ./vmtests/cmd/vmexec
	for k in $(KERNELS); do bin/vmexec -kernel $$k -resolve >/dev/null || exit 1; done
vmtest: setup-test build
	CGO_ENABLED=0 $(GO) build -o bin/vmexec ./vmtests/cmd/vmexec
	CGO_ENABLED=0 $(GO) build -o bin/vmmatrix ./vmtests/cmd/vmmatrix
	MCPTRACE_BIN=$(CURDIR)/bin/mcptrace bin/vmmatrix -vmexec bin/vmexec \
		-kernels "$(KERNELS)" -pkgs "$(PKGS)" -exclude "$(VMTEST_EXCLUDE)" \
		-plan "$(VMTEST_PLAN)" -out "$(VMMATRIX_OUT)" \
		-vmexec-flags "-file $(CURDIR)/bin/mcptrace" $$VMMATRIX_ARGS

# The tests that failed once and passed on a rerun, many times under load
# (two busy loops): -count=20 on the host, -count=5 in the 5.10 and 7
# guests (scripts/stress.sh; docs/ci.md). Not part of check.
stress: build
	GO=$(GO) scripts/stress.sh host 20
	GO=$(GO) scripts/stress.sh vm "5.10 7" 5

# Benchmarks on this machine, written into docs/benchmarks.md (between its
# make bench markers) and docs/bench-ratios.svg: the agent against no
# tracer, bpftrace and forkstat; see bench/doc.go. Not part of CI: it
# needs a quiet machine and takes about 10 minutes.
# `make bench BENCH_FLAGS=-quick` smoke-tests it in a few minutes;
# `make bench BENCH_FLAGS='-sections storms,kill -rounds 3'` runs a part.
BENCH_FLAGS ?=
bench: build
	scripts/setup.sh bench
	MAKE_BENCH_COMMAND="make bench$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(GO) run ./bench $(BENCH_FLAGS)

# The Debian package (dpkg-deb): dist/mcptrace_VERSION_ARCH.deb. DEB_VERSION
# defaults to one from the last commit; see scripts/deb.sh.
deb:
	GO=$(GO) scripts/deb.sh $(DEB_VERSION)

# The agent's container image, from the static binary alone (docker
# import, nothing pulled): mcptrace:VERSION and mcptrace:latest in the
# local engine, and dist/mcptrace-image.tar. See scripts/image.sh.
image:
	GO=$(GO) scripts/image.sh $(IMAGE_VERSION)

clean:
	rm -rf bin dist
