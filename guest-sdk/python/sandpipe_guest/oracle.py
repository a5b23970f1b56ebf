"""Cairo oracles (the ``stdio:`` protocol over JSON Lines): subclass :class:`Oracle`, call
:func:`serve`.

    serve ──► {"id":0,"method":"ready"} ──► host acks {} ──► invoke ──► Oracle.invoke(selector,
    calldata) ──► result felts or an error ──► ... ──► shutdown notification: return

Felts are lowercase hex strings (``"0x0"`` for zero), checked as the Rust SDK checks them; a
malformed invoke is answered with -32602, an unknown method with -32601, and an exception
from ``invoke`` with -32603 and its message (raise :class:`RpcError` for another code).

    >>> class Sqrt(Oracle):
    ...     def invoke(self, selector, calldata):
    ...         return [felt(math.isqrt(to_int(calldata[0])))]
"""

import math
import sys

from . import jsonrpc
from .framing import JSON_LINES
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, ProtocolError, RpcError
from .stdio import stdio

__all__ = ["Oracle", "serve", "felt", "to_int", "parse_felt", "FeltError", "RpcError"]

# The field prime's hex digits: felts are below 0x800000000000011 followed by 48 zeros, plus one.
_FELT_MAX_DIGITS = "800000000000011000000000000000000000000000000000000000000000000"


class FeltError(ValueError):
    pass


def _debug(s):
    """A string as Rust's `{:?}` shows it (the messages match the Rust SDK's)."""
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _char_debug(c):
    if c == "'":
        return "'\\''"
    return "'" + _debug(c)[1:-1].replace('\\"', '"') + "'"


def parse_felt(s):
    """Check ``s`` is a felt: 0x, lowercase hex, no leading zero, below the field prime."""
    short = s[:80]
    if not s.startswith("0x"):
        raise FeltError(f"felt {_debug(short)} does not start with 0x")
    digits = s[2:]
    if not digits:
        raise FeltError("felt has no digits after 0x")
    for i, c in enumerate(digits):
        if c not in "0123456789abcdef":
            raise FeltError(
                f"felt {_debug(short)} has {_char_debug(c)} at {i + 2}, expected a lowercase hex digit"
            )
    if len(digits) > 1 and digits[0] == "0":
        raise FeltError(f"felt {_debug(short)} has a leading zero")
    if len(digits) > len(_FELT_MAX_DIGITS) or (
        len(digits) == len(_FELT_MAX_DIGITS) and digits > _FELT_MAX_DIGITS
    ):
        raise FeltError(
            f"felt of {len(digits)} hex digits is not below the field prime (at most 63 digits, "
            "below 0x800000000000011 followed by 48 zeros plus one)"
        )
    return s


def felt(n):
    """The felt for a non-negative integer."""
    return hex(n)


def to_int(f):
    """A felt's integer value."""
    return int(f, 16)


def _kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _invoke_params(params):
    if not isinstance(params, dict):
        raise ValueError("params must be an object with selector and calldata")
    if "selector" not in params:
        raise ValueError("missing selector")
    selector = params["selector"]
    if not isinstance(selector, str):
        raise ValueError(f"selector: expected a string, got {_kind(selector)}")
    if "calldata" not in params:
        raise ValueError("missing calldata")
    calldata = params["calldata"]
    if not isinstance(calldata, list):
        raise ValueError(f"calldata: expected an array of felts, got {_kind(calldata)}")
    for i, item in enumerate(calldata):
        if not isinstance(item, str):
            raise ValueError(f"calldata: element {i}: expected a string, got {_kind(item)}")
        try:
            parse_felt(item)
        except FeltError as e:
            raise ValueError(f"calldata: element {i}: {e}") from None
    return selector, calldata


class Oracle:
    """An oracle: override :meth:`invoke`; optionally :meth:`on_frame`."""

    def invoke(self, selector, calldata):
        """Return a list of felts, or raise (the message becomes the error value)."""
        raise RpcError(f"unknown selector: {selector}")

    def on_frame(self, direction, frame):
        """Every frame received (``"recv"``) and sent (``"send"``), for logging."""


def serve(oracle, io=None):
    """Serve ``oracle`` over ``io`` (default: framed stdio) until shutdown or end of input."""
    io = io or stdio(JSON_LINES)

    def send(frame):
        oracle.on_frame("send", frame)
        io.send(frame)

    send(jsonrpc.request(0, "ready"))
    acked = False
    while True:
        frame = io.recv()
        if frame is None:
            return
        oracle.on_frame("recv", frame)
        msg = jsonrpc.parse(frame)
        if msg.kind == "response":
            if acked or msg.id != 0:
                raise ProtocolError(f"response to unknown request id {msg.id}")
            if msg.error is not None:
                raise ProtocolError(f"host rejected ready: {msg.error}")
            acked = True
        elif msg.kind == "notification":
            if msg.method == "shutdown":
                return
        elif not acked:
            raise ProtocolError(f"unexpected {msg.describe()} while awaiting the ready ack")
        elif msg.method != "invoke":
            send(jsonrpc.error_response(msg.id, RpcError(f"unknown method: {msg.method}", METHOD_NOT_FOUND)))
        else:
            try:
                selector, calldata = _invoke_params(msg.params)
            except ValueError as e:
                send(jsonrpc.error_response(msg.id, RpcError(f"invalid invoke params: {e}", INVALID_PARAMS)))
                continue
            try:
                result = oracle.invoke(selector, calldata)
                for f in result:
                    parse_felt(f)
            except RpcError as e:
                send(jsonrpc.error_response(msg.id, e))
                continue
            except Exception as e:  # the plugin's failure is an error value, not a crash
                send(jsonrpc.error_response(msg.id, RpcError(str(e) or type(e).__name__, INTERNAL_ERROR)))
                continue
            send(jsonrpc.response(msg.id, list(result)))
