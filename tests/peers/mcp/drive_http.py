"""Drive an MCP server with the official Python SDK's `Client` (2.3.0) over Streamable HTTP or
stdio, in one connect mode, run named cases on it, and print one JSON report.

    python drive_http.py MODE CASE... -- URL [TOKEN]
    python drive_http.py MODE CASE... -- stdio COMMAND [ARGS...]

MODE is the SDK's own: `auto` (probe `server/discover`, fall back to `initialize`), `legacy`
(`initialize`, a session), or `2026-07-28` (pinned: every request enveloped). With a URL the
client is `streamable_http_client`, with `Authorization: Bearer TOKEN` when a token is given;
with `stdio` the SDK starts COMMAND itself. Nothing here knows about sandpipe. The server is
examples/mcp-tools (a component's exports as tools), or for `time` PyPI mcp-server-time. Cases:

- tools: the sorted tool names;
- time: mcp-server-time's `convert_time` of 12:00 UTC to Asia/Tokyo (today's date and weekday,
  the clock's, stand as DATE and DAY), and `get_current_time` in a zone that does not exist;
- basic: `add`, `greet` with and without its option, `divide` by zero (the tool's own error),
  `convert`, and a tool the server does not have;
- count: `count` three times (the component's counter: state kept by its instance);
- hold:MS: `sleep` for MS milliseconds (for a client killed mid-call);
- fetch:URL: PyPI mcp-server-fetch's `fetch` of URL (its result, or the tool's own error).
"""

import json
import sys

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def outcome(r):
    """A call's result as comparable JSON: its texts and whether it is an error."""
    d = r.model_dump(mode="json", by_alias=True, exclude_none=True)
    texts = [c.get("text") for c in d.get("content", [])]
    return {"text": texts, "isError": d.get("isError", False)}


async def call(c, name, args):
    try:
        return {"result": outcome(await c.call_tool(name, args))}
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}


async def tools(c, report):
    report["names"] = sorted(t.name for t in (await c.list_tools()).tools)


async def basic(c, report):
    report["add"] = await call(c, "add", {"a": 2, "b": 3})
    report["greet"] = await call(c, "greet", {"name": "Ada"})
    report["greet_title"] = await call(c, "greet", {"name": "Ada", "title": "Dr"})
    report["divide"] = await call(c, "divide", {"a": 1.0, "b": 0.0})
    report["convert"] = await call(c, "convert", {"degrees": 100.0, "from": "celsius", "to": "fahrenheit"})
    report["nope"] = await call(c, "nope", {})


async def count(c, report):
    report["counts"] = [(await call(c, "count", {}))["result"]["text"] for _ in range(3)]


def dateless(outcome):
    """A `convert_time` outcome with its date as DATE and its weekday as DAY."""
    try:
        source = json.loads(outcome["result"]["text"][0])["source"]
        date, day = source["datetime"][:10], source["day_of_week"]
    except (KeyError, IndexError, TypeError, ValueError):
        return outcome
    return json.loads(json.dumps(outcome).replace(date, "DATE").replace(day, "DAY"))


async def time(c, report):
    convert = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    report["convert"] = dateless(await call(c, "convert_time", convert))
    report["bad_zone"] = await call(c, "get_current_time", {"timezone": "Nowhere/Atlantis"})


CASES = {f.__name__: f for f in (tools, basic, count, time)}


async def main(mode, cases, target):
    if target[0] == "stdio":
        server = StdioServerParameters(command=target[1], args=target[2:])
    else:
        headers = {"Authorization": f"Bearer {target[1]}"} if len(target) > 1 else None
        server = streamable_http_client(target[0], http_client=create_mcp_http_client(headers=headers))
    report = {"mode": mode}
    async with Client(server, mode=mode) as c:
        report["version"] = c.session.protocol_version
        for name in cases:
            if name.startswith("hold:"):
                # Say so on stdout first: the test kills this client once it reads the line.
                print("holding", flush=True)
                await c.call_tool("sleep", {"ms": int(name.split(":", 1)[1])})
                continue
            if name.startswith("fetch:"):
                report.setdefault("fetch", []).append(await call(c, "fetch", {"url": name.split(":", 1)[1]}))
                continue
            report[name] = {}
            await CASES[name](c, report[name])
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    mode, cases, target = args[0], args[1:split], args[split + 1 :]
    anyio.run(main, mode, cases, target)
