package main

import "github.com/spf13/cobra"

// examples are each command's examples, shown by --help and in the man
// pages' EXAMPLES: what to type for the everyday questions. A command
// that sets its own Example keeps it.
var examples = map[string]string{
	"mcptrace": `  sudo mcptrace agent                   # run the agent (or: sudo systemctl start mcptrace)
  mcptrace status                       # is it running, and how is it doing?
  mcptrace sessions                     # the sessions, what they started and what was killed
  mcptrace tree --session ID            # one session's lineage
  mcptrace orphans                      # MCP servers leaked outside every session`,
	"mcptrace agent": `  sudo mcptrace agent
  sudo mcptrace agent --enforcer.mode=audit --log.level=debug
  sudo MCPTRACE_METRICS_LISTEN_ADDRESS=:9467 mcptrace agent --config /etc/mcptrace/config.yaml`,
	"mcptrace tree": `  mcptrace tree
  mcptrace tree 4242
  mcptrace tree --ancestors 4311
  mcptrace tree --session claude-1234 -v
  mcptrace tree --session claude-1234 --at 09:30
  mcptrace tree --session claude-1234 --format svg > session.svg
  mcptrace tree 4242 --format dot | dot -Tsvg > tree.svg`,
	"mcptrace history": `  mcptrace history
  mcptrace history --since 7d --id claude-1234
  mcptrace history --since "2026-11-26 09:00" --until "2026-11-26 12:00" --json`,
	"mcptrace sessions": `  mcptrace sessions
  mcptrace sessions --json | jq '.[] | select(.state == "active")'`,
	"mcptrace orphans": `  mcptrace orphans
  mcptrace orphans --end --dry-run
  mcptrace orphans --end --certain-only`,
	"mcptrace run": `  mcptrace run -- claude
  mcptrace run --session review-42 -- codex exec "review this diff"`,
	"mcptrace exec": `  mcptrace exec --session review-42 -- npx -y @modelcontextprotocol/server-filesystem /srv/repo`,
	"mcptrace mark destroy": `  mcptrace mark destroy
  mcptrace mark destroy --session review-42`,
	"mcptrace session begin": `  mcptrace session begin --pid 4242 --id review-42`,
	"mcptrace session end": `  mcptrace session end review-42
  sudo mcptrace session end review-42 --owner 1000`,
	"mcptrace wrap-config": `  mcptrace wrap-config ~/.claude.json
  mcptrace wrap-config --unwrap ~/.claude.json`,
	"mcptrace uninstall": `  sudo systemctl stop mcptrace && sudo mcptrace uninstall
  sudo mcptrace uninstall --bpf.pin-dir=/sys/fs/bpf/mcptrace --state.dir=/run/mcptrace/state`,
	"mcptrace version": `  mcptrace version
  mcptrace --version
  mcptrace version --json`,
	"mcptrace config example": `  mcptrace config example > /etc/mcptrace/config.yaml`,
}

// addExamples sets the examples of cmd and the commands below it.
func addExamples(cmd *cobra.Command) {
	if cmd.Example == "" {
		cmd.Example = examples[cmd.CommandPath()]
	}
	for _, c := range cmd.Commands() {
		addExamples(c)
	}
}
