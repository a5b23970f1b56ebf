"""Drive a real MCP server with the official MCP Python SDK client, and print what it saw.

    python drive.py SCENARIO [--timings] [NAME=VALUE...] -- COMMAND [ARGS...]

COMMAND is the server as a client's config names it: the server itself, or `sandpipe run
--protocol mcp ... SERVER`. The SDK starts it (`mcp.client.stdio.stdio_client`), runs the
handshake, the scenario's calls, and the spec's shutdown (close stdin, wait 2 s, SIGTERM,
SIGKILL). The report is one JSON object on stdout; tests/tests/peer_mcp.rs compares the report
of the server run directly with the one behind sandpipe. Nothing here knows about sandpipe.

NAME=VALUE pairs go to the server's environment (on top of the SDK's default one).
Scenarios: everything, time, filesystem DIR, memory, hang (one call that never ends, then
another), exports and exports-poisoned (examples/mcp-tools, a component's exported functions
served as tools), fetch URL... (mcp-server-fetch's `fetch` tool), guest (examples/python/example_mcp.py), bench N (timings only: start to initialize answer, and N tools/call round trips).
"""

import json
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client import stdio
from mcp.shared.exceptions import MCPError

# Whether the SDK's shutdown had to escalate past closing stdin (SIGTERM to the group).
ESCALATED = {"terminated": False}
_terminate = stdio._terminate_process_tree


async def _recording_terminate(process):
    ESCALATED["terminated"] = True
    await _terminate(process)


stdio._terminate_process_tree = _recording_terminate


def tool_result(r):
    """A call's result as comparable JSON."""
    return r.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call(session, name, args, **kw):
    try:
        return {"result": tool_result(await session.call_tool(name, args, **kw))}
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}
    except Exception as e:  # the connection ended
        return {"exception": type(e).__name__}


async def everything(s, report):
    report["echo"] = await call(s, "echo", {"message": "hello"})
    report["sum"] = await call(s, "get-sum", {"a": 1, "b": 2})
    steps = []

    async def on_progress(progress, total, message):
        steps.append([progress, total])

    report["long"] = await call(
        s, "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
    )
    report["progress"] = steps
    big = "x" * (2 << 20)
    r = await call(s, "echo", {"message": big})
    text = r.get("result", {}).get("content", [{}])[0].get("text", "")
    report["big"] = {"sent": len(big), "echoed": text.endswith(big) and len(text) >= len(big)}
    # The tool's own error: arguments its schema refuses.
    report["own_error"] = await call(s, "get-sum", {"a": "one", "b": 2})
    report["get_env"] = await call(s, "get-env", {})
    report["ping"] = (await s.send_ping()).model_dump(mode="json", exclude_none=True)


async def time_server(s, report):
    args = {"source_timezone": "America/New_York", "time": "16:30", "target_timezone": "Asia/Tokyo"}
    report["convert"] = await call(s, "convert_time", args)
    report["bad_zone"] = await call(s, "get_current_time", {"timezone": "Not/AZone"})


async def filesystem(s, report, root):
    report["write"] = await call(s, "write_file", {"path": f"{root}/a.txt", "content": "hi"})
    report["read"] = await call(s, "read_text_file", {"path": f"{root}/a.txt"})
    report["outside"] = await call(s, "read_text_file", {"path": "/etc/hostname"})


async def memory(s, report):
    entity = {"name": "sandpipe", "entityType": "tool", "observations": ["runs plugins"]}
    report["create"] = await call(s, "create_entities", {"entities": [entity]})
    report["read"] = await call(s, "read_graph", {})


async def hang(s, report):
    # The client waits longer than the server's request timeout: sandpipe's answer ends it.
    report["hang"] = await call(
        s, "trigger-long-running-operation", {"duration": 600, "steps": 1}, read_timeout_seconds=60
    )
    report["after"] = await call(s, "echo", {"message": "still here"})


async def exports(s, report):
    # A component's exported functions as tools (examples/mcp-tools behind sandpipe).
    report["add"] = await call(s, "add", {"a": 40, "b": 2})
    report["greet"] = await call(s, "greet", {"name": "Ada", "title": "Countess"})
    report["distance"] = await call(s, "distance", {"a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}})
    report["convert"] = await call(s, "convert", {"degrees": 100, "from": "celsius", "to": "fahrenheit"})
    report["divide_by_zero"] = await call(s, "divide", {"a": 1, "b": 0})
    report["bad_arguments"] = await call(s, "add", {"a": "one", "b": 2})
    report["count"] = [await call(s, "count", {}), await call(s, "count", {})]
    report["crash"] = await call(s, "crash", {"msg": "boom"})
    report["after_crash"] = await call(s, "count", {})
    report["spin"] = await call(s, "spin", {})
    report["sleep"] = await call(s, "sleep", {"ms": 600000}, read_timeout_seconds=60)
    report["after_limits"] = await call(s, "add", {"a": 1, "b": 1})
    report["unknown"] = await call(s, "nope", {})
    report["ping"] = (await s.send_ping()).model_dump(mode="json", exclude_none=True)


async def guest(s, report):
    # examples/python/example_mcp.py, a server on sandpipe's Python guest SDK.
    report["add"] = await call(s, "add", {"a": 2, "b": 40})
    report["reverse"] = await call(s, "reverse", {"text": "sandpipe"})
    report["words"] = await call(s, "words", {"text": "one two three", "limit": 2})
    report["fail"] = await call(s, "fail", {"reason": "asked to"})
    report["unknown"] = await call(s, "nope", {})
    report["ping"] = (await s.send_ping()).model_dump(mode="json", exclude_none=True)


async def fetch(s, report, urls):
    # mcp-server-fetch: each URL through the server's `fetch` tool (robots.txt first, then the
    # page, redirects followed).
    report["fetch"] = [await call(s, "fetch", {"url": u}) for u in urls]


async def exports_poisoned(s, report):
    report["crash"] = await call(s, "crash", {"msg": "boom"})
    report["after_crash"] = await call(s, "add", {"a": 1, "b": 1})


async def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    scenario, extra, command = argv[0], argv[1:split], argv[split + 1 :]
    timings = "--timings" in extra
    extra = [a for a in extra if a != "--timings"]
    env = dict(a.split("=", 1) for a in extra if "=" in a)
    extra = [a for a in extra if "=" not in a]
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    report = {}
    started = time.perf_counter()
    async with stdio.stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            try:
                init = await s.initialize()
            except MCPError as e:
                report["initialize_error"] = {"code": e.error.code, "message": e.error.message}
                print(json.dumps(report, sort_keys=True))
                return
            if timings:
                report["initialize_s"] = time.perf_counter() - started
            report["protocolVersion"] = init.protocol_version
            report["serverInfo"] = init.server_info.model_dump(mode="json", exclude_none=True)
            tools = await s.list_tools()
            report["tools"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools]
            if scenario == "everything":
                await everything(s, report)
            elif scenario == "time":
                await time_server(s, report)
            elif scenario == "filesystem":
                await filesystem(s, report, extra[0])
            elif scenario == "memory":
                await memory(s, report)
            elif scenario == "hang":
                await hang(s, report)
            elif scenario == "exports":
                await exports(s, report)
            elif scenario == "guest":
                await guest(s, report)
            elif scenario == "fetch":
                await fetch(s, report, extra)
            elif scenario == "exports-poisoned":
                await exports_poisoned(s, report)
            elif scenario == "bench":
                n = int(extra[0])
                name, args = ("echo", {"message": "x" * 64}) if any(
                    t.name == "echo" for t in tools.tools
                ) else ("convert_time", {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Etc/UTC"})
                for _ in range(10):
                    await s.call_tool(name, args)
                t0 = time.perf_counter()
                for _ in range(n):
                    await s.call_tool(name, args)
                report["round_trip_s"] = (time.perf_counter() - t0) / n
            else:
                raise SystemExit(f"unknown scenario {scenario}")
    report["shutdown_escalated"] = ESCALATED["terminated"]
    print(json.dumps(report, sort_keys=True))


anyio.run(main)
