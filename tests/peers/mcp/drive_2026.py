"""Drive an MCP server with the official Python SDK's `Client` (2.3.0) in one connect mode, run
named cases on it, and print one JSON report.

    python drive_2026.py MODE CASE... -- COMMAND [ARGS...]

MODE is the SDK's own: `auto` (probe `server/discover`, fall back to `initialize`), `legacy`
(`initialize`), or `2026-07-28` (pinned: no probe, every request enveloped). COMMAND is the
server as a client's config names it, directly or as `sandpipe run --protocol mcp ... SERVER`;
the SDK starts it and shuts it down as the spec says. Nothing here knows about sandpipe.
The server is tests/peers/mcp/server_2026.py. Cases:

- basic: the tool list, `add`, `boom` (the tool's own error), `greet` (an elicitation the
  client answers: a multi round-trip call in 2026-07-28), `grow` (then the list has `extra`);
- deny: `boom` called and listed (run with `--deny-tool boom`);
- unknown: a tool the server does not have;
- timeout: `slow` for 30 s (run with a short `--request-timeout`), then `add`;
- deaf: `hog` for 30 s, holding the server's event loop, then `add`;
- listen: a `subscriptions/listen` held for 1.5 s (past a 1 s request timeout), then `grow`
  and its event (2026-07-28 only; `legacy` reports it unsupported);
- cancel: `slow` for 30 s given up by the client after 0.3 s, then `add`;
- bench:N: timings only: `start_s` (from starting the server to the end of the connect: the
  handshake, or nothing when pinned) and `round_trip_s`, the mean of N `add` calls after 10
  warm-up calls.
"""

import json
import sys
import time

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult


def outcome(r):
    """A call's result as comparable JSON: its text, whether it is an error, and its type."""
    d = r.model_dump(mode="json", by_alias=True, exclude_none=True)
    texts = [c.get("text") for c in d.get("content", [])]
    return {"text": texts, "isError": d.get("isError", False), "resultType": d.get("resultType")}


async def call(c, name, args):
    try:
        return {"result": outcome(await c.call_tool(name, args))}
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}


async def names(c):
    return sorted(t.name for t in (await c.list_tools()).tools)


async def basic(c, report):
    report["tools"] = await names(c)
    report["add"] = await call(c, "add", {"a": 1, "b": 2})
    report["boom"] = await call(c, "boom", {})
    report["greet"] = await call(c, "greet", {})
    report["grow"] = await call(c, "grow", {})
    report["tools_after"] = await names(c)


async def deny(c, report):
    report["tools"] = await names(c)
    report["boom"] = await call(c, "boom", {})


async def unknown(c, report):
    report["nope"] = await call(c, "nope", {})


async def timeout(c, report):
    report["slow"] = await call(c, "slow", {"seconds": 30})
    report["add"] = await call(c, "add", {"a": 2, "b": 2})


async def deaf(c, report):
    report["hog"] = await call(c, "hog", {"seconds": 30})
    report["add"] = await call(c, "add", {"a": 3, "b": 3})


async def listen(c, report):
    try:
        async with c.listen(tools_list_changed=True) as sub:
            # Longer than the request timeout the tests run this with: a subscription is not a
            # request that can run over.
            await anyio.sleep(1.5)
            report["grow"] = await call(c, "grow", {})
            with anyio.fail_after(30):
                async for event in sub:
                    report["event"] = type(event).__name__
                    break
    except ListenNotSupportedError:
        report["event"] = "unsupported"
    report["add"] = await call(c, "add", {"a": 4, "b": 4})


async def cancel(c, report):
    with anyio.move_on_after(0.3) as scope:
        await c.call_tool("slow", {"seconds": 30})
    report["cancelled"] = scope.cancelled_caught
    report["add"] = await call(c, "add", {"a": 5, "b": 5})


async def bench(c, report, n):
    for i in range(10):
        await c.call_tool("add", {"a": i, "b": 1})
    t0 = time.perf_counter()
    for i in range(n):
        await c.call_tool("add", {"a": i, "b": 1})
    report["round_trip_s"] = (time.perf_counter() - t0) / n


CASES = {f.__name__: f for f in (basic, deny, unknown, timeout, deaf, listen, cancel)}


async def elicit(context, params):
    return ElicitResult(action="accept", content={"name": "Ada"})


async def main(mode, cases, command):
    server = StdioServerParameters(command=command[0], args=command[1:])
    report = {"mode": mode}
    t0 = time.perf_counter()
    async with Client(server, mode=mode, elicitation_callback=elicit) as c:
        report["version"] = c.session.protocol_version
        if mode != "legacy" and mode != "auto":
            # Pinned: the connect sends nothing, so the first request is what waits for the
            # server to start.
            await c.call_tool("add", {"a": 0, "b": 0})
        start = time.perf_counter() - t0
        for name in cases:
            if name.startswith("bench:"):
                report["start_s"] = start
                await bench(c, report, int(name.split(":", 1)[1]))
                continue
            report[name] = {}
            await CASES[name](c, report[name])
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    mode, cases, command = args[0], args[1:split], args[split + 1 :]
    anyio.run(main, mode, cases, command)
