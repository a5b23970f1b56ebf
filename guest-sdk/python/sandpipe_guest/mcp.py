"""MCP (Model Context Protocol) servers over stdio (JSON Lines): make a :class:`Server`,
register tools with :meth:`Server.tool`, call :meth:`Server.serve`.

    initialize ──► the revision asked for if spoken (2025-11-25, 2025-06-18), else the latest;
    capabilities {"tools": {}} ──► notifications/initialized ──► tools/list, tools/call, ping
    ──► end of input (the client closed stdin: MCP's shutdown): return

The stateless revision 2026-07-28 is spoken too, as the official SDK's servers speak it: a
request whose ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion`` (the
envelope) opens it, with no ``initialize``; ``server/discover`` answers the revisions spoken
and the capabilities; every result carries ``resultType: "complete"`` (and ``ttlMs``,
``cacheScope`` on ``tools/list`` and ``server/discover``). The client's first request settles
the revision: later, ``initialize`` on a 2026-07-28 connection gets ``-32022`` (as does an
envelope naming another revision), a request without the envelope ``-32602``, and an
enveloped request after ``initialize`` ``-32600``.

A tool's input schema comes from its parameters' annotations (``int`` integer, ``float``
number, ``str`` string, ``bool`` boolean, ``list`` array, ``dict`` object; a parameter with a
default is optional) unless one is given. What a tool returns is its one text content item
(a string as it is, anything else as JSON); an exception it raises is the tool's own error
(``isError: true`` with the message), so the model sees it. An unknown tool is ``-32602``,
an unknown method ``-32601``; notifications other than the lifecycle's are ignored.

    >>> server = Server("demo")
    >>> @server.tool()
    ... def add(a: int, b: int) -> int:
    ...     "a + b"
    ...     return a + b
"""

import inspect
import json

from . import jsonrpc
from .framing import JSON_LINES
from .jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ProtocolError, RpcError
from .stdio import stdio

__all__ = ["Server", "SUPPORTED_VERSIONS", "MODERN_VERSION", "RpcError"]

SUPPORTED_VERSIONS = ["2025-11-25", "2025-06-18"]
MODERN_VERSION = "2026-07-28"
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
UNSUPPORTED_PROTOCOL_VERSION = -32022


def _has_envelope(params):
    meta = (params or {}).get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def _unsupported(requested):
    return RpcError(
        f"unsupported protocol version; this connection speaks {MODERN_VERSION}",
        UNSUPPORTED_PROTOCOL_VERSION,
        {"supported": [MODERN_VERSION], "requested": requested},
    )


def _check_envelope(params):
    meta = params["_meta"]
    missing = [k for k in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if k not in meta]
    if missing:
        raise RpcError(f"params._meta is missing the required envelope key(s): {', '.join(missing)}", INVALID_PARAMS)
    version = meta[PROTOCOL_VERSION_KEY]
    if not isinstance(version, str):
        raise RpcError(f"{PROTOCOL_VERSION_KEY} is not a string", INVALID_PARAMS)
    if version != MODERN_VERSION:
        raise _unsupported(version)

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


def _schema_of(fn):
    props, required = {}, []
    for name, p in inspect.signature(fn).parameters.items():
        kind = _JSON_TYPES.get(p.annotation)
        props[name] = {"type": kind} if kind else {}
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


class Server:
    """An MCP server offering tools."""

    def __init__(self, name, version="0.1.0"):
        self.info = {"name": name, "version": version}
        self.tools = {}

    def tool(self, name=None, description=None, input_schema=None):
        """Register the decorated function as a tool (its name, docstring and annotations by
        default)."""

        def register(fn):
            tool = {
                "name": name or fn.__name__,
                "description": description or inspect.getdoc(fn) or "",
                "inputSchema": input_schema or _schema_of(fn),
            }
            self.tools[tool["name"]] = (tool, fn)
            return fn

        return register

    def call(self, params):
        """The ``tools/call`` result for ``params``; raises :class:`RpcError` for an unknown tool."""
        params = params if isinstance(params, dict) else {}
        name = params.get("name")
        if name not in self.tools:
            raise RpcError(f"unknown tool: {name}", INVALID_PARAMS)
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RpcError("arguments must be an object", INVALID_PARAMS)
        try:
            value = self.tools[name][1](**arguments)
        except Exception as e:  # the tool's own failure: a result the model sees
            text = str(e) or type(e).__name__
            return {"content": [{"type": "text", "text": text}], "isError": True}
        text = value if isinstance(value, str) else json.dumps(value)
        return {"content": [{"type": "text", "text": text}], "isError": False}

    def serve(self, io=None):
        """Serve over ``io`` (default: framed stdio) until the input ends."""
        io = io or stdio(JSON_LINES)
        initialized = False
        # None until the client's first request: "handshake" or "modern" (2026-07-28).
        revision = None
        while True:
            frame = io.recv()
            if frame is None:
                return
            try:
                msg = jsonrpc.parse(frame)
            except ProtocolError:
                io.send(jsonrpc.error_response(None, RpcError("parse error", jsonrpc.PARSE_ERROR)))
                continue
            if msg.kind != "request":
                continue
            try:
                enveloped = msg.method != "initialize" and _has_envelope(msg.params)
                if msg.method == "initialize":
                    if revision == "modern":
                        raise _unsupported((msg.params or {}).get("protocolVersion"))
                    asked = (msg.params or {}).get("protocolVersion")
                    version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
                    result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": self.info}
                    initialized = True
                    revision = "handshake"
                elif msg.method == "ping":
                    result = {}
                elif enveloped and revision == "handshake":
                    raise RpcError(
                        "this connection speaks the initialize handshake; requests carrying the "
                        "2026-07-28 envelope are not accepted on it",
                        INVALID_REQUEST,
                    )
                elif revision == "modern" and not enveloped:
                    raise RpcError(
                        f"params._meta must carry {PROTOCOL_VERSION_KEY} and {CLIENT_CAPABILITIES_KEY}: "
                        f"this server speaks {MODERN_VERSION} on this connection",
                        INVALID_PARAMS,
                    )
                elif not initialized and not enveloped:
                    raise RpcError("server not initialized", INVALID_REQUEST)
                else:
                    if enveloped:
                        _check_envelope(msg.params)
                        revision = "modern"
                    if msg.method == "server/discover":
                        result = {
                            "supportedVersions": [MODERN_VERSION] + SUPPORTED_VERSIONS,
                            "capabilities": {"tools": {}},
                            "_meta": {SERVER_INFO_KEY: self.info},
                        }
                    elif msg.method == "tools/list":
                        result = {"tools": [t for t, _ in self.tools.values()]}
                    elif msg.method == "tools/call":
                        result = self.call(msg.params)
                    else:
                        raise RpcError(f"method not found: {msg.method}", METHOD_NOT_FOUND)
                    if revision == "modern":
                        result.setdefault("resultType", "complete")
                        if msg.method in ("tools/list", "server/discover"):
                            result.setdefault("ttlMs", 0)
                            result.setdefault("cacheScope", "private")
            except RpcError as e:
                io.send(jsonrpc.error_response(msg.id, e))
                continue
            io.send(jsonrpc.response(msg.id, result))
