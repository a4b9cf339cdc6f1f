// A minimal MCP host, as Codex or an SDK-based agent is one: the official
// client (StdioClientTransport) starts real MCP servers through npx, the
// same wrapper chain users see (npx → npm exec → sh -c → node).
//
// It starts one server set, then "refreshes" by starting a second set
// without closing the first (the Codex manager-replacement leak), prints
// "server <set> <pid> <tools>" lines and "ready", then obeys stdin:
//   start  start one more server set, then print its line and "ready"
//   start-stubborn ARGS…
//          start one set of the local stubborn-server package (it outlives
//          its stdin) with ARGS, then print its line and "ready"
//   mark   run `mcptrace mark destroy` as a child and wait for it; print
//          "marked <exit code>" (the host's cleanup on a refresh)
//   exit   leave without closing anything
// Every process of set N has MCPTRACE_E2E_SET=N in its environment.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawn } from "node:child_process";
import readline from "node:readline";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node host.mjs DIR");
  process.exit(2);
}

let sets = 0;
const kept = [];

async function startServer(args = ["@modelcontextprotocol/server-filesystem", dir]) {
  const set = ++sets;
  const transport = new StdioClientTransport({
    command: "npx",
    args: ["--no-install", ...args],
    env: { ...process.env, MCPTRACE_E2E_SET: String(set) },
    stderr: "ignore",
  });
  const client = new Client({ name: "mcptrace-e2e-host", version: "1.0.0" });
  // A server set ended by a marker closes its transport: the host carries on.
  client.onerror = () => {};
  await client.connect(transport);
  const { tools } = await client.listTools();
  console.log(`server ${set} ${transport.pid} ${tools.length}`);
  kept.push(client);
}

await startServer();
// The refresh: a new set replaces the old one, which is never closed.
await startServer();
console.log("ready");

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [word, ...args] = line.split(" ").filter(Boolean);
  if (line === "exit") process.exit(0);
  if (line === "start") {
    await startServer();
    console.log("ready");
  }
  if (word === "start-stubborn") {
    await startServer(["mcptrace-e2e-stubborn-server", ...args]);
    console.log("ready");
  }
  if (line === "mark") {
    const code = await new Promise((resolve) => {
      const m = spawn("mcptrace", ["mark", "destroy"], { stdio: ["ignore", "ignore", "inherit"] });
      m.on("exit", (code, signal) => resolve(signal ?? code));
    });
    console.log(`marked ${code}`);
  }
}
