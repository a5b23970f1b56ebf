"""Framed stdin and stdout of this process: the plugin side of a sandpipe session.

    fd 0 ──os.read──► Framer.feed ──next_frame──► recv() ──► your handler
    fd 1 ◄──os.write (until all is written)── Framer.encode ◄── send(frame)

Blocking and single-threaded, so it runs the same under ``python3`` and as a componentize-py
component. ``send`` writes each frame whole: it retries short writes (a blocking pipe never
gives one under sandpipe, but other hosts may). Bytes written through ``sys.stdout`` are not
frames; write logs to ``sys.stderr``.
"""

import os

from .framing import MAX_FRAME_BYTES, framer

__all__ = ["Framed", "stdio"]

FIRST_READ = 8 << 10
MAX_READ = 64 << 10


class Framed:
    """Frames over a pair of file descriptors (or any ``read(n)``/``write(b)`` callables)."""

    def __init__(self, framing, read=None, write=None, max_frame_bytes=MAX_FRAME_BYTES):
        self.framer = framer(framing, max_frame_bytes)
        self._read = read or (lambda n: os.read(0, n))
        self._write = write or (lambda b: os.write(1, b))
        self._read_size = FIRST_READ
        self._eof = False

    def recv(self):
        """The next frame from the host, or None at end of input."""
        while True:
            frame = self.framer.next_frame()
            if frame is not None:
                return frame
            if self._eof:
                self.framer.finish()
                return None
            data = self._read(self._read_size)
            if not data:
                self._eof = True
            else:
                if len(data) == self._read_size and self._read_size < MAX_READ:
                    self._read_size *= 2
                self.framer.feed(data)

    def send(self, frame):
        """Write one frame, whole."""
        data = memoryview(self.framer.encode(frame))
        while data:
            n = self._write(data)
            if n is None:  # a file object's write() in non-blocking mode
                n = 0
            data = data[n:]

    def __iter__(self):
        while True:
            frame = self.recv()
            if frame is None:
                return
            yield frame


def stdio(framing, max_frame_bytes=MAX_FRAME_BYTES):
    """This process's stdin and stdout, framed."""
    return Framed(framing, max_frame_bytes=max_frame_bytes)
