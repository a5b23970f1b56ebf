"""The framers' contract, as for the Rust framers: every split of a valid stream gives the
same frames, limits are checked before anything is kept, cut frames are reported at EOF."""

import unittest

from sandpipe_guest import cbor
from sandpipe_guest.framing import CBOR, CONTENT_LENGTH, JSON_LINES, FrameError, framer

STREAMS = {
    JSON_LINES: (b'{"a":1}\n\n  \r\n[1,2]\r\n"x"\n', [b'{"a":1}', b"[1,2]", b'"x"']),
    CBOR: (
        bytes.fromhex("f6") + cbor.encode({"id": 1, "data": [1, "two", None]}) + bytes.fromhex("9f0102ff"),
        [bytes.fromhex("f6"), cbor.encode({"id": 1, "data": [1, "two", None]}), bytes.fromhex("9f0102ff")],
    ),
    CONTENT_LENGTH: (
        b"Content-Length: 2\r\n\r\n{}Content-Type: x\r\ncontent-length: 3\r\n\r\n[1]",
        [b"{}", b"[1]"],
    ),
}


def frames_of(name, chunks, max_frame_bytes=1 << 20):
    f = framer(name, max_frame_bytes)
    out = []
    for chunk in chunks:
        f.feed(chunk)
        while (frame := f.next_frame()) is not None:
            out.append(frame)
    f.finish()
    return out


class FramingTest(unittest.TestCase):
    def test_every_split_gives_the_same_frames(self):
        for name, (stream, want) in STREAMS.items():
            self.assertEqual(frames_of(name, [stream]), want, name)
            for i in range(len(stream) + 1):
                self.assertEqual(frames_of(name, [stream[:i], stream[i:]]), want, f"{name} split at {i}")
            self.assertEqual(frames_of(name, [bytes([b]) for b in stream]), want, f"{name} bytewise")

    def test_encoded_frames_decode_back(self):
        for name, (_, frames) in STREAMS.items():
            f = framer(name)
            self.assertEqual(frames_of(name, [b"".join(f.encode(x) for x in frames)]), frames, name)

    def test_limits_and_cut_frames(self):
        cases = [
            (JSON_LINES, b'{"a":"' + b"x" * 40, 16, "exceeds max_frame_bytes 16"),
            (JSON_LINES, b"[1,2,3,4,5,6,7,8,9,10]\n", 16, "exceeds max_frame_bytes 16"),
            (JSON_LINES, b"not json\n", 64, "not JSON"),
            (CBOR, cbor.encode("y" * 40), 16, "exceeds max_frame_bytes 16"),
            (CBOR, bytes.fromhex("ff"), 16, "unexpected break"),
            (CONTENT_LENGTH, b"Content-Length: 17\r\n\r\n", 16, "exceeds max_frame_bytes 16"),
            (CONTENT_LENGTH, b"Content-Type: x\r\n\r\n", 16, "no Content-Length"),
            (JSON_LINES, b'{"a":', 64, "ended inside a frame"),
            (CBOR, bytes.fromhex("a1"), 64, "ended inside"),
        ]
        for name, data, limit, message in cases:
            with self.assertRaises(FrameError, msg=f"{name} {data!r}") as ctx:
                frames_of(name, [data], limit)
            self.assertIn(message, str(ctx.exception))

    def test_json_lines_senders_refuse_what_readers_would(self):
        f = framer(JSON_LINES)
        for bad in [b"", b"  ", b'{"a":\n1}']:
            with self.assertRaises(FrameError):
                f.encode(bad)


class CborTest(unittest.TestCase):
    def test_encoding_matches_the_rust_side(self):
        cases = [
            (0, "00"), (23, "17"), (24, "1818"), (255, "18ff"), (256, "190100"), (-1, "20"),
            (-25, "3818"), (2**32, "1b0000000100000000"), ("", "60"), (b"\x01", "4101"),
            ([], "80"), ({}, "a0"), (True, "f5"), (None, "f6"), (1.5, "f93e00"),
            (100000.0, "fa47c35000"), (0.1, "fb3fb999999999999a"),
        ]
        for value, hex_ in cases:
            self.assertEqual(cbor.encode(value).hex(), hex_, repr(value))
            self.assertEqual(cbor.decode(bytes.fromhex(hex_)), value, hex_)

    def test_depth_is_limited_without_recursion(self):
        deep = b"\x81" * 200 + b"\x00"
        with self.assertRaises(cbor.CborError):
            cbor.decode(deep)
        self.assertEqual(cbor.decode(b"\x81" * 100 + b"\x00", max_depth=128), eval("[" * 100 + "0" + "]" * 100))


if __name__ == "__main__":
    unittest.main()
