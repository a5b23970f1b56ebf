"""JSON-RPC 2.0 messages as sandpipe's protocols write them: compact, members in the order
``jsonrpc, id, method, params`` / ``jsonrpc, id, result|error``, ``params`` left out when
there are none, ``data`` left out of an error when there is none.
"""

import json

__all__ = [
    "ProtocolError",
    "RpcError",
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "dumps",
    "request",
    "notification",
    "response",
    "error_response",
    "parse",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_NO_ID = object()


class ProtocolError(ValueError):
    """A message the protocol does not allow here; the plugin loop ends with it."""


class RpcError(Exception):
    """An error answer: raise it from a handler to answer with ``code`` and ``message``."""

    def __init__(self, message, code=INTERNAL_ERROR, data=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_object(self):
        obj = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj


def dumps(value):
    """Compact JSON, UTF-8 as it is (serde_json's output for the same value)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def request(id, method, params=None, jsonrpc=True):
    msg = {"jsonrpc": "2.0"} if jsonrpc else {}
    msg["id"] = id
    msg["method"] = method
    if params is not None:
        msg["params"] = params
    return dumps(msg)


def notification(method, params=None, jsonrpc=True):
    msg = {"jsonrpc": "2.0"} if jsonrpc else {}
    msg["method"] = method
    if params is not None:
        msg["params"] = params
    return dumps(msg)


def response(id, result, jsonrpc=True):
    msg = {"jsonrpc": "2.0"} if jsonrpc else {}
    msg["id"] = id
    msg["result"] = result
    return dumps(msg)


def error_response(id, error, jsonrpc=True):
    """``error`` is an :class:`RpcError` or an error object (dict)."""
    msg = {"jsonrpc": "2.0"} if jsonrpc else {}
    msg["id"] = id
    msg["error"] = error.to_object() if isinstance(error, RpcError) else error
    return dumps(msg)


class Message:
    """A decoded message: ``kind`` is ``"request"``, ``"notification"`` or ``"response"``."""

    __slots__ = ("kind", "id", "method", "params", "result", "error")

    def __init__(self, kind, id=None, method=None, params=None, result=None, error=None):
        self.kind = kind
        self.id = id
        self.method = method
        self.params = params
        self.result = result
        self.error = error

    def describe(self):
        if self.kind == "response":
            return f"response {json.dumps(self.id)}"
        if self.kind == "request":
            return f"request {self.method!r} {json.dumps(self.id)}"
        return f"notification {self.method!r}"


def parse(frame, jsonrpc=True):
    """Decode one frame as a JSON-RPC message (``jsonrpc=False``: Orchard's dialect)."""
    try:
        obj = json.loads(frame)
    except ValueError as e:
        raise ProtocolError(f"message is not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("invalid message (not an object)")
    if jsonrpc and obj.get("jsonrpc") != "2.0":
        raise ProtocolError(f"unsupported jsonrpc version {obj.get('jsonrpc')!r}")
    method = obj.get("method")
    id = obj.get("id", _NO_ID)
    if method is not None:
        if not isinstance(method, str):
            raise ProtocolError("invalid message (method is not a string)")
        if id is _NO_ID:
            return Message("notification", method=method, params=obj.get("params"))
        return Message("request", id=id, method=method, params=obj.get("params"))
    if id is _NO_ID:
        raise ProtocolError("invalid message (no method and no id)")
    if "error" in obj:
        if "result" in obj:
            raise ProtocolError("invalid message (both result and error)")
        if not isinstance(obj["error"], dict):
            raise ProtocolError("invalid message (error is not an object)")
        return Message("response", id=id, error=obj["error"])
    if "result" not in obj:
        raise ProtocolError("invalid message (a response without result or error)")
    return Message("response", id=id, result=obj["result"])
