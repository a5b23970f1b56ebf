"""CBOR (RFC 8949) items to and from Python values, in pure Python.

Encoding is deterministic and matches what sandpipe's Rust side (ciborium) writes: shortest
integer heads, definite lengths, text for ``str``, bytes for ``bytes``, maps in the dict's own
order, floats in the shortest width that holds them exactly. Decoding accepts indefinite
lengths and tags (kept as :class:`Tag`); it never recurses deeper than ``max_depth``.

    >>> encode({"a": [1, -2, True, None]}).hex()
    'a16161840121f5f6'
    >>> decode(bytes.fromhex('a16161840121f5f6'))
    {'a': [1, -2, True, None]}
"""

import math
import struct

__all__ = ["Tag", "Undefined", "CborError", "encode", "decode", "item_length"]


class CborError(ValueError):
    """Bytes that are not one well-formed CBOR item."""


class Tag:
    """A tagged item the decoder keeps as it is."""

    __slots__ = ("tag", "value")

    def __init__(self, tag, value):
        self.tag = tag
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Tag) and (self.tag, self.value) == (other.tag, other.value)

    def __repr__(self):
        return f"Tag({self.tag}, {self.value!r})"


class _UndefinedType:
    __slots__ = ()

    def __repr__(self):
        return "Undefined"


Undefined = _UndefinedType()


def _head(major, n, out):
    if n < 24:
        out.append((major << 5) | n)
    elif n < 0x100:
        out += bytes(((major << 5) | 24, n))
    elif n < 0x10000:
        out.append((major << 5) | 25)
        out += n.to_bytes(2, "big")
    elif n < 0x100000000:
        out.append((major << 5) | 26)
        out += n.to_bytes(4, "big")
    elif n < 0x10000000000000000:
        out.append((major << 5) | 27)
        out += n.to_bytes(8, "big")
    else:
        raise CborError(f"integer {n} does not fit in 64 bits")


def _float(x, out):
    if math.isnan(x):
        out += b"\xf9\x7e\x00"
        return
    for fmt, head in (("e", 0xF9), ("f", 0xFA)):
        try:
            packed = struct.pack(">" + fmt, x)
        except OverflowError:
            continue
        if struct.unpack(">" + fmt, packed)[0] == x:
            out.append(head)
            out += packed
            return
    out.append(0xFB)
    out += struct.pack(">d", x)


def _encode(v, out):
    if v is None:
        out.append(0xF6)
    elif v is True:
        out.append(0xF5)
    elif v is False:
        out.append(0xF4)
    elif v is Undefined:
        out.append(0xF7)
    elif isinstance(v, int):
        if v >= 0:
            _head(0, v, out)
        else:
            _head(1, -1 - v, out)
    elif isinstance(v, str):
        b = v.encode("utf-8")
        _head(3, len(b), out)
        out += b
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        _head(2, len(b), out)
        out += b
    elif isinstance(v, float):
        _float(v, out)
    elif isinstance(v, dict):
        _head(5, len(v), out)
        for k, x in v.items():
            _encode(k, out)
            _encode(x, out)
    elif isinstance(v, (list, tuple)):
        _head(4, len(v), out)
        for x in v:
            _encode(x, out)
    elif isinstance(v, Tag):
        _head(6, v.tag, out)
        _encode(v.value, out)
    else:
        raise CborError(f"cannot encode {type(v).__name__} as CBOR")


def encode(value):
    """One CBOR item for ``value``."""
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _arg(data, pos, info):
    """The argument of a head whose additional info is ``info``: (value, next position)."""
    if info < 24:
        return info, pos
    if info > 27:
        return None, pos
    width = 1 << (info - 24)
    if pos + width > len(data):
        raise IndexError
    return int.from_bytes(data[pos : pos + width], "big"), pos + width


def item_length(data, start=0, max_depth=128):
    """Length of the CBOR item at ``data[start:]``, or None when the bytes end inside it.

    Walks heads only (no values are built), iteratively, so a deep or huge item costs no
    recursion and no allocation; raises :class:`CborError` when the bytes cannot be CBOR.
    """
    pos = start
    # Each entry: items still to read at that level (-1: indefinite, until a break).
    stack = []
    try:
        while True:
            if pos >= len(data):
                return None
            ib = data[pos]
            pos += 1
            major, info = ib >> 5, ib & 0x1F
            if ib == 0xFF:
                if not stack or stack[-1] != -1:
                    raise CborError(f"unexpected break at byte {pos - 1}")
                stack.pop()
            elif info == 31:
                if major in (2, 3):
                    stack.append(-1)  # chunks until a break
                elif major in (4, 5):
                    stack.append(-1)
                else:
                    raise CborError(f"indefinite length on major type {major}")
                if len(stack) > max_depth:
                    raise CborError(f"nesting deeper than {max_depth}")
                continue
            else:
                n, pos = _arg(data, pos, info)
                if n is None:
                    raise CborError(f"reserved additional info {info} at byte {pos - 1}")
                if major in (2, 3):
                    pos += n
                    if pos > len(data):
                        return None
                elif major == 4 or major == 5:
                    count = n * (2 if major == 5 else 1)
                    if count:
                        stack.append(count)
                        if len(stack) > max_depth:
                            raise CborError(f"nesting deeper than {max_depth}")
                        continue
                elif major == 6:
                    stack.append(1)
                    if len(stack) > max_depth:
                        raise CborError(f"nesting deeper than {max_depth}")
                    continue
            # One item finished: count it against the enclosing levels.
            while stack:
                if stack[-1] == -1:
                    break
                stack[-1] -= 1
                if stack[-1] > 0:
                    break
                stack.pop()
            if not stack:
                return pos - start
    except IndexError:
        return None


def decode(data, max_depth=128):
    """The one CBOR item that ``data`` holds exactly."""
    n = item_length(data, 0, max_depth)
    if n is None:
        raise CborError("the bytes end inside an item")
    if n != len(data):
        raise CborError(f"{len(data) - n} bytes after the item")
    value, _ = _decode(memoryview(bytes(data)), 0)
    return value


_SIMPLE = {20: False, 21: True, 22: None, 23: Undefined}


def _decode(data, pos):
    # `item_length` checked the structure and depth, so this recursion is bounded.
    ib = data[pos]
    pos += 1
    major, info = ib >> 5, ib & 0x1F
    if info == 31:
        if major in (2, 3):
            chunks = []
            while data[pos] != 0xFF:
                chunk, pos = _decode(data, pos)
                chunks.append(chunk)
            pos += 1
            return (b"".join(chunks) if major == 2 else "".join(chunks)), pos
        if major == 4:
            items = []
            while data[pos] != 0xFF:
                item, pos = _decode(data, pos)
                items.append(item)
            return items, pos + 1
        m = {}
        while data[pos] != 0xFF:
            k, pos = _decode(data, pos)
            v, pos = _decode(data, pos)
            m[_key(k)] = v
        return m, pos + 1
    if major == 7:
        if info == 25:
            return struct.unpack(">e", data[pos : pos + 2])[0], pos + 2
        if info == 26:
            return struct.unpack(">f", data[pos : pos + 4])[0], pos + 4
        if info == 27:
            return struct.unpack(">d", data[pos : pos + 8])[0], pos + 8
        n, pos = _arg(data, pos, info)
        if n in _SIMPLE:
            return _SIMPLE[n], pos
        return Tag(-1, n), pos  # an unassigned simple value
    n, pos = _arg(data, pos, info)
    if major == 0:
        return n, pos
    if major == 1:
        return -1 - n, pos
    if major == 2:
        return bytes(data[pos : pos + n]), pos + n
    if major == 3:
        try:
            return str(data[pos : pos + n], "utf-8"), pos + n
        except UnicodeDecodeError as e:
            raise CborError(f"text string is not UTF-8: {e}") from None
    if major == 4:
        items = []
        for _ in range(n):
            item, pos = _decode(data, pos)
            items.append(item)
        return items, pos
    if major == 5:
        m = {}
        for _ in range(n):
            k, pos = _decode(data, pos)
            v, pos = _decode(data, pos)
            m[_key(k)] = v
        return m, pos
    value, pos = _decode(data, pos)
    return Tag(n, value), pos


def _key(k):
    # Python dict keys must be hashable: arrays as tuples, maps as sorted item tuples.
    if isinstance(k, list):
        return tuple(_key(x) for x in k)
    if isinstance(k, dict):
        return tuple((a, _key(b)) for a, b in k.items())
    return k
