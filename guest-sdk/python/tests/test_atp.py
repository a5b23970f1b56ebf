"""The ATP loop's order of calls, the same cases as the Rust SDK's `order_of_results`."""

import unittest

from sandpipe_guest import atp, cbor
from sandpipe_guest.atp import PENDING, Failed, Output
from sandpipe_guest.framing import CBOR
from sandpipe_guest.stdio import Framed


class Steps(atp.Plugin):
    def start(self, run, step_id, config):
        if step_id == "now":
            return Output("success", config)
        if step_id == "bad":
            return Failed("bad step")
        if step_id == "sig":
            run.signal("waiting", None)
        return PENDING

    def signal(self, run, signal_id, data):
        return Output("success", data) if signal_id == "go" else PENDING

    def poll(self, run):
        return Output("success", None) if run.id.startswith("later") else PENDING


SCHEMA = {"steps": {s: None for s in ["now", "later", "sig", "bad"]}}


def start(run, step):
    return cbor.encode({"id": 1, "run_id": run, "data": {"id": step, "config": None}})


def signal(run, id):
    return cbor.encode({"id": 3, "run_id": run, "data": {"signal_id": id, "data": "d"}})


DONE = cbor.encode({"id": 4, "run_id": "", "data": {}})
NULL = b"\xf6"


def run_plugin(frames, version=atp.V3):
    data = bytearray(b"".join(frames))
    out = bytearray()

    def read(n):
        chunk = bytes(data[:n])
        del data[:n]
        return chunk

    def write(b):
        out.extend(b)
        return len(b)

    atp.serve(Steps(), SCHEMA, version, Framed(CBOR, read, write))
    f = Framed(CBOR, read=lambda n, o=[bytes(out)]: o.pop() if o else b"", write=None)
    got = []
    for frame in f:
        m = cbor.decode(frame)
        got.append((m.get("id", 0) if "run_id" in m else 0, m.get("run_id", "")))
    return got


class OrderTest(unittest.TestCase):
    def test_order_of_results(self):
        cases = [
            ("hello only", [NULL], [(0, "")]),
            ("immediate", [NULL, start("a", "now"), DONE], [(0, ""), (2, "a")]),
            ("deferred after next frame", [NULL, start("later1", "later"), start("b", "now"), DONE],
             [(0, ""), (2, "b"), (2, "later1")]),
            ("deferred after client done", [NULL, start("later1", "later"), DONE], [(0, ""), (2, "later1")]),
            ("signal in, signal out", [NULL, start("s", "sig"), signal("s", "go"), DONE],
             [(0, ""), (3, "s"), (2, "s")]),
            ("unknown run signal ignored", [NULL, signal("zz", "go"), start("a", "now"), DONE],
             [(0, ""), (2, "a")]),
            ("failure is an error message", [NULL, start("x", "bad"), DONE], [(0, ""), (5, "x")]),
            ("unknown step", [NULL, start("x", "nope"), DONE], [(0, ""), (5, "x")]),
            ("duplicate run", [NULL, start("s", "sig"), start("s", "now"), signal("s", "go"), DONE],
             [(0, ""), (3, "s"), (5, "s"), (2, "s")]),
        ]
        for name, frames, want in cases:
            self.assertEqual(run_plugin(frames), want, name)

    def test_refused_frames_end_the_loop(self):
        with self.assertRaises(atp.AtpError):
            run_plugin([NULL, b"\x80"])

    def test_v1_one_run_then_exit(self):
        v1_start = cbor.encode({"id": "now", "config": 5})
        data = NULL + v1_start + NULL
        out = bytearray()
        buf = [data]
        atp.serve(Steps(), SCHEMA, atp.V1, Framed(CBOR, lambda n: buf.pop() if buf else b"", lambda b: out.extend(b) or len(b)))
        f = Framed(CBOR, lambda n, o=[bytes(out)]: o.pop() if o else b"", None)
        frames = [cbor.decode(x) for x in f]
        self.assertEqual(frames[0]["version"], 1)
        self.assertEqual(frames[1:], [{"status": "started"}, {"output_id": "success", "output_data": 5, "debug_logs": ""}])
        with self.assertRaises(atp.AtpError):
            run_plugin([NULL, cbor.encode({"id": "bad", "config": None})], atp.V1)


if __name__ == "__main__":
    unittest.main()
