"""An example MCP server in Python on sandpipe's guest SDK (:mod:`sandpipe_guest.mcp`), the
same source as a componentize-py component and under ``python3``.

- ``add a b``: the sum of two integers;
- ``reverse text``: the text backwards;
- ``words text [limit]``: the first ``limit`` words (all by default), as a JSON list;
- ``fail reason``: the tool's own error.

Build:  python3 -m sandpipe_guest.build examples/python/example_mcp.py -o example-mcp.wasm
Run:    sandpipe run --protocol mcp example-mcp.wasm        (as an MCP client's server command)
"""

from sandpipe_guest import mcp, wasi

server = mcp.Server("example-mcp")


@server.tool()
def add(a: int, b: int) -> int:
    """The sum of two integers."""
    return a + b


@server.tool()
def reverse(text: str) -> str:
    """The text backwards."""
    return text[::-1]


@server.tool()
def words(text: str, limit: int = 0) -> list:
    """The first `limit` words of the text (all of them by default)."""
    split = text.split()
    return split[:limit] if limit else split


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(f"failed on purpose: {reason}")


def main():
    server.serve()


if __name__ == "__main__":
    wasi.main(main)
