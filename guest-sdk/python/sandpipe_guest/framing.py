"""The three framings, sans-IO: feed bytes in, take whole frames out; encode frames to send.

    stdin bytes ──feed()──► buffer ──next_frame()──► frame (bytes) or None (need more)
    frame ──encode()──► bytes for stdout

The same rules as sandpipe's Rust framers (``sandpipe-proto``):

- ``JSON_LINES``: one JSON value per line; ``\\r\\n`` accepted, blank lines skipped, every
  frame validated as JSON on arrival; sending checks size, no newline, not blank.
- ``CBOR``: CBOR items back to back (RFC 8742); each frame is one whole item.
- ``CONTENT_LENGTH``: LSP-style ``Content-Length: N`` headers (any order, any extra headers,
  header block at most 8 KiB), a blank line, then N bytes.

Every length is checked against ``max_frame_bytes`` (default 16 MiB) before anything is kept
for it: a frame over the limit raises :class:`FrameError`, never allocates.
"""

import json

from . import cbor

__all__ = ["JSON_LINES", "CBOR", "CONTENT_LENGTH", "FrameError", "Framer", "framer"]

JSON_LINES = "lines"
CBOR = "cbor"
CONTENT_LENGTH = "content-length"

MAX_FRAME_BYTES = 16 << 20
MAX_HEADER_BYTES = 8 << 10
MAX_DEPTH = 128


class FrameError(ValueError):
    """Bytes that break the framing, or a frame over a limit."""


class Framer:
    """Base class: a buffer of unread bytes and the framing's rules."""

    name = ""

    def __init__(self, max_frame_bytes=MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data):
        """Append bytes read from the peer."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > (1 << 16) and self._pos > len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def buffered(self):
        """Bytes fed and not yet returned as frames."""
        return len(self._buf) - self._pos

    def next_frame(self):
        """The next whole frame, or None when more bytes are needed."""
        raise NotImplementedError

    def finish(self):
        """At end of input: raise if a frame was cut off (whitespace between frames is fine)."""
        rest = bytes(self._buf[self._pos :])
        if rest.strip():
            raise FrameError(f"input ended inside a frame ({len(rest)} bytes)")

    def encode(self, frame):
        """The bytes that carry ``frame``; raises :class:`FrameError` when it breaks the framing."""
        raise NotImplementedError

    def _too_large(self, got):
        return FrameError(f"frame of {got} bytes exceeds max_frame_bytes {self.max_frame_bytes}")


class JsonLines(Framer):
    name = JSON_LINES

    def next_frame(self):
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end < 0:
                if len(self._buf) - self._pos > self.max_frame_bytes:
                    raise self._too_large(len(self._buf) - self._pos)
                return None
            line = bytes(self._buf[self._pos : end])
            self._pos = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self.max_frame_bytes:
                raise self._too_large(len(line))
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as e:
                raise FrameError(f"line is not JSON ({e}): {line[:200]!r}") from None
            return line

    def encode(self, frame):
        frame = bytes(frame)
        if len(frame) > self.max_frame_bytes:
            raise self._too_large(len(frame))
        if b"\n" in frame:
            raise FrameError("a JSON Lines frame must not contain a newline")
        if not frame.strip():
            raise FrameError("a JSON Lines frame must not be blank")
        return frame + b"\n"


class CborSeq(Framer):
    name = CBOR

    def next_frame(self):
        try:
            n = cbor.item_length(self._buf, self._pos, MAX_DEPTH)
        except cbor.CborError as e:
            raise FrameError(f"not CBOR: {e}") from None
        if n is None:
            if len(self._buf) - self._pos > self.max_frame_bytes:
                raise self._too_large(len(self._buf) - self._pos)
            return None
        if n > self.max_frame_bytes:
            raise self._too_large(n)
        frame = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return frame

    def finish(self):
        rest = len(self._buf) - self._pos
        if rest:
            raise FrameError(f"input ended inside a CBOR item ({rest} bytes)")

    def encode(self, frame):
        frame = bytes(frame)
        if len(frame) > self.max_frame_bytes:
            raise self._too_large(len(frame))
        try:
            n = cbor.item_length(frame, 0, MAX_DEPTH)
        except cbor.CborError as e:
            raise FrameError(f"not CBOR: {e}") from None
        if n != len(frame):
            raise FrameError("a CBOR frame must be exactly one item")
        return frame


class ContentLength(Framer):
    name = CONTENT_LENGTH

    def next_frame(self):
        end = self._buf.find(b"\r\n\r\n", self._pos)
        if end < 0:
            if len(self._buf) - self._pos > MAX_HEADER_BYTES:
                raise FrameError(f"header block exceeds {MAX_HEADER_BYTES} bytes")
            return None
        if end - self._pos > MAX_HEADER_BYTES:
            raise FrameError(f"header block exceeds {MAX_HEADER_BYTES} bytes")
        length = None
        for line in bytes(self._buf[self._pos : end]).split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if not sep:
                raise FrameError(f"header line without a colon: {line[:100]!r}")
            if name.strip().lower() == b"content-length":
                v = value.strip()
                if not v.isdigit():
                    raise FrameError(f"bad Content-Length {v[:40]!r}")
                length = int(v)
        if length is None:
            raise FrameError("header block has no Content-Length")
        if length > self.max_frame_bytes:
            raise self._too_large(length)
        start = end + 4
        if len(self._buf) - start < length:
            return None
        frame = bytes(self._buf[start : start + length])
        self._pos = start + length
        return frame

    def finish(self):
        rest = len(self._buf) - self._pos
        if rest:
            raise FrameError(f"input ended inside a Content-Length frame ({rest} bytes)")

    def encode(self, frame):
        frame = bytes(frame)
        if len(frame) > self.max_frame_bytes:
            raise self._too_large(len(frame))
        return b"Content-Length: %d\r\n\r\n" % len(frame) + frame


_FRAMERS = {JSON_LINES: JsonLines, CBOR: CborSeq, CONTENT_LENGTH: ContentLength}


def framer(framing, max_frame_bytes=MAX_FRAME_BYTES):
    """A fresh framer for ``framing``: ``"lines"``, ``"cbor"`` or ``"content-length"``."""
    try:
        return _FRAMERS[framing](max_frame_bytes)
    except KeyError:
        raise ValueError(f"unknown framing {framing!r} (lines, cbor, content-length)") from None
