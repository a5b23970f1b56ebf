//! The three framers: [`JsonLines`], [`CborSeq`] and [`ContentLength`].
//!
//! All follow the tokio-util codec contract:
//! - `decode` returns `Ok(Some(frame))` and removes the frame's bytes (and its delimiters) from
//!   the front of `src`; `Ok(None)` when more bytes are needed (nothing is consumed that would be
//!   needed later, but scan state is kept so a frame arriving in pieces is scanned once: linear,
//!   not quadratic); `Err` when the stream is corrupt. After an `Err` the stream is done.
//! - `decode_eof` is called once the peer has closed: it returns the last complete frame, or
//!   `Ok(None)` when `src` holds nothing but ignorable bytes, or `Err(FrameError::Truncated)`
//!   when a frame was cut off.
//! - `encode` validates one frame and appends it, with its framing, to `dst`.
//! - Every length read from the stream is checked against [`FrameLimits`] before anything is
//!   allocated for it.

mod cbor_seq;
#[cfg(test)]
mod cbor_seq_reference;
mod content_length;
mod engine_split;
mod error;
pub(crate) mod json_check;
mod json_lines;

pub use bytes::{Bytes, BytesMut};
pub use cbor_seq::CborSeq;
pub use content_length::ContentLength;
pub use engine_split::{EngineSplitter, Piece};
pub use error::FrameError;
pub use json_lines::JsonLines;

/// Limits applied by every framer. Defaults:
/// - `max_frame_bytes`: 16 MiB (real plugins send 1–2 MiB frames);
/// - `max_header_bytes`: 8 KiB (the whole header block of a `Content-Length` frame);
/// - `max_depth`: 128 (CBOR nesting of arrays, maps and tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameLimits {
    /// Largest frame payload accepted, in bytes (not counting delimiters or headers).
    pub max_frame_bytes: usize,
    /// Largest `Content-Length` header block, in bytes.
    pub max_header_bytes: usize,
    /// Deepest CBOR nesting accepted.
    pub max_depth: usize,
}

impl FrameLimits {
    /// Default limits with a different `max_frame_bytes`.
    pub fn with_max_frame_bytes(max_frame_bytes: usize) -> Self {
        Self {
            max_frame_bytes,
            ..Self::default()
        }
    }
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 16 << 20,
            max_header_bytes: 8 << 10,
            max_depth: 128,
        }
    }
}

/// The framing of a byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Framing {
    /// One JSON value per line (`\n` or `\r\n`); blank lines are skipped.
    JsonLines,
    /// CBOR items back to back (RFC 8742).
    CborSeq,
    /// LSP base protocol: `Content-Length` headers, a blank line, then the body.
    ContentLength,
}

impl Framing {
    /// A fresh framer for this framing.
    pub fn framer(self, limits: FrameLimits) -> AnyFramer {
        match self {
            Framing::JsonLines => AnyFramer::JsonLines(JsonLines::new(limits)),
            Framing::CborSeq => AnyFramer::CborSeq(CborSeq::new(limits)),
            Framing::ContentLength => AnyFramer::ContentLength(ContentLength::new(limits)),
        }
    }

    /// A framer for the sending side of a stream: the same limits and framing checks as
    /// [`Framing::framer`] (size; for JSON Lines no newline, no trailing `\r`, not blank; for
    /// CBOR exactly one item), but a JSON Lines frame is not parsed as JSON. The receiver
    /// validates every frame it reads, so checking the JSON on both sides of a hop only
    /// doubles the work; sandpipe's host and guest SDK both send with this.
    pub fn sender(self, limits: FrameLimits) -> AnyFramer {
        match self {
            Framing::JsonLines => {
                AnyFramer::JsonLines(JsonLines::new(limits).without_json_validation())
            }
            other => other.framer(limits),
        }
    }

    /// A decoder for a stream sandpipe forwards without judging it (what an engine writes to a
    /// plugin): it finds frame boundaries and enforces `max_frame_bytes`, and nothing more a
    /// boundary does not need. A JSON Lines line is not parsed as JSON; CBOR items and
    /// `Content-Length` headers must still parse to be split, so a caller that gets any error
    /// other than [`FrameError::TooLarge`] has lost the framing and passes the rest on as bytes.
    pub fn splitter(self, limits: FrameLimits) -> AnyFramer {
        self.sender(limits)
    }

    /// The name used on the command line and in transcripts.
    pub fn name(self) -> &'static str {
        match self {
            Framing::JsonLines => "lines",
            Framing::CborSeq => "cbor",
            Framing::ContentLength => "content-length",
        }
    }
}

impl std::str::FromStr for Framing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lines" | "jsonl" | "json-lines" => Ok(Framing::JsonLines),
            "cbor" | "cbor-seq" => Ok(Framing::CborSeq),
            "content-length" | "lsp" => Ok(Framing::ContentLength),
            other => Err(format!(
                "unknown framing {other:?} (expected lines, cbor or content-length)"
            )),
        }
    }
}

/// A sans-IO frame decoder and encoder. See the module docs for the contract.
pub trait Framer {
    /// Take the next complete frame from the front of `src`.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError>;

    /// Like [`Framer::decode`], after the peer closed the stream: leftover bytes that do not
    /// form a frame are an error ([`FrameError::Truncated`]), except ignorable ones (blank
    /// lines for [`JsonLines`]).
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError>;

    /// Check that `frame` is one valid frame and append it, framed, to `dst`.
    fn encode(&mut self, frame: &[u8], dst: &mut BytesMut) -> Result<(), FrameError>;
}

/// Any of the three framers, chosen at run time without a `Box<dyn Framer>`.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyFramer {
    /// See [`JsonLines`].
    JsonLines(JsonLines),
    /// See [`CborSeq`].
    CborSeq(CborSeq),
    /// See [`ContentLength`].
    ContentLength(ContentLength),
}

impl AnyFramer {
    /// For `Content-Length` framing, the header block of the frame decoded last, as it arrived
    /// (see [`ContentLength::last_headers`]); `None` for the other framings.
    pub fn last_headers(&self) -> Option<&[u8]> {
        match self {
            AnyFramer::ContentLength(f) => Some(f.last_headers()),
            _ => None,
        }
    }
}

impl AnyFramer {
    /// [`Framer::encode`] without the frame itself: check `frame`, append what goes before it
    /// to `dst` (a `Content-Length` header block) and return what goes after it (a JSON Lines
    /// newline), so a writer can send a large frame from where it lies instead of copying it.
    pub fn encode_head(
        &mut self,
        frame: &[u8],
        dst: &mut BytesMut,
    ) -> Result<&'static [u8], FrameError> {
        match self {
            AnyFramer::JsonLines(f) => f.encode_head(frame, dst),
            AnyFramer::CborSeq(f) => f.check_frame(frame).map(|()| &b""[..]),
            AnyFramer::ContentLength(f) => f.encode_head(frame, dst),
        }
    }
}

impl Framer for AnyFramer {
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self {
            AnyFramer::JsonLines(f) => f.decode(src),
            AnyFramer::CborSeq(f) => f.decode(src),
            AnyFramer::ContentLength(f) => f.decode(src),
        }
    }
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self {
            AnyFramer::JsonLines(f) => f.decode_eof(src),
            AnyFramer::CborSeq(f) => f.decode_eof(src),
            AnyFramer::ContentLength(f) => f.decode_eof(src),
        }
    }
    fn encode(&mut self, frame: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            AnyFramer::JsonLines(f) => f.encode(frame, dst),
            AnyFramer::CborSeq(f) => f.encode(frame, dst),
            AnyFramer::ContentLength(f) => f.encode(frame, dst),
        }
    }
}

/// Bytes rendered for an error message: printable ASCII kept, everything else escaped,
/// cut to `max` input bytes with a trailing `...` when longer.
pub fn escape_snippet(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len().min(max);
    let mut s = bytes[..cut].escape_ascii().to_string();
    if bytes.len() > max {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_head_and_tail_around_the_frame_are_encode() {
        let limits = FrameLimits::with_max_frame_bytes(64);
        let cases: [(Framing, &[u8]); 3] = [
            (Framing::JsonLines, br#"{"id":1}"#),
            (Framing::CborSeq, &[0x82, 0x01, 0x02]),
            (Framing::ContentLength, br#"{"id":1}"#),
        ];
        for (framing, frame) in cases {
            let mut whole = BytesMut::new();
            framing
                .sender(limits)
                .encode(frame, &mut whole)
                .expect("encodes");
            let mut parts = BytesMut::new();
            let tail = framing
                .sender(limits)
                .encode_head(frame, &mut parts)
                .expect("encodes");
            parts.extend_from_slice(frame);
            parts.extend_from_slice(tail);
            assert_eq!(parts, whole, "{framing:?}");
            // The checks are encode's: a frame over the limit, and for CBOR two items.
            let mut dst = BytesMut::new();
            assert!(
                framing
                    .sender(limits)
                    .encode_head(&[b'1'; 65], &mut dst)
                    .is_err()
            );
        }
        let mut dst = BytesMut::new();
        assert!(
            Framing::CborSeq
                .sender(limits)
                .encode_head(&[1, 2], &mut dst)
                .is_err()
        );
        assert!(
            Framing::JsonLines
                .sender(limits)
                .encode_head(b"a\nb", &mut dst)
                .is_err()
        );
    }

    #[test]
    fn a_sender_checks_framing_but_does_not_parse_json() {
        let limits = FrameLimits::with_max_frame_bytes(16);
        let mut out = BytesMut::new();
        let mut lines = Framing::JsonLines.sender(limits);
        lines
            .encode(b"not json", &mut out)
            .expect("framing is fine: the receiver judges the JSON");
        assert_eq!(&out[..], b"not json\n");
        assert!(matches!(
            lines.encode(b"a\nb", &mut out),
            Err(FrameError::EmbeddedNewline { .. })
        ));
        assert!(matches!(
            lines.encode(b" \t", &mut out),
            Err(FrameError::BlankFrame)
        ));
        assert!(matches!(
            lines.encode(&[b'1'; 17], &mut out),
            Err(FrameError::TooLarge { .. })
        ));
        // The receiving framer still validates.
        let mut reader = Framing::JsonLines.framer(limits);
        let mut wire = BytesMut::from(&b"not json\n"[..]);
        assert!(matches!(
            reader.decode(&mut wire),
            Err(FrameError::InvalidJson { .. })
        ));
        // Other framings send with their usual checks: CBOR wants exactly one item.
        let mut cbor = Framing::CborSeq.sender(limits);
        assert!(cbor.encode(&[0x01, 0x02], &mut out).is_err());
        assert!(cbor.encode(&[0x01], &mut out).is_ok());
    }
}
