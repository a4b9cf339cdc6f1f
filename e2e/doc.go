// Package e2e holds end-to-end tests with real MCP hosts: a Node host using
// the official @modelcontextprotocol/sdk client starts real servers from
// npm through npx, under an mcptrace agent with its real BPF programs.
//
// The node packages live in testdata/mcphost (package-lock.json pins them);
// `make setup-test` installs them with npm ci. These tests run on the host
// machine only: the VM kernel matrix has no Node.js in its guests.
package e2e
