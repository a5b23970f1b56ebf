//! JSON Lines: one JSON value per line.

use super::{FrameError, FrameLimits, Framer, escape_snippet, json_check};
use bytes::{Buf, Bytes, BytesMut};

/// How many input bytes an error message quotes.
const SNIPPET_BYTES: usize = 200;

/// One JSON value per line.
///
/// Decoding:
/// - a line ends at `\n`, and one `\r` just before it is stripped (`\r\n`); any further `\r`
///   stays in the frame (JSON treats it as whitespace);
/// - blank lines (empty, or only spaces, tabs and `\r`) are skipped;
/// - each remaining line must be UTF-8 and one well-formed JSON value, unless
///   [`JsonLines::without_json_validation`] was called;
/// - a line longer than `max_frame_bytes` is rejected as soon as its unterminated prefix
///   exceeds the limit (`max_frame_bytes + 1` when the last byte is a `\r` that may start a
///   `\r\n`), so no more than that plus one read is ever buffered;
/// - at end of stream, an unterminated non-blank line is [`FrameError::Truncated`]: a plugin
///   that died mid-line must not produce a frame.
///
/// Encoding rejects a frame that a reader would not give back unchanged: one containing `\n`,
/// ending in `\r` (it would be taken for a `\r\n`), or blank.
///
/// Defaults: JSON validation on; limits as given to [`JsonLines::new`].
#[derive(Debug, Clone)]
pub struct JsonLines {
    limits: FrameLimits,
    validate_json: bool,
    /// Bytes at the front of the buffer already searched for `\n` without finding one.
    scanned: usize,
    /// Bytes handed to the newline search, to prove in tests that each byte is searched once.
    #[cfg(test)]
    examined: usize,
}

impl JsonLines {
    /// A JSON Lines framer that validates every line as JSON.
    pub fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            validate_json: true,
            scanned: 0,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// Turn JSON validation off: any non-blank line without `\n` is a frame. Useful when the
    /// layer above parses every frame anyway and should report the error itself.
    pub fn without_json_validation(mut self) -> Self {
        self.validate_json = false;
        self
    }

    fn too_large(&self, got: usize) -> FrameError {
        FrameError::TooLarge {
            limit: self.limits.max_frame_bytes,
            got,
        }
    }
}

/// The length of `line` (which holds no `\n`) without one trailing `\r`.
fn strip_cr(line: &[u8]) -> usize {
    line.len() - usize::from(line.last() == Some(&b'\r'))
}

/// Blank means JSON whitespace only (`\n` cannot occur inside a line).
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| matches!(b, b' ' | b'\t' | b'\r'))
}

impl JsonLines {
    /// Check one frame as `decode` and `encode` do when validating: UTF-8 holding exactly one
    /// JSON text (surrounding whitespace allowed). The line's framing (no `\n`, no trailing
    /// `\r`, not blank) is not checked here.
    pub fn check_frame(frame: &[u8]) -> Result<(), FrameError> {
        validate_json(frame)
    }
}

/// Check that `line` is UTF-8 holding exactly one JSON value (surrounding whitespace allowed).
fn validate_json(line: &[u8]) -> Result<(), FrameError> {
    json_check::validate(line).map_err(|err| {
        // Report invalid UTF-8 when it comes no later than the syntax error, as a line that
        // is not text at all is better described that way than as a misplaced byte.
        let reason = match std::str::from_utf8(line) {
            Err(utf8) if utf8.valid_up_to() <= err.offset => {
                format!("invalid utf-8 at byte {}", utf8.valid_up_to())
            }
            _ => err.to_string(),
        };
        FrameError::InvalidJson {
            reason,
            snippet: escape_snippet(line, SNIPPET_BYTES),
        }
    })
}

impl Framer for JsonLines {
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let max = self.limits.max_frame_bytes;
        loop {
            // If `src` shrank since the last call (the caller took bytes), start over.
            let start = if self.scanned > src.len() {
                0
            } else {
                self.scanned
            };
            let found = memchr::memchr(b'\n', &src[start..]);
            #[cfg(test)]
            {
                self.examined += found.map_or(src.len() - start, |i| i + 1);
            }
            let Some(found) = found else {
                self.scanned = src.len();
                // A trailing `\r` may be half of a `\r\n`, so it does not count yet.
                let len = strip_cr(src);
                if len > max {
                    return Err(self.too_large(len));
                }
                return Ok(None);
            };
            let newline = start + found;
            let len = strip_cr(&src[..newline]);
            self.scanned = 0;
            // The size check comes first so that a whole buffer and a trickle of small reads
            // fail the same way (the trickle cannot know whether the line is valid JSON yet).
            if len > max {
                return Err(self.too_large(len));
            }
            let line = &src[..len];
            // A JSON value starts with a non-blank byte, so the whole blank check runs only on
            // lines that open with whitespace.
            if matches!(line.first(), None | Some(b' ' | b'\t' | b'\r')) && is_blank(line) {
                src.advance(newline + 1);
                continue;
            }
            if self.validate_json {
                validate_json(line)?;
            }
            // One split takes the line and its ending off the buffer together (a second split
            // or an `advance` per frame costs more than the shortening, which is a length
            // change on the split-off part).
            let mut frame = src.split_to(newline + 1);
            frame.truncate(len);
            return Ok(Some(frame.freeze()));
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if is_blank(src) {
            src.clear();
            self.scanned = 0;
            return Ok(None);
        }
        Err(FrameError::Truncated {
            got: src.len(),
            snippet: escape_snippet(src, SNIPPET_BYTES),
        })
    }

    fn encode(&mut self, frame: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        let tail = self.encode_head(frame, dst)?;
        dst.reserve(frame.len() + tail.len());
        dst.extend_from_slice(frame);
        dst.extend_from_slice(tail);
        Ok(())
    }
}

impl JsonLines {
    /// [`Framer::encode`] without the frame: check `frame`, append what goes before it to
    /// `dst` (nothing), and return what goes after it (the newline).
    pub fn encode_head(
        &mut self,
        frame: &[u8],
        _dst: &mut BytesMut,
    ) -> Result<&'static [u8], FrameError> {
        if frame.len() > self.limits.max_frame_bytes {
            return Err(self.too_large(frame.len()));
        }
        if let Some(offset) = memchr::memchr(b'\n', frame) {
            return Err(FrameError::EmbeddedNewline { offset });
        }
        // The reader strips `\r` before `\n`, so a trailing `\r` would not come back.
        if frame.ends_with(b"\r") {
            return Err(FrameError::EmbeddedNewline {
                offset: frame.len() - 1,
            });
        }
        // The reader skips blank lines, so a blank frame would vanish.
        if is_blank(frame) {
            return Err(FrameError::BlankFrame);
        }
        if self.validate_json {
            validate_json(frame)?;
        }
        Ok(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{decode_pieces, every_split};

    fn limits(max_frame_bytes: usize) -> FrameLimits {
        FrameLimits::with_max_frame_bytes(max_frame_bytes)
    }

    fn frames(list: &[&str]) -> Vec<Bytes> {
        list.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    /// Name, input, frames, and the error that ends the stream.
    type DecodeCase = (
        &'static str,
        &'static [u8],
        &'static [&'static str],
        Option<FrameError>,
    );
    /// Frame, and the bytes written or the error.
    type EncodeCase = (&'static [u8], Result<&'static [u8], FrameError>);

    fn decode_all(framer: JsonLines, input: &[u8]) -> (Vec<Bytes>, Option<FrameError>) {
        decode_pieces(framer, [input])
    }

    #[test]
    fn empty_input_is_no_frame() {
        let mut framer = JsonLines::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        assert_eq!(framer.decode(&mut buf), Ok(None));
        assert_eq!(framer.decode_eof(&mut buf), Ok(None));
    }

    #[test]
    fn decodes_table() {
        let cases: &[DecodeCase] = &[
            ("one line", b"{}\n", &["{}"], None),
            ("crlf", b"{\"a\":1}\r\n[2]\r\n", &["{\"a\":1}", "[2]"], None),
            ("only one cr stripped", b"1\r\r\n", &["1\r"], None),
            (
                "blank lines",
                b"\n\r\n  \t\r\n1\n\n \n2\n",
                &["1", "2"],
                None,
            ),
            ("inner whitespace kept", b" {} \n", &[" {} "], None),
            ("trailing blank at eof", b"1\n  \r", &["1"], None),
            (
                "scalars",
                b"true\nnull\n\"s\"\n-1.5e3\n",
                &["true", "null", "\"s\"", "-1.5e3"],
                None,
            ),
            (
                "unterminated last line",
                b"1\n{\"id\":",
                &["1"],
                Some(FrameError::Truncated {
                    got: 6,
                    snippet: "{\\\"id\\\":".into(),
                }),
            ),
            (
                "garbage between frames",
                b"1\n\xff\x00garbage\n2\n",
                &["1"],
                Some(FrameError::InvalidJson {
                    reason: "invalid utf-8 at byte 0".into(),
                    snippet: "\\xff\\x00garbage".into(),
                }),
            ),
            (
                "two values on one line",
                b"1 2\n",
                &[],
                Some(FrameError::InvalidJson {
                    reason: "trailing characters at byte 2, found `2`".into(),
                    snippet: "1 2".into(),
                }),
            ),
        ];
        for (name, input, want, err) in cases {
            let got = decode_all(JsonLines::new(FrameLimits::default()), input);
            assert_eq!(got, (frames(want), err.clone()), "{name}");
        }
    }

    #[test]
    fn invalid_json_quotes_escaped_bytes() {
        let err = decode_all(JsonLines::new(FrameLimits::default()), b"{\"a\":\x01}\n").1;
        let Some(FrameError::InvalidJson { reason, snippet }) = err else {
            panic!("expected InvalidJson, got {err:?}");
        };
        assert_eq!(snippet, "{\\\"a\\\":\\x01}");
        assert!(reason.contains("expected value"), "{reason}");
        let long = [b'x'; 300];
        let err = decode_all(
            JsonLines::new(FrameLimits::default()),
            &[&long[..], b"\n"].concat(),
        );
        let Some(FrameError::InvalidJson { snippet, .. }) = err.1 else {
            panic!("expected InvalidJson");
        };
        assert_eq!(snippet, format!("{}...", "x".repeat(200)));
    }

    #[test]
    fn without_validation_passes_any_line() {
        let framer = JsonLines::new(FrameLimits::default()).without_json_validation();
        let got = decode_all(framer, b"not json\n\xff\n\n");
        assert_eq!(
            got,
            (
                vec![Bytes::from_static(b"not json"), Bytes::from_static(b"\xff")],
                None
            )
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let mut line = vec![b'['; 200_000];
        line.push(b'\n');
        let (frames, err) = decode_all(JsonLines::new(FrameLimits::default()), &line);
        assert!(frames.is_empty());
        assert!(
            matches!(err, Some(FrameError::InvalidJson { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn frame_at_limit_accepted_and_one_over_rejected() {
        let at = format!("\"{}\"", "a".repeat(14)); // 16 bytes
        let over = format!("\"{}\"", "a".repeat(15)); // 17 bytes
        for ending in ["\n", "\r\n"] {
            let input = format!("{at}{ending}");
            let got = decode_all(JsonLines::new(limits(16)), input.as_bytes());
            assert_eq!(got, (frames(&[&at]), None), "{ending:?}");
            let input = format!("{over}{ending}");
            let got = decode_all(JsonLines::new(limits(16)), input.as_bytes());
            let err = FrameError::TooLarge { limit: 16, got: 17 };
            assert_eq!(got, (vec![], Some(err)), "{ending:?}");
        }
        // The unterminated prefix is rejected before any newline arrives...
        let mut framer = JsonLines::new(limits(16));
        let mut buf = BytesMut::from(over.as_bytes());
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge { limit: 16, got: 17 })
        );
        // ...but a `\r` at the end might still be half of `\r\n`, so it is not counted.
        let mut framer = JsonLines::new(limits(16));
        let mut buf = BytesMut::from(format!("{at}\r").as_bytes());
        assert_eq!(framer.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"\n");
        assert_eq!(framer.decode(&mut buf), Ok(Some(Bytes::from(at.clone()))));
        // A second `\r` is content: an endless run of `\r` cannot make us buffer forever.
        let mut framer = JsonLines::new(limits(16));
        let mut buf = BytesMut::from(format!("{at}\r").as_bytes());
        assert_eq!(framer.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"\r");
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge { limit: 16, got: 17 })
        );
        // A blank line is still a line: an endless run of spaces may not be buffered.
        let mut framer = JsonLines::new(limits(16));
        let mut buf = BytesMut::from(&[b' '; 17][..]);
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge { limit: 16, got: 17 })
        );
    }

    const STREAM: &[u8] =
        b"{\"jsonrpc\":\"2.0\",\"id\":1}\r\n\n  \n[1,2,{\"a\":null}]\n\"x\\ny\"\r\n7\n";
    const STREAM_FRAMES: &[&str] = &[
        "{\"jsonrpc\":\"2.0\",\"id\":1}",
        "[1,2,{\"a\":null}]",
        "\"x\\ny\"",
        "7",
    ];

    #[test]
    fn split_at_every_offset_gives_the_same_frames() {
        every_split(
            || JsonLines::new(FrameLimits::default()),
            STREAM,
            &frames(STREAM_FRAMES),
        );
    }

    #[test]
    fn one_byte_at_a_time() {
        let pieces = STREAM.chunks(1);
        let got = decode_pieces(JsonLines::new(FrameLimits::default()), pieces);
        assert_eq!(got, (frames(STREAM_FRAMES), None));
    }

    #[test]
    fn many_frames_in_one_read() {
        let mut input = Vec::new();
        let mut want = Vec::new();
        for i in 0..1000 {
            let line = format!("{{\"id\":{i}}}");
            input.extend_from_slice(line.as_bytes());
            input.extend_from_slice(if i % 2 == 0 { b"\n" } else { b"\r\n" });
            want.push(Bytes::from(line));
        }
        assert_eq!(
            decode_all(JsonLines::new(FrameLimits::default()), &input),
            (want, None)
        );
    }

    #[test]
    fn eof_mid_frame_is_truncated() {
        let mut framer = JsonLines::new(FrameLimits::default());
        let mut buf = BytesMut::from(&b"{\"id\":1}\n{\"id\":2}"[..]);
        assert_eq!(
            framer.decode_eof(&mut buf),
            Ok(Some(Bytes::from_static(b"{\"id\":1}")))
        );
        let err = FrameError::Truncated {
            got: 8,
            snippet: "{\\\"id\\\":2}".into(),
        };
        assert_eq!(framer.decode_eof(&mut buf), Err(err));
    }

    #[test]
    fn encode_table() {
        let cases: &[EncodeCase] = &[
            (b"{\"a\":1}", Ok(b"{\"a\":1}\n")),
            (b" [] ", Ok(b" [] \n")),
            (
                b"{\"a\":\n1}",
                Err(FrameError::EmbeddedNewline { offset: 5 }),
            ),
            (b"{}\r", Err(FrameError::EmbeddedNewline { offset: 2 })),
            (b"", Err(FrameError::BlankFrame)),
            (b" \t", Err(FrameError::BlankFrame)),
            (
                b"\"0123456789abcdef\"",
                Err(FrameError::TooLarge { limit: 16, got: 18 }),
            ),
        ];
        for (frame, want) in cases {
            let mut dst = BytesMut::new();
            let got = JsonLines::new(limits(16))
                .encode(frame, &mut dst)
                .map(|()| dst.to_vec());
            assert_eq!(
                got,
                want.clone().map(<[u8]>::to_vec),
                "{:?}",
                frame.escape_ascii().to_string()
            );
        }
        let err = JsonLines::new(limits(16)).encode(b"{", &mut BytesMut::new());
        assert!(
            matches!(err, Err(FrameError::InvalidJson { .. })),
            "{err:?}"
        );
        let mut unchecked = JsonLines::new(limits(16)).without_json_validation();
        assert_eq!(unchecked.encode(b"{", &mut BytesMut::new()), Ok(()));
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut encoder = JsonLines::new(FrameLimits::default());
        let mut wire = BytesMut::new();
        for frame in STREAM_FRAMES {
            encoder
                .encode(frame.as_bytes(), &mut wire)
                .expect("encodes");
        }
        assert_eq!(
            decode_all(JsonLines::new(FrameLimits::default()), &wire),
            (frames(STREAM_FRAMES), None)
        );
    }

    #[test]
    fn a_long_line_in_small_reads_is_searched_once() {
        let line = format!("\"{}\"", "a".repeat((1 << 20) - 2));
        let mut framer = JsonLines::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        for piece in line.as_bytes().chunks(4096) {
            buf.extend_from_slice(piece);
            assert_eq!(framer.decode(&mut buf), Ok(None));
            assert_eq!(framer.scanned, buf.len());
        }
        buf.extend_from_slice(b"\r\n");
        assert_eq!(
            framer.decode(&mut buf).expect("valid").map(|f| f.len()),
            Some(1 << 20)
        );
        assert_eq!(
            framer.examined,
            (1 << 20) + 2,
            "every byte up to the newline searched once"
        );
        assert!(buf.is_empty());
    }
}
