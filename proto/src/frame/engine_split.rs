//! The engine side of `sandpipe run --framing F`, without the IO: what the engine writes is
//! split into frames (so they can be recorded, tracked and capped by `--max-frame`) and passed
//! on to the plugin, never judged.
//!
//! - A JSON Lines line is not parsed as JSON: validation is the plugin's business, which
//!   answers a malformed line itself, as it would without sandpipe.
//! - A CBOR or `Content-Length` stream that loses its framing (a header or an item head that
//!   does not parse, or a stream that ends inside a frame) is passed on as bytes from there on:
//!   one [`Piece::LostFraming`] says so, then [`Piece::Raw`] carries the rest.
//! - Only a frame over the cap ends the input ([`Piece::TooLarge`], after which nothing more
//!   comes), like EOF: the plugin still answers what came before.
//!
//! What the plugin gets is the engine's stream byte for byte: each [`Piece::Frame`] carries
//! its `wire` bytes as they arrived (a JSON Lines `\r\n`, a blank line, `Content-Length`
//! headers in the engine's spelling), and [`Piece::Raw`] the bytes between or after frames. The
//! `engine_split` fuzz body ([`crate::fuzz::engine_split`]) holds it to that, under any
//! chunking.

use bytes::{Bytes, BytesMut};

use super::{AnyFramer, FrameError, FrameLimits, Framer, Framing, escape_snippet};

/// One step of the split: see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// A whole frame: its body (what is recorded and tracked) and the bytes it came as, which
    /// are what the plugin gets.
    Frame {
        /// The frame's body: a line without its ending, a CBOR item, a `Content-Length` body.
        frame: Bytes,
        /// The frame as it arrived: with its line ending, or its header block.
        wire: Bytes,
    },
    /// Bytes that are not a frame, passed on as they are: a blank JSON Lines line, or the rest
    /// of a stream after its framing was lost.
    Raw(Bytes),
    /// The framing was lost here; what is left comes as [`Piece::Raw`].
    LostFraming(FrameError),
    /// A frame over the cap: the input ends here.
    TooLarge(FrameError),
}

#[derive(Debug)]
enum State {
    /// JSON Lines, split here (never parsed): `scanned` bytes of the buffer hold no `\n`.
    Lines { max: usize, scanned: usize },
    /// CBOR items or `Content-Length` frames, split by their framer. `held`: the framer took
    /// a frame's header block off the buffer and holds it (see [`AnyFramer::last_headers`])
    /// until the body is complete.
    Framed { framer: AnyFramer, held: bool },
    /// The framing was lost: bytes pass through.
    Raw,
    /// A frame over the cap ended the input.
    Ended,
}

/// Splits the engine's stream for the plugin: feed it the bytes read so far and take
/// [`Piece`]s until [`next`](Self::next) returns `None`.
#[derive(Debug)]
pub struct EngineSplitter {
    state: State,
}

impl EngineSplitter {
    /// A splitter for `framing`, capping frames at `limits`.
    pub fn new(framing: Framing, limits: FrameLimits) -> Self {
        let state = match framing {
            Framing::JsonLines => State::Lines {
                max: limits.max_frame_bytes,
                scanned: 0,
            },
            other => State::Framed {
                framer: other.splitter(limits),
                held: false,
            },
        };
        Self { state }
    }

    /// The next piece from the front of `buf` (`eof`: nothing more will be appended), or `None`
    /// when more bytes are needed (or, at EOF, when all was taken).
    pub fn next(&mut self, buf: &mut BytesMut, eof: bool) -> Option<Piece> {
        let piece = match &mut self.state {
            State::Ended => return None,
            State::Raw => return (!buf.is_empty()).then(|| Piece::Raw(buf.split().freeze())),
            State::Lines { max, scanned } => next_line(*max, scanned, buf, eof)?,
            State::Framed { framer, held } => {
                let before = buf.len();
                let next = if eof {
                    framer.decode_eof(buf)
                } else {
                    framer.decode(buf)
                };
                match next {
                    Ok(Some(frame)) => {
                        *held = false;
                        let wire = match framer.last_headers() {
                            Some(headers) => [headers, &frame[..]].concat().into(),
                            None => frame.clone(),
                        };
                        Piece::Frame { frame, wire }
                    }
                    Ok(None) => {
                        // Only a `Content-Length` header block is ever taken without a frame.
                        *held |= buf.len() < before;
                        return None;
                    }
                    Err(e) => {
                        // The bytes the framer holds go back in front of the rest, which is
                        // passed on as it is.
                        if *held && let Some(headers) = framer.last_headers() {
                            let mut whole = BytesMut::with_capacity(headers.len() + buf.len());
                            whole.extend_from_slice(headers);
                            whole.extend_from_slice(buf);
                            *buf = whole;
                        }
                        match e {
                            FrameError::TooLarge { .. } => Piece::TooLarge(e),
                            _ => Piece::LostFraming(e),
                        }
                    }
                }
            }
        };
        match &piece {
            Piece::TooLarge(_) => self.state = State::Ended,
            Piece::LostFraming(_) => self.state = State::Raw,
            Piece::Frame { .. } | Piece::Raw(_) => {}
        }
        Some(piece)
    }
}

/// The next JSON Lines piece, as [`super::JsonLines`] would split it (the same cap, `\r\n` and
/// blank lines), but keeping the bytes it drops.
fn next_line(max: usize, scanned: &mut usize, buf: &mut BytesMut, eof: bool) -> Option<Piece> {
    let start = (*scanned).min(buf.len());
    let Some(found) = memchr::memchr(b'\n', &buf[start..]) else {
        *scanned = buf.len();
        // A trailing `\r` may be half of a `\r\n`, so it does not count yet.
        let len = strip_cr(buf);
        if len > max {
            return Some(Piece::TooLarge(FrameError::TooLarge {
                limit: max,
                got: len,
            }));
        }
        if !eof || buf.is_empty() {
            return None;
        }
        *scanned = 0;
        if is_blank(buf) {
            return Some(Piece::Raw(buf.split().freeze()));
        }
        return Some(Piece::LostFraming(FrameError::Truncated {
            got: buf.len(),
            snippet: escape_snippet(buf, 200),
        }));
    };
    let newline = start + found;
    *scanned = 0;
    let len = strip_cr(&buf[..newline]);
    if len > max {
        return Some(Piece::TooLarge(FrameError::TooLarge {
            limit: max,
            got: len,
        }));
    }
    let wire = buf.split_to(newline + 1).freeze();
    if is_blank(&wire[..len]) {
        return Some(Piece::Raw(wire));
    }
    Some(Piece::Frame {
        frame: wire.slice(..len),
        wire,
    })
}

/// The length of `line` (which holds no `\n`) without one trailing `\r`.
fn strip_cr(line: &[u8]) -> usize {
    line.len() - usize::from(line.last() == Some(&b'\r'))
}

/// Blank means JSON whitespace only.
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| matches!(b, b' ' | b'\t' | b'\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(framing: Framing, limits: FrameLimits, input: &[u8]) -> Vec<Piece> {
        let mut s = EngineSplitter::new(framing, limits);
        let mut buf = BytesMut::from(input);
        std::iter::from_fn(|| s.next(&mut buf, true)).collect()
    }

    #[test]
    fn a_lines_stream_is_split_and_never_parsed() {
        let pieces = split_all(
            Framing::JsonLines,
            FrameLimits::default(),
            b"{\"a\":1}\r\n\nnot json\nlast",
        );
        let frame = |f: &'static [u8], w: &'static [u8]| Piece::Frame {
            frame: Bytes::from_static(f),
            wire: Bytes::from_static(w),
        };
        assert_eq!(
            pieces[..3],
            [
                frame(b"{\"a\":1}", b"{\"a\":1}\r\n"),
                Piece::Raw(Bytes::from_static(b"\n")),
                frame(b"not json", b"not json\n"),
            ]
        );
        // A last line without `\n` is passed on as it is.
        assert!(matches!(
            pieces[3],
            Piece::LostFraming(FrameError::Truncated { got: 4, .. })
        ));
        assert_eq!(pieces[4], Piece::Raw(Bytes::from_static(b"last")));
        assert_eq!(pieces.len(), 5);
    }

    #[test]
    fn a_cbor_stream_that_loses_its_framing_goes_on_as_bytes() {
        // One item (0x01), then a reserved head byte (0x1c), then more.
        let pieces = split_all(
            Framing::CborSeq,
            FrameLimits::default(),
            b"\x01\x1c\x02\x03",
        );
        assert!(matches!(&pieces[0], Piece::Frame { frame, .. } if &frame[..] == b"\x01"));
        assert!(matches!(pieces[1], Piece::LostFraming(_)));
        assert_eq!(pieces[2], Piece::Raw(Bytes::from_static(b"\x1c\x02\x03")));
        assert_eq!(pieces.len(), 3);
    }

    #[test]
    fn a_frame_over_the_cap_ends_the_input() {
        let limits = FrameLimits {
            max_frame_bytes: 4,
            ..FrameLimits::default()
        };
        let pieces = split_all(Framing::JsonLines, limits, b"ok\ntoo long\nnever\n");
        assert!(matches!(&pieces[0], Piece::Frame { frame, .. } if &frame[..] == b"ok"));
        assert!(matches!(pieces[1], Piece::TooLarge(_)));
        assert_eq!(pieces.len(), 2);
    }

    #[test]
    fn a_content_length_body_cut_by_eof_goes_on_with_its_headers() {
        let mut s = EngineSplitter::new(Framing::ContentLength, FrameLimits::default());
        let mut buf = BytesMut::from(&b"Content-Length: 9\r\n\r\n{\"a\""[..]);
        assert_eq!(s.next(&mut buf, false), None);
        assert!(matches!(
            s.next(&mut buf, true),
            Some(Piece::LostFraming(_))
        ));
        assert_eq!(
            s.next(&mut buf, true),
            Some(Piece::Raw(Bytes::from_static(
                b"Content-Length: 9\r\n\r\n{\"a\""
            )))
        );
        assert_eq!(s.next(&mut buf, true), None);
    }

    #[test]
    fn content_length_frames_keep_the_engines_headers() {
        let wire = b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}";
        let pieces = split_all(Framing::ContentLength, FrameLimits::default(), wire);
        assert!(
            matches!(&pieces[..], [Piece::Frame { frame, wire: w }] if &frame[..] == b"{}" && w[..] == wire[..])
        );
    }
}
