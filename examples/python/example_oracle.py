"""An example Cairo oracle in Python: the same selectors and answers as the Rust
``examples/oracle`` (so it replays ``tests/transcripts/oracle/``).

- ``sqrt x``: the integer square root of one felt below 2^128;
- ``add x y ...``: the sum of one or more felts below 2^128; fails if it overflows 128 bits;
- ``fail``: always fails. Any other selector fails with ``unknown selector: NAME``.

With ``--echo-stderr`` every frame is echoed to stderr (only frames go to stdout).

Build:  python3 -m sandpipe_guest.build examples/python/example_oracle.py -o example-oracle.wasm
Run:    sandpipe call --protocol oracle --method sqrt --params '["0x10"]' example-oracle.wasm
"""

import math
import sys

from sandpipe_guest import oracle, wasi
from sandpipe_guest.oracle import RpcError, felt, to_int

U128 = 1 << 128


def small(selector, index, x):
    n = to_int(x)
    if n >= U128:
        raise RpcError(f"{selector}: argument {index} ({x}) does not fit in 128 bits")
    return n


class Calc(oracle.Oracle):
    def __init__(self, echo_stderr=False):
        self.echo_stderr = echo_stderr

    def invoke(self, selector, calldata):
        if selector == "sqrt":
            if len(calldata) != 1:
                raise RpcError("sqrt: expected exactly one argument")
            return [felt(math.isqrt(small(selector, 0, calldata[0])))]
        if selector == "add":
            if not calldata:
                raise RpcError("add: expected at least one argument")
            total = 0
            for i, x in enumerate(calldata):
                total += small(selector, i, x)
                if total >= U128:
                    raise RpcError("add: sum overflows 128 bits")
            return [felt(total)]
        if selector == "fail":
            raise RpcError("fail: this selector always fails")
        raise RpcError(f"unknown selector: {selector}")

    def on_frame(self, direction, frame):
        if self.echo_stderr:
            print(f"example-oracle {direction}: {frame.decode('utf-8', 'replace')}", file=sys.stderr)


def main():
    calc = Calc()
    for arg in wasi.argv():
        if arg != "--echo-stderr":
            raise ValueError(f"unknown argument {arg!r} (expected --echo-stderr)")
        calc.echo_stderr = True
    if calc.echo_stderr:
        print("example-oracle: starting, echoing frames to stderr", file=sys.stderr)
    oracle.serve(calc)


if __name__ == "__main__":
    wasi.main(main)
