#!/usr/bin/env node
// A real MCP server (the SDK's Server over StdioServerTransport, one tool,
// "echo") that does not exit when its client goes away. Well-behaved
// servers, like @modelcontextprotocol/server-filesystem, end when their
// stdin ends; many real ones keep running (a timer, a watcher, an open
// socket) and leak when their host dies without killing them. This one
// starts a timer when its stdin ends and lives until it is signalled.
//
// Its arguments are ignored but three: --ignore-sigterm makes it ignore
// SIGTERM too, as servers busy in a handler do; --delay-ready=SECONDS
// makes it wait that long before it answers, as slow servers starting
// up do (a host's health check then waits for it); --children starts two
// sleeps, one a worker of its own and one detached into its own session
// as a daemon a user asked for would be (argv "sleep 3601" and "sleep
// 3602"). The end-to-end tests
// pass a secret-looking --api-key=... to check that no argv reaches the
// metrics.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

if (process.argv.includes("--ignore-sigterm")) process.on("SIGTERM", () => {});
if (process.argv.includes("--children")) {
  const { spawn } = await import("node:child_process");
  spawn("sleep", ["3601"], { stdio: "ignore" });
  spawn("sleep", ["3602"], { stdio: "ignore", detached: true }).unref();
}

// Writes to a client that is gone fail with EPIPE: not a reason to exit.
process.stdout.on("error", () => {});

const server = new Server(
  { name: "mcptrace-e2e-stubborn-server", version: "1.0.0" },
  { capabilities: { tools: {} } },
);
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "echo",
      description: "Returns its text.",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    },
  ],
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => ({
  content: [{ type: "text", text: String(req.params.arguments?.text ?? "") }],
}));

// The SDK's transport never exits the process, and closes only when asked;
// node itself would exit once nothing is left to wait for (stdin ended).
// The timer keeps it alive, as a real server's pending work would.
process.stdin.on("end", () => setInterval(() => {}, 1 << 30));
const delay = process.argv.find((a) => a.startsWith("--delay-ready="));
if (delay) await new Promise((r) => setTimeout(r, 1000 * Number(delay.split("=")[1])));
await server.connect(new StdioServerTransport());
