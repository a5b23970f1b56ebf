"""Connect the official MCP Python SDK 2.3.0 `Client` (auto mode: `server/discover` first, then
`initialize` if the server does not speak 2026-07-28) to a server, call one tool, and print what
it saw as one JSON object: the revision it settled on, the tool names, and the call's result.

    python drive_auto.py TOOL ARGS_JSON -- COMMAND [ARGS...]

tests/tests/mcp_cli.rs runs it against sandpipe's own MCP servers (a component's exports, the
Python guest SDK's server), directly and behind `sandpipe run --protocol mcp`.
"""

import json
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    tool, args = argv[0], json.loads(argv[1])
    command = argv[split + 1 :]
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params) as client:
        tools = await client.list_tools()
        result = await client.call_tool(tool, args)
        report = {
            "protocolVersion": client.protocol_version,
            "tools": sorted(t.name for t in tools.tools),
            "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
    print(json.dumps(report, sort_keys=True))


anyio.run(main)
