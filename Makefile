# Build, run and test mcptrace. Every target that needs a Debian package
# installs it through scripts/setup.sh first. Run as root: the agent and
# its tests load BPF programs.
SHELL := /bin/bash
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
export GOFLAGS ?= -mod=mod

.PHONY: all build run setup setup-test generate check-generate vet test check clean

all: build

build:
	$(GO) build -o bin/mcptrace ./cmd/mcptrace

setup:
	scripts/setup.sh agent

setup-test:
	scripts/setup.sh test

# Run the agent in the foreground with its default configuration.
run: setup build
	bin/mcptrace agent

# Rebuild the BPF objects and their Go bindings (needs clang-19).
generate: setup-test
	cd bpf && $(GO) generate ./...

# CI: the committed bpf2go output must match the sources.
check-generate: generate
	git diff --exit-code -- bpf/ || { echo "bpf/: generated files are stale: run 'make generate' and commit" >&2; exit 1; }

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...

# Unit and integration tests on this machine's kernel.
test:
	$(GO) test -count=1 -timeout 20m ./...

# Everything CI runs: formatting, vet, generated code, host tests, the VM
# kernel matrix.
check: setup-test vet check-generate test vmtest

clean:
	rm -rf bin
