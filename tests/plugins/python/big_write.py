"""Writes CHUNKS chunks of SIZE bytes to stdout, each with ONE os.write, as code written for
blocking pipes does (cbor2 among others), and fails with status 3 on a short write.

Chunk i is SIZE copies of the byte i % 251, so the reader can tell chunks apart.
Args: CHUNKS SIZE.
"""

import os
import sys

from sandpipe_guest import wasi


def main():
    chunks, size = (int(a) for a in wasi.argv())
    for i in range(chunks):
        n = os.write(1, bytes([i % 251]) * size)
        if n != size:
            print(f"big-write: os.write returned {n} of {size} bytes", file=sys.stderr)
            wasi.exit(3)


if __name__ == "__main__":
    wasi.main(main)
