// A minimal MCP host, as Codex or an SDK-based agent is one: the official
// client (StdioClientTransport) starts real MCP servers through npx, the
// same wrapper chain users see (npx → npm exec → sh -c → node).
//
// It starts one server set, then "refreshes" by starting a second set
// without closing the first (the Codex manager-replacement leak), prints
// "server <set> <pid> <tools>" lines and "ready", then obeys stdin:
//   exit   leave without closing anything
//   mark   run `mcptrace mark destroy` as a child (the session's end marker)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawn } from "node:child_process";
import readline from "node:readline";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node host.mjs DIR");
  process.exit(2);
}

async function startServer(set) {
  const transport = new StdioClientTransport({
    command: "npx",
    args: ["--no-install", "@modelcontextprotocol/server-filesystem", dir],
    env: { ...process.env },
    stderr: "ignore",
  });
  const client = new Client({ name: "mcptrace-e2e-host", version: "1.0.0" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  console.log(`server ${set} ${transport.pid} ${tools.length}`);
  return client;
}

const kept = [];
kept.push(await startServer(1));
// The refresh: a new set replaces the old one, which is never closed.
kept.push(await startServer(2));
console.log("ready");

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (line === "exit") process.exit(0);
  if (line === "mark") spawn("mcptrace", ["mark", "destroy"], { stdio: "ignore" });
}
