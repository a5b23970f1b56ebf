// Drive a real MCP server with the official MCP TypeScript SDK client, and print what it saw.
//
//     node drive.mjs SCENARIO -- COMMAND [ARGS...]
//
// COMMAND is the server as a client's config names it: the server itself, or `sandpipe run
// --protocol mcp ... SERVER`. The SDK (`@modelcontextprotocol/sdk`, pinned in package.json)
// starts it with `StdioClientTransport`, connects (`initialize`: this SDK speaks the handshake
// revisions), runs the scenario's calls, and shuts down as the spec says (close stdin, wait 2 s,
// SIGTERM, wait 2 s, SIGKILL). The report is one JSON object on stdout; tests/tests/mcp_ts.rs
// compares the report of the server run directly with the one behind sandpipe. Nothing here
// knows about sandpipe.
//
// Scenarios: everything (npm server-everything), sdk2026 (tests/peers/mcp/server_2026.py: a
// tool, its own error, an unknown tool, an elicitation answered by this client, a tool list
// that changes, a cancelled call, and a call after it).
//
// The module is resolved from the installed peers (SANDPIPE_MCP_NPM, the node_modules that
// .ci/setup fills), so this file runs from the source tree.

import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.SANDPIPE_MCP_NPM;
if (!modules) {
  console.error("SANDPIPE_MCP_NPM must name the installed MCP npm peers (their node_modules' parent)");
  process.exit(2);
}
const require = createRequire(path.join(modules, "package.json"));
const load = (name) => import(require.resolve(name));
const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = await load("@modelcontextprotocol/sdk/client/stdio.js");
const { ElicitRequestSchema } = await load("@modelcontextprotocol/sdk/types.js");

const argv = process.argv.slice(2);
const split = argv.indexOf("--");
const [scenario] = argv.slice(0, split);
const [command, ...args] = argv.slice(split + 1);

// A call's outcome as comparable JSON: the result, or the JSON-RPC error.
async function call(client, name, args, options) {
  try {
    return { result: await client.callTool({ name, arguments: args }, undefined, options) };
  } catch (e) {
    if (typeof e.code === "number") {
      return { error: { code: e.code, message: e.message } };
    }
    return { exception: e?.name ?? String(e) };
  }
}

async function everything(client, report) {
  report.echo = await call(client, "echo", { message: "hello" });
  report.sum = await call(client, "get-sum", { a: 1, b: 2 });
  const steps = [];
  report.long = await call(
    client,
    "trigger-long-running-operation",
    { duration: 0.3, steps: 3 },
    { onprogress: (p) => steps.push([p.progress, p.total]) },
  );
  report.progress = steps;
  const big = "x".repeat(2 << 20);
  const r = await call(client, "echo", { message: big });
  const text = r.result?.content?.[0]?.text ?? "";
  report.big = { sent: big.length, echoed: text.endsWith(big) };
  report.own_error = await call(client, "get-sum", { a: "one", b: 2 });
  report.get_env = await call(client, "get-env", {});
  report.ping = await client.ping();
}

async function sdk2026(client, report) {
  report.add = await call(client, "add", { a: 1, b: 2 });
  report.boom = await call(client, "boom", {});
  report.unknown = await call(client, "nope", {});
  report.greet = await call(client, "greet", {});
  // In the handshake revisions this server says nothing of the change (its capabilities say
  // `listChanged: false`): the client lists again.
  report.grow = await call(client, "grow", {});
  report.tools_after = (await client.listTools()).tools.map((t) => t.name).sort();
  // A call the client gives up on: the SDK sends notifications/cancelled and rejects.
  const abort = new AbortController();
  const slow = call(client, "slow", { seconds: 600 }, { signal: abort.signal });
  abort.abort("caller cancelled");
  report.cancelled = await slow;
  report.after_cancel = await call(client, "add", { a: 2, b: 3 });
}

const client = new Client(
  { name: "sandpipe-ts-driver", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
// The elicitation server_2026.py's greet asks for, answered as a person would.
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: "accept",
  content: { name: "Ada" },
}));
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
// The revision the server answered `initialize` with (the transport is told it).
let revision = null;
transport.setProtocolVersion = (v) => {
  revision = v;
};
const report = {};
await client.connect(transport);
report.protocolVersion = revision;
report.serverInfo = client.getServerVersion();
report.tools = (await client.listTools()).tools;
if (scenario === "everything") {
  await everything(client, report);
} else if (scenario === "sdk2026") {
  await sdk2026(client, report);
} else {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
// Whether the shutdown had to escalate past closing stdin: every signal the transport sends
// goes through the child's kill().
const child = transport._process;
let escalated = false;
if (child) {
  const kill = child.kill.bind(child);
  child.kill = (signal) => {
    escalated = true;
    return kill(signal);
  };
}
await client.close();
report.shutdown_escalated = escalated;
console.log(JSON.stringify(report));
