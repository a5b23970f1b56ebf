"""An MCP server on the official Python SDK (2.3.0), written for sandpipe's tests.

    python server_2026.py

It speaks whatever revision its client asks for (the SDK's stdio server answers both
`server/discover` and `initialize`). Tools:
- `add(a, b)`: a + b;
- `slow(seconds)`: sleeps without blocking, so a `notifications/cancelled` stops it;
- `hog(seconds)`: sleeps holding the event loop, so the server answers nothing meanwhile;
- `hold(started, release)`: creates the file `started`, then waits without blocking until the
  file `release` exists (a call the test provably has in flight, for as long as it likes);
- `boom()`: raises, which the SDK turns into an `isError` result;
- `crash()`: kills the server mid-call, as a crash does;
- `greet()`: asks the client for a name through `Resolve` (an elicitation: a multi round-trip
  call in 2026-07-28, a server request before it), then greets;
- `grow()`: adds a tool named `extra` and says the tool list changed.

START_DELAY=SECONDS in the environment makes it take that long to start, as a heavy server does.
"""

import os
import signal
import time
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

if os.environ.get("START_DELAY"):
    time.sleep(float(os.environ["START_DELAY"]))

mcp = MCPServer("sandpipe-tests")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@mcp.tool()
async def slow(seconds: float) -> str:
    """Sleep for a while; a cancellation stops it."""
    await anyio.sleep(seconds)
    return "done"


@mcp.tool()
async def hog(seconds: float) -> str:
    """Sleep for a while holding the event loop, deaf to everything."""
    time.sleep(seconds)
    return "done"


@mcp.tool()
async def hold(started: str, release: str) -> str:
    """Say so in the file `started`, then wait until the file `release` exists."""
    with open(started, "w"):
        pass
    while not os.path.exists(release):
        await anyio.sleep(0.01)
    return "released"


@mcp.tool()
def crash() -> str:
    """Die by SIGKILL in the middle of the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@mcp.tool()
def boom() -> str:
    """Fail."""
    raise ValueError("boom went the tool")


class Name(BaseModel):
    name: str


def ask_name():
    return Elicit("What is your name?", Name)


@mcp.tool()
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Ask for a name, then greet."""
    return f"hello, {who.name}"


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named extra."""
    mcp.add_tool(lambda: "extra!", name="extra", description="added by grow")
    await ctx.notify_tools_changed()
    return "grown"


mcp.run()
