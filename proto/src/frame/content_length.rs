//! The LSP base protocol: `Content-Length` headers, a blank line, then the body.

use std::fmt::Write as _;

use bytes::{Buf, Bytes, BytesMut};

use super::{FrameError, FrameLimits, Framer, escape_snippet};

/// How many input bytes an error message quotes.
const SNIPPET_BYTES: usize = 200;

/// The LSP base protocol: a header block, a blank line, then `Content-Length` bytes of body.
///
/// ```text
/// Content-Length: 17\r\n
/// Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n
/// \r\n
/// {"jsonrpc":"2.0"}
/// ```
///
/// Decoding:
/// - header names are case-insensitive, in any order; unknown headers are ignored;
/// - `Content-Length` is required and must be plain decimal digits (no sign, no spaces inside);
///   it may repeat only with the same value;
/// - a `Content-Type` `charset` parameter, if present, must be `utf-8` or `utf8` (any case,
///   optionally quoted);
/// - a header line ends at `\n`, and one `\r` before it is stripped. The specification says
///   `\r\n`, and that is what [`ContentLength::encode`] writes, but some servers write bare
///   `\n`; accepting both costs nothing and is never ambiguous, because a header line cannot
///   contain `\n`. So the block ends at the first empty line: `\r\n\r\n`, `\n\n` or a mix;
/// - the header block, blank line included, is at most `max_header_bytes`, checked while it
///   arrives; `Content-Length` is checked against `max_frame_bytes` before the body is awaited
///   or any room is reserved for it;
/// - at end of stream, any partial header block or body is [`FrameError::Truncated`].
///
/// Headers are parsed once: their bytes are consumed as soon as the block is complete, and the
/// framer then waits for the body length it remembered.
#[derive(Debug, Clone)]
pub struct ContentLength {
    limits: FrameLimits,
    state: State,
    /// The header block of the last frame decoded, as it was on the wire.
    headers: Vec<u8>,
    /// Bytes handed to the newline search, to prove in tests that each byte is searched once.
    #[cfg(test)]
    examined: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Looking for the end of the header block.
    Headers {
        /// Bytes at the front of the buffer already searched for `\n`.
        scanned: usize,
        /// Where the header line being scanned starts.
        line_start: usize,
    },
    /// The header block (`header_len` bytes, already consumed) announced `body_len` bytes.
    Body { header_len: usize, body_len: usize },
}

const START: State = State::Headers {
    scanned: 0,
    line_start: 0,
};

impl ContentLength {
    /// An LSP base-protocol framer with these limits.
    pub fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            state: START,
            headers: Vec::new(),
            #[cfg(test)]
            examined: 0,
        }
    }

    /// The header block of the frame `decode` returned last, exactly as it arrived (every
    /// header, the blank line included): what a proxy forwards so that headers besides
    /// `Content-Length` (`Content-Type`) reach the other side unchanged. Its length was
    /// checked against `max_header_bytes`.
    pub fn last_headers(&self) -> &[u8] {
        &self.headers
    }

    /// Search for the blank line that ends the header block; its length once found.
    fn find_header_end(&mut self, src: &[u8]) -> Result<Option<usize>, FrameError> {
        let State::Headers {
            mut scanned,
            mut line_start,
        } = self.state
        else {
            return Ok(None);
        };
        let limit = self.limits.max_header_bytes;
        // Only the first `max_header_bytes` can hold a terminator we would accept.
        let window = &src[..src.len().min(limit)];
        if scanned > window.len() || line_start > scanned {
            (scanned, line_start) = (0, 0); // `src` was consumed by someone else: start over
        }
        let from = scanned;
        for found in memchr::memchr_iter(b'\n', &window[from..]) {
            let newline = from + found;
            let line = &window[line_start..newline];
            if line.is_empty() || line == b"\r" {
                #[cfg(test)]
                {
                    self.examined += newline + 1 - from;
                }
                self.state = START;
                return Ok(Some(newline + 1));
            }
            line_start = newline + 1;
        }
        #[cfg(test)]
        {
            self.examined += window.len() - from;
        }
        if src.len() >= limit {
            // Even if the next byte ended the block, it would be longer than the limit.
            return Err(FrameError::HeaderTooLarge { limit });
        }
        self.state = State::Headers {
            scanned: window.len(),
            line_start,
        };
        Ok(None)
    }

    /// Parse a complete header block (blank line included) into the body length.
    fn parse_headers(&self, block: &[u8]) -> Result<usize, FrameError> {
        let mut length: Option<usize> = None;
        for line in block.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue; // only the terminating blank line (and the empty rest after it)
            }
            let bad = || FrameError::BadHeader {
                snippet: escape_snippet(line, SNIPPET_BYTES),
            };
            let Some(colon) = memchr::memchr(b':', line) else {
                return Err(bad());
            };
            let (name, value) = (line[..colon].trim_ascii(), line[colon + 1..].trim_ascii());
            if name.is_empty() {
                return Err(bad());
            }
            if name.eq_ignore_ascii_case(b"content-length") {
                let value = parse_decimal(value).ok_or_else(bad)?;
                if length.is_some_and(|earlier| earlier != value) {
                    return Err(bad());
                }
                length = Some(value);
            } else if name.eq_ignore_ascii_case(b"content-type") {
                check_charset(value)?;
            }
        }
        let length = length.ok_or(FrameError::MissingContentLength)?;
        if length > self.limits.max_frame_bytes {
            return Err(FrameError::TooLarge {
                limit: self.limits.max_frame_bytes,
                got: length,
            });
        }
        Ok(length)
    }
}

/// Plain decimal digits; values beyond `usize` saturate (and then fail the size limit).
fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0usize, |acc, &d| {
        acc.saturating_mul(10).saturating_add(usize::from(d - b'0'))
    }))
}

/// Reject a `Content-Type` whose `charset` parameter is not UTF-8.
fn check_charset(content_type: &[u8]) -> Result<(), FrameError> {
    // The media type comes first, then `; name=value` parameters.
    for param in content_type.split(|&b| b == b';').skip(1) {
        let Some(eq) = memchr::memchr(b'=', param) else {
            continue;
        };
        if !param[..eq].trim_ascii().eq_ignore_ascii_case(b"charset") {
            continue;
        }
        let value = param[eq + 1..].trim_ascii();
        let unquoted = value
            .strip_prefix(b"\"")
            .and_then(|v| v.strip_suffix(b"\""))
            .unwrap_or(value);
        if !(unquoted.eq_ignore_ascii_case(b"utf-8") || unquoted.eq_ignore_ascii_case(b"utf8")) {
            return Err(FrameError::UnsupportedCharset {
                charset: escape_snippet(unquoted, 64),
            });
        }
    }
    Ok(())
}

impl Framer for ContentLength {
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if let State::Headers { .. } = self.state {
            let Some(header_len) = self.find_header_end(src)? else {
                return Ok(None);
            };
            let body_len = self.parse_headers(&src[..header_len])?;
            self.headers.clear();
            self.headers.extend_from_slice(&src[..header_len]);
            src.advance(header_len);
            self.state = State::Body {
                header_len,
                body_len,
            };
        }
        let State::Body { body_len, .. } = self.state else {
            return Ok(None);
        };
        if src.len() < body_len {
            // The length is within `max_frame_bytes`, so making room for it now is safe.
            src.reserve(body_len - src.len());
            return Ok(None);
        }
        self.state = START;
        Ok(Some(src.split_to(body_len).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        let got = match self.state {
            State::Headers { .. } if src.is_empty() => return Ok(None),
            State::Headers { .. } => src.len(),
            State::Body { header_len, .. } => header_len.saturating_add(src.len()),
        };
        Err(FrameError::Truncated {
            got,
            snippet: escape_snippet(src, SNIPPET_BYTES),
        })
    }

    fn encode(&mut self, frame: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        self.encode_head(frame, dst)?;
        dst.extend_from_slice(frame);
        Ok(())
    }
}

impl ContentLength {
    /// [`Framer::encode`] without the frame: check `frame`, append what goes before it to
    /// `dst` (the header block), and return what goes after it (nothing).
    pub fn encode_head(
        &mut self,
        frame: &[u8],
        dst: &mut BytesMut,
    ) -> Result<&'static [u8], FrameError> {
        if frame.len() > self.limits.max_frame_bytes {
            return Err(FrameError::TooLarge {
                limit: self.limits.max_frame_bytes,
                got: frame.len(),
            });
        }
        let mut header = String::with_capacity(40);
        // Writing to a String cannot fail.
        let _ = write!(header, "Content-Length: {}\r\n\r\n", frame.len());
        // A reader with the same limits must accept what we write.
        if header.len() > self.limits.max_header_bytes {
            return Err(FrameError::HeaderTooLarge {
                limit: self.limits.max_header_bytes,
            });
        }
        dst.extend_from_slice(header.as_bytes());
        Ok(b"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{decode_pieces, every_split};

    fn limits(max_frame_bytes: usize, max_header_bytes: usize) -> FrameLimits {
        FrameLimits {
            max_frame_bytes,
            max_header_bytes,
            ..FrameLimits::default()
        }
    }

    fn decode_all(limits: FrameLimits, input: &[u8]) -> (Vec<Bytes>, Option<FrameError>) {
        decode_pieces(ContentLength::new(limits), [input])
    }

    fn bad(snippet: &str) -> Option<FrameError> {
        Some(FrameError::BadHeader {
            snippet: snippet.into(),
        })
    }

    #[test]
    fn the_header_block_of_each_frame_is_kept_as_it_arrived() {
        let wire = b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}content-length:1\r\n\r\n7";
        let mut framer = ContentLength::new(FrameLimits::default());
        // Split in two places, so the headers of the first frame are read across reads.
        let mut buf = BytesMut::from(&wire[..10]);
        assert_eq!(framer.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&wire[10..]);
        assert_eq!(framer.decode(&mut buf), Ok(Some(Bytes::from_static(b"{}"))));
        assert_eq!(
            framer.last_headers(),
            b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"
        );
        assert_eq!(framer.decode(&mut buf), Ok(Some(Bytes::from_static(b"7"))));
        assert_eq!(framer.last_headers(), b"content-length:1\r\n\r\n");
    }

    #[test]
    fn empty_input_is_no_frame() {
        let mut framer = ContentLength::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        assert_eq!(framer.decode(&mut buf), Ok(None));
        assert_eq!(framer.decode_eof(&mut buf), Ok(None));
    }

    #[test]
    fn header_table() {
        let cases: &[(&str, &str, Option<FrameError>)] = &[
            ("minimal", "Content-Length: 2\r\n\r\n{}", None),
            ("no space", "Content-Length:2\r\n\r\n{}", None),
            ("lower case", "content-length: 2\r\n\r\n{}", None),
            ("upper case", "CONTENT-LENGTH: 2\r\n\r\n{}", None),
            ("padded value", "Content-Length: \t2 \r\n\r\n{}", None),
            ("leading zeros", "Content-Length: 002\r\n\r\n{}", None),
            (
                "type first",
                "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
                None,
            ),
            (
                "type after",
                "Content-Length: 2\r\nContent-Type: application/json\r\n\r\n{}",
                None,
            ),
            (
                "charset utf8",
                "Content-Type: a/b; charset=utf8\r\nContent-Length: 2\r\n\r\n{}",
                None,
            ),
            (
                "charset UTF-8 quoted",
                "Content-Length: 2\r\nContent-Type: a/b;charset=\"UTF-8\"\r\n\r\n{}",
                None,
            ),
            (
                "other params",
                "Content-Length: 2\r\nContent-Type: a/b; q=1; Charset = utf-8 ; x\r\n\r\n{}",
                None,
            ),
            (
                "extra headers",
                "X-Trace: 1\r\nContent-Length: 2\r\nX-Other: a:b\r\n\r\n{}",
                None,
            ),
            (
                "equal duplicates",
                "Content-Length: 2\r\ncontent-length: 02\r\n\r\n{}",
                None,
            ),
            (
                "bare newlines",
                "Content-Length: 2\nContent-Type: a/b\n\n{}",
                None,
            ),
            ("mixed newlines", "Content-Length: 2\n\r\n{}", None),
            (
                "latin1",
                "Content-Length: 2\r\nContent-Type: text/plain; charset=latin1\r\n\r\n{}",
                Some(FrameError::UnsupportedCharset {
                    charset: "latin1".into(),
                }),
            ),
            (
                "quoted latin1",
                "Content-Type: a/b; charset=\"ISO-8859-1\"\r\nContent-Length: 2\r\n\r\n{}",
                Some(FrameError::UnsupportedCharset {
                    charset: "ISO-8859-1".into(),
                }),
            ),
            (
                "missing length",
                "Content-Type: a/b\r\n\r\n{}",
                Some(FrameError::MissingContentLength),
            ),
            (
                "no headers",
                "\r\n{}",
                Some(FrameError::MissingContentLength),
            ),
            (
                "sign",
                "Content-Length: +2\r\n\r\n{}",
                bad("Content-Length: +2"),
            ),
            (
                "negative",
                "Content-Length: -2\r\n\r\n{}",
                bad("Content-Length: -2"),
            ),
            (
                "hex",
                "Content-Length: 0x2\r\n\r\n{}",
                bad("Content-Length: 0x2"),
            ),
            (
                "inner space",
                "Content-Length: 1 2\r\n\r\n{}",
                bad("Content-Length: 1 2"),
            ),
            (
                "empty value",
                "Content-Length:\r\n\r\n{}",
                bad("Content-Length:"),
            ),
            (
                "different duplicates",
                "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                bad("Content-Length: 3"),
            ),
            (
                "no colon",
                "Content-Length 2\r\n\r\n{}",
                bad("Content-Length 2"),
            ),
            (
                "empty name",
                ": 2\r\nContent-Length: 2\r\n\r\n{}",
                bad(": 2"),
            ),
        ];
        for (name, input, err) in cases {
            let got = decode_all(FrameLimits::default(), input.as_bytes());
            let want = if err.is_some() {
                vec![]
            } else {
                vec![Bytes::from_static(b"{}")]
            };
            assert_eq!(got, (want, err.clone()), "{name}");
        }
    }

    #[test]
    fn empty_body_is_a_frame() {
        let got = decode_all(
            FrameLimits::default(),
            b"Content-Length: 0\r\n\r\nContent-Length: 1\r\n\r\nx",
        );
        assert_eq!(got, (vec![Bytes::new(), Bytes::from_static(b"x")], None));
    }

    #[test]
    fn frame_at_limit_accepted_and_one_over_rejected() {
        let at = "Content-Length: 16\r\n\r\n0123456789abcdef";
        assert_eq!(
            decode_all(limits(16, 64), at.as_bytes()),
            (vec![Bytes::from_static(b"0123456789abcdef")], None)
        );
        // Rejected from the header alone, before any body byte arrives.
        let mut framer = ContentLength::new(limits(16, 64));
        let mut buf = BytesMut::from(&b"Content-Length: 17\r\n\r\n"[..]);
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge { limit: 16, got: 17 })
        );
        let mut framer = ContentLength::new(limits(16, 64));
        let mut buf = BytesMut::from(&b"Content-Length: 99999999999999999999999999\r\n\r\n"[..]);
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge {
                limit: 16,
                got: usize::MAX
            })
        );
    }

    #[test]
    fn header_block_at_limit_accepted_and_one_over_rejected() {
        // 19 + 13 + 2 bytes, the blank line included.
        let block = "Content-Length: 1\r\nX-Pad: 1234\r\n\r\n";
        assert_eq!(block.len(), 34);
        let got = decode_all(limits(16, 34), format!("{block}x").as_bytes());
        assert_eq!(got, (vec![Bytes::from_static(b"x")], None));
        let got = decode_all(limits(16, 33), format!("{block}x").as_bytes());
        assert_eq!(
            got,
            (vec![], Some(FrameError::HeaderTooLarge { limit: 33 }))
        );
        // Checked while the block arrives: no terminator yet, but it can no longer fit.
        let mut framer = ContentLength::new(limits(16, 33));
        let mut buf = BytesMut::new();
        for (i, &byte) in block.as_bytes()[..32].iter().enumerate() {
            buf.extend_from_slice(&[byte]);
            assert_eq!(framer.decode(&mut buf), Ok(None), "after {i} bytes");
        }
        buf.extend_from_slice(b"\r");
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::HeaderTooLarge { limit: 33 })
        );
        // An endless header line is cut off at the limit.
        let flood = vec![b'a'; 1 << 20];
        let got = decode_all(FrameLimits::default(), &flood);
        assert_eq!(
            got,
            (vec![], Some(FrameError::HeaderTooLarge { limit: 8 << 10 }))
        );
    }

    fn stream() -> (Vec<u8>, Vec<Bytes>) {
        let input = concat!(
            "Content-Length: 17\r\n\r\n{\"jsonrpc\":\"2.0\"}",
            "content-type: application/vscode-jsonrpc; charset=utf8\r\ncontent-length: 3\r\n\r\n[1]",
            "Content-Length: 0\r\n\r\n",
            "Content-Length: 4\n\n\r\n\r\n",
        );
        let frames = ["{\"jsonrpc\":\"2.0\"}", "[1]", "", "\r\n\r\n"];
        (
            input.as_bytes().to_vec(),
            frames
                .iter()
                .map(|f| Bytes::copy_from_slice(f.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn split_at_every_offset_gives_the_same_frames() {
        let (input, want) = stream();
        every_split(|| ContentLength::new(FrameLimits::default()), &input, &want);
    }

    #[test]
    fn one_byte_at_a_time() {
        let (input, want) = stream();
        let got = decode_pieces(ContentLength::new(FrameLimits::default()), input.chunks(1));
        assert_eq!(got, (want, None));
    }

    #[test]
    fn many_frames_in_one_read() {
        let mut wire = BytesMut::new();
        let mut want = Vec::new();
        let mut encoder = ContentLength::new(FrameLimits::default());
        for i in 0..1000 {
            let body = format!("{{\"id\":{i}}}");
            encoder.encode(body.as_bytes(), &mut wire).expect("encodes");
            want.push(Bytes::from(body));
        }
        assert_eq!(decode_all(FrameLimits::default(), &wire), (want, None));
    }

    #[test]
    fn eof_mid_frame_is_truncated() {
        let cases: &[(&str, &str, FrameError)] = &[
            (
                "mid header",
                "Content-Len",
                FrameError::Truncated {
                    got: 11,
                    snippet: "Content-Len".into(),
                },
            ),
            (
                "before blank line",
                "Content-Length: 2\r\n",
                FrameError::Truncated {
                    got: 19,
                    snippet: "Content-Length: 2\\r\\n".into(),
                },
            ),
            (
                "no body",
                "Content-Length: 2\r\n\r\n",
                FrameError::Truncated {
                    got: 21,
                    snippet: String::new(),
                },
            ),
            (
                "mid body",
                "Content-Length: 2\r\n\r\n{",
                FrameError::Truncated {
                    got: 22,
                    snippet: "{".into(),
                },
            ),
        ];
        for (name, input, err) in cases {
            let (frames, got) = decode_all(FrameLimits::default(), input.as_bytes());
            assert_eq!(got.as_ref(), Some(err), "{name}");
            assert!(frames.len() <= 1, "{name}");
        }
    }

    #[test]
    fn garbage_between_frames() {
        let got = decode_all(
            FrameLimits::default(),
            b"Content-Length: 2\r\n\r\n{}garbage\r\n\r\n",
        );
        assert_eq!(got, (vec![Bytes::from_static(b"{}")], bad("garbage")));
        let got = decode_all(
            FrameLimits::default(),
            b"Content-Length: 2\r\n\r\n{}\x00\xff: 1\r\n\r\n",
        );
        assert_eq!(
            got,
            (
                vec![Bytes::from_static(b"{}")],
                Some(FrameError::MissingContentLength)
            )
        );
        // A stray line break after a body is an empty header block.
        let got = decode_all(FrameLimits::default(), b"Content-Length: 2\r\n\r\n{}\r\n");
        assert_eq!(
            got,
            (
                vec![Bytes::from_static(b"{}")],
                Some(FrameError::MissingContentLength)
            )
        );
    }

    #[test]
    fn encode_writes_header_and_body() {
        let mut dst = BytesMut::new();
        let mut framer = ContentLength::new(limits(16, 64));
        assert_eq!(framer.encode(b"{}", &mut dst), Ok(()));
        assert_eq!(framer.encode(b"", &mut dst), Ok(()));
        assert_eq!(
            &dst[..],
            b"Content-Length: 2\r\n\r\n{}Content-Length: 0\r\n\r\n"
        );
        assert_eq!(
            framer.encode(&[b'x'; 17], &mut dst),
            Err(FrameError::TooLarge { limit: 16, got: 17 })
        );
        let mut tight = ContentLength::new(limits(16, 20));
        assert_eq!(
            tight.encode(b"{}", &mut dst),
            Err(FrameError::HeaderTooLarge { limit: 20 })
        );
    }

    #[test]
    fn encode_decode_round_trip() {
        let (_, frames) = stream();
        let mut encoder = ContentLength::new(FrameLimits::default());
        let mut wire = BytesMut::new();
        for frame in &frames {
            encoder.encode(frame, &mut wire).expect("encodes");
        }
        assert_eq!(decode_all(FrameLimits::default(), &wire), (frames, None));
    }

    #[test]
    fn headers_and_body_in_small_reads_are_scanned_once() {
        let header = format!(
            "X-Pad: {}\r\nContent-Length: {}\r\n\r\n",
            "p".repeat(4000),
            1 << 20
        );
        let mut framer = ContentLength::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        for &byte in header.as_bytes() {
            assert_eq!(framer.decode(&mut buf), Ok(None));
            buf.extend_from_slice(&[byte]);
        }
        assert_eq!(framer.decode(&mut buf), Ok(None));
        assert_eq!(
            framer.state,
            State::Body {
                header_len: header.len(),
                body_len: 1 << 20
            }
        );
        assert!(buf.is_empty(), "header bytes consumed once parsed");
        assert_eq!(
            framer.examined,
            header.len(),
            "every header byte searched once"
        );
        for _ in 0..256 {
            buf.extend_from_slice(&[b'b'; 4096]);
            let frame = framer.decode(&mut buf).expect("valid");
            assert_eq!(frame.is_some(), buf.is_empty());
        }
        assert_eq!(framer.examined, header.len(), "the body is never searched");
        assert_eq!(framer.state, START);
    }
}
