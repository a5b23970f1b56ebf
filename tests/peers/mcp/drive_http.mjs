// Drive an MCP server with the official MCP TypeScript SDK client over Streamable HTTP or
// stdio, run one scenario, and print what it saw.
//
//     node drive_http.mjs SCENARIO -- URL
//     node drive_http.mjs SCENARIO -- stdio COMMAND [ARGS...]
//
// With a URL the SDK's `StreamableHTTPClientTransport` connects to it (`initialize`: this SDK
// speaks the handshake revisions, so the server gives it a session, `Mcp-Session-Id`); with
// `stdio` its `StdioClientTransport` starts COMMAND. Then the scenario's calls, and a close
// (over HTTP the SDK ends its session with DELETE first). The report is one JSON object on
// stdout; tests/tests/serve.rs compares the report over HTTP with the report over stdio.
// Nothing here knows about sandpipe.
//
// Scenarios: everything (npm server-everything: its tools, `echo`, `get-sum`, a tool's own
// error, progress of `trigger-long-running-operation`, ping), time (PyPI mcp-server-time: its
// tools, `convert_time` between two zones without daylight saving, `get_current_time` (its
// time left out: it is the clock's), an unknown zone).
//
// Fields that differ by transport are reported apart, under `transport`: the session id (HTTP
// only) and whether the session was ended with DELETE; and what the clock decides, under
// `clock` (time scenario: today's date and weekday).
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
const { StreamableHTTPClientTransport } = await load(
  "@modelcontextprotocol/sdk/client/streamableHttp.js",
);

const argv = process.argv.slice(2);
const split = argv.indexOf("--");
const [scenario] = argv.slice(0, split);
const target = argv.slice(split + 1);

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
  report.own_error = await call(client, "get-sum", { a: "one", b: 2 });
  const steps = [];
  report.long = await call(
    client,
    "trigger-long-running-operation",
    { duration: 0.3, steps: 3 },
    { onprogress: (p) => steps.push([p.progress, p.total]) },
  );
  // The SDK drops a progress notification that comes after its call's answer, and the
  // server sends its last one right before it: only those before it are certain.
  report.progress_before_the_answer = steps.slice(0, 2);
  report.ping = await client.ping();
}

async function time(client, report) {
  // 12:00 today: the date is the clock's, so it is reported apart (under `clock`) and stands
  // as DATE and DAY in the answer, which two runs either side of midnight would not share.
  const convert = await call(client, "convert_time", {
    source_timezone: "UTC",
    time: "12:00",
    target_timezone: "Asia/Tokyo",
  });
  const source = convert.result?.structuredContent?.source ?? {};
  const date = (source.datetime ?? "").slice(0, 10);
  const day = source.day_of_week ?? "";
  report.clock = { date, day };
  let text = JSON.stringify(convert);
  if (date) text = text.split(date).join("DATE");
  if (day) text = text.split(day).join("DAY");
  report.convert = JSON.parse(text);
  const now = await call(client, "get_current_time", { timezone: "UTC" });
  const current = now.result?.structuredContent ?? {};
  report.current = {
    isError: now.result?.isError ?? false,
    timezone: current.timezone,
    has_datetime: typeof current.datetime === "string",
  };
  report.bad_zone = await call(client, "get_current_time", { timezone: "Nowhere/Atlantis" });
}

const client = new Client({ name: "sandpipe-ts-http-driver", version: "1.0.0" });
const http = target[0] !== "stdio";
const transport = http
  ? new StreamableHTTPClientTransport(new URL(target[0]))
  : new StdioClientTransport({ command: target[1], args: target.slice(2), stderr: "inherit" });
// The revision the server answered `initialize` with (the transport is told it).
let revision = null;
const setVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (v) => {
  revision = v;
  setVersion?.(v);
};
const report = {};
await client.connect(transport);
report.protocolVersion = revision;
report.serverInfo = client.getServerVersion();
report.capabilities = client.getServerCapabilities();
report.tools = (await client.listTools()).tools;
if (scenario === "everything") {
  await everything(client, report);
} else if (scenario === "time") {
  await time(client, report);
} else {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
const transportReport = {};
if (http) {
  transportReport.sessionId = transport.sessionId ?? null;
  // The spec's end of a session: DELETE, answered once the server's instance is gone.
  await transport.terminateSession();
  transportReport.terminated = transport.sessionId === undefined;
}
await client.close();
report.transport = transportReport;
console.log(JSON.stringify(report));
