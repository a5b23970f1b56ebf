"""sandpipe's guest SDK for Python: write a plugin once, run it under ``python3`` or as a
WASI component built with componentize-py (``python3 -m sandpipe_guest.build``).

Pure Python, no dependencies, single-threaded and blocking, so the same source behaves the
same natively and inside sandpipe's sandbox.

    stdin ──► framing (lines | cbor | content-length) ──► protocol loop ──► your handler class
    stdout ◄── framing ◄── protocol loop ◄──────────────────────────────────┘

Modules: :mod:`.framing` (the three framers), :mod:`.cbor`, :mod:`.stdio` (``Framed``),
:mod:`.jsonrpc`, :mod:`.atp` (Arcaflow ATP v1/v3), :mod:`.oracle` (Cairo oracles), :mod:`.mcp` (MCP servers),
:mod:`.build` (the component build), :mod:`.wasi` (arguments and exit codes either way).
"""

from .framing import CBOR, CONTENT_LENGTH, JSON_LINES, FrameError
from .stdio import Framed, stdio
from .wasi import argv, exit

__all__ = ["CBOR", "CONTENT_LENGTH", "JSON_LINES", "FrameError", "Framed", "stdio", "argv", "exit"]
