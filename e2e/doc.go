// Package e2e holds end-to-end tests with real MCP hosts: a Node host using
// the official @modelcontextprotocol/sdk client starts real servers from
// npm through npx, under an mcptrace agent with its real BPF programs.
//
// The node packages live in testdata/mcphost (package-lock.json pins them);
// `make setup-test` installs them with npm ci. testdata/mcphost/stubborn-server
// is a local one: a real MCP server that outlives its stdin, as leaked
// servers do.
//
// The Prometheus tests run a real Prometheus server (Debian's package,
// which `make setup-test` installs) scraping the agent's /metrics and
// evaluating deploy/prometheus/mcptrace.rules.yml, with every `for:` cut to
// seconds, and wait for the alerts to fire and resolve.
//
// The real agent hosts live in testdata/<host> (claude, codex, copilot,
// gemini, inspector), each pinned by its package-lock.json and installed
// by `make setup-test`: hosts_linux_test.go runs each offline, in a
// throwaway HOME, first with no agent (the control) and then under one
// agent with the default host rules, narrowed to the test's own subtree.
//
// These tests run on the host machine only: the VM kernel matrix has no
// Node.js in its guests.
package e2e
