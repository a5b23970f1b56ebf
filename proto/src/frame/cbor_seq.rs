//! CBOR sequences (RFC 8742): CBOR items back to back, no delimiter.

use bytes::{Bytes, BytesMut};

use super::{FrameError, FrameLimits, Framer, escape_snippet};

/// How many input bytes an error message quotes.
const SNIPPET_BYTES: usize = 200;

/// CBOR items back to back (RFC 8742); each item is one frame.
///
/// The framer only finds item boundaries: it walks the CBOR headers of RFC 8949 and skips
/// string payloads unread. It does not check UTF-8 in text strings, tag semantics, duplicate map
/// keys or canonical encoding. It does reject what makes a boundary ambiguous:
/// - additional information 28–30 (reserved);
/// - indefinite length on integers, tags, and simple values other than the break byte;
/// - a break outside an indefinite-length array, map or string, or after a map key;
/// - an indefinite-length string chunk that is not a definite string of the same major type;
/// - a two-byte simple value below 32 (not well-formed per RFC 8949 §3.3).
///
/// Limits, checked from the headers before waiting for (or buffering) the bytes they announce:
/// - the whole item, headers and payloads, is at most `max_frame_bytes`; an array or map of `n`
///   entries needs at least `n` more bytes, so a huge count fails at once;
/// - arrays, maps and tags nest at most `max_depth` deep.
///
/// `InvalidCbor { offset }` counts from the first byte of the item being decoded (for `encode`,
/// from the start of the frame).
///
/// The walk is resumable: a header split across reads is read again once complete (at most 9
/// bytes), nothing else is ever looked at twice, and the open containers are an explicit stack
/// of at most `max_depth` entries, so nesting never recurses.
///
/// Speed: on dense frames (the round-trip bench's maps of three small values, a header every
/// 2.8 bytes; `cbor/rpc-*` in `proto/benches/framers.rs`) the scan runs at 0.65-0.85 GB/s on
/// a loaded 2-vCPU VM: about 7 instructions a byte (19 a header) and 0.05 mispredicted
/// branches a byte (valgrind). What bounds it is the chain from one header to the next: the
/// next header's position is this one's plus a length looked up from this one's byte, two
/// dependent loads and an add per header, whatever the instruction count (string payloads
/// cost nothing per byte). Going faster needs that chain broken, e.g. the lengths for every
/// position of a block computed at once with SIMD so that a header costs one load and an add.
#[derive(Debug, Clone)]
pub struct CborSeq {
    limits: FrameLimits,
    scan: Scan,
}

impl CborSeq {
    /// A CBOR sequence framer with these limits.
    pub fn new(limits: FrameLimits) -> Self {
        Self {
            limits,
            scan: Scan::default(),
        }
    }
}

/// A container that is still open at the scan position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// A definite-length array or map, or a tag: items still expected (a map of `n` pairs
    /// holds `2n`; a tag holds exactly one item, so it is `Items { remaining: 1 }`).
    Items { remaining: u64 },
    /// An indefinite-length array: items until a break.
    IndefArray,
    /// An indefinite-length map: key/value pairs until a break; `key_pending` after a key.
    IndefMap { key_pending: bool },
}

/// The resumable walk over one item at the front of the buffer.
#[derive(Debug, Clone, Default)]
struct Scan {
    /// Bytes of the item accounted for: every header read so far, and every string payload
    /// announced so far (which may not have arrived yet).
    pos: usize,
    /// Open arrays, maps and tags, innermost last; never longer than `max_depth`.
    stack: Vec<Open>,
    /// Inside an indefinite-length string of this major type (2 or 3). Chunks cannot nest, so
    /// this is not on the stack and does not count as depth.
    chunks_of: Option<u8>,
    /// The item's last header has been read; only string payload bytes may still be missing.
    walked: bool,
    /// Bytes read by header parsing, to prove in tests that nothing is walked twice.
    #[cfg(test)]
    examined: usize,
}

/// A fully read CBOR header.
struct Head {
    major: u8,
    info: u8,
    /// The argument: a value, a length, a count or a tag number (0 for indefinite length).
    arg: u64,
    /// One past the header's last byte, counted from the start of the item.
    end: usize,
}

fn invalid(offset: usize, reason: &'static str) -> FrameError {
    FrameError::InvalidCbor { offset, reason }
}

/// For each initial byte: the length of the whole item when the byte alone tells it and the
/// item needs no further checks, else 0. That covers integers, floats and one-byte simple
/// values (their argument bytes never matter for a boundary, so they are skipped like a string
/// payload), and strings shorter than 24 bytes. Everything else, including every byte that is
/// an error, goes through [`Scan::step`].
const LEAF_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let major = b >> 5;
        let info = (b & 0x1f) as u8;
        let arg_len = match info {
            0..=23 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => 0,
        };
        table[b] = match (major, info) {
            (0 | 1, 0..=27) => 1 + arg_len,
            (2 | 3, 0..=23) => 1 + info,
            // A two-byte simple value must be checked against 32.
            (7, 0..=23 | 25..=27) => 1 + arg_len,
            _ => 0,
        };
        b += 1;
    }
    table
};

impl Scan {
    /// `base + more`, or `TooLarge` if that exceeds `max_frame_bytes` (or overflows).
    fn need(base: usize, more: u64, limits: &FrameLimits) -> Result<usize, FrameError> {
        let limit = limits.max_frame_bytes;
        let total = u64::try_from(base)
            .ok()
            .and_then(|b| b.checked_add(more))
            .and_then(|t| usize::try_from(t).ok());
        match total {
            Some(total) if total <= limit => Ok(total),
            _ => Err(FrameError::TooLarge {
                limit,
                got: total.unwrap_or(usize::MAX),
            }),
        }
    }

    /// Read the header at `pos`, or `Ok(None)` if it has not fully arrived.
    fn head(&mut self, buf: &[u8], limits: &FrameLimits) -> Result<Option<Head>, FrameError> {
        let at = self.pos;
        let Some(&initial) = buf.get(at) else {
            return Ok(None);
        };
        #[cfg(test)]
        {
            self.examined += 1;
        }
        let major = initial >> 5;
        let info = initial & 0x1f;
        let arg_len: usize = match info {
            0..=23 | 31 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => return Err(invalid(at, "reserved additional information 28-30")),
        };
        let end = Self::need(at, 1 + arg_len as u64, limits)?;
        let Some(arg_bytes) = buf.get(at + 1..end) else {
            return Ok(None);
        };
        #[cfg(test)]
        {
            self.examined += arg_bytes.len();
        }
        let arg = match info {
            0..=23 => u64::from(info),
            31 => 0,
            _ => arg_bytes
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        };
        Ok(Some(Head {
            major,
            info,
            arg,
            end,
        }))
    }

    /// Ready for the next item; keeps the stack's allocation.
    fn reset(&mut self) {
        self.pos = 0;
        self.stack.clear();
        self.chunks_of = None;
        self.walked = false;
    }

    fn push(&mut self, open: Open, limits: &FrameLimits) -> Result<(), FrameError> {
        if self.stack.len() >= limits.max_depth {
            return Err(FrameError::TooDeep {
                limit: limits.max_depth,
            });
        }
        self.stack.push(open);
        Ok(())
    }

    /// An item (scalar, string, or a container just closed) has been fully walked: count it
    /// in its parent, closing every parent it completes.
    fn item_done(&mut self) {
        if self.chunks_of.is_some() {
            return; // a chunk, not an item of the parent
        }
        loop {
            match self.stack.last_mut() {
                None => {
                    self.walked = true;
                    return;
                }
                Some(Open::Items { remaining }) => {
                    *remaining = remaining.saturating_sub(1);
                    if *remaining > 0 {
                        return;
                    }
                }
                Some(Open::IndefArray) => return,
                Some(Open::IndefMap { key_pending }) => {
                    *key_pending = !*key_pending;
                    return;
                }
            }
            self.stack.pop();
        }
    }

    /// Walk the item at the front of `buf` as far as it has arrived: `Ok(Some(len))` once the
    /// whole item, `len` bytes, is in `buf`.
    fn advance(&mut self, buf: &[u8], limits: &FrameLimits) -> Result<Option<usize>, FrameError> {
        loop {
            if self.pos > buf.len() {
                return Ok(None); // a string payload is still arriving
            }
            if self.walked {
                return Ok(Some(self.pos));
            }
            if self.chunks_of.is_none() {
                self.walk_counted(buf, limits);
                if self.pos > buf.len() {
                    return Ok(None);
                }
                if self.walked {
                    return Ok(Some(self.pos));
                }
            }
            if !self.step(buf, limits)? {
                return Ok(None);
            }
        }
    }

    /// The fast walk: while the innermost open level counts its items (a definite-length array
    /// or map, a tag, or the top level, which holds one item), take the common headers with one
    /// table lookup each. The innermost level's count lives in `remaining` and `depth`, not on
    /// the stack, so an item costs no memory traffic; only opening and closing a container
    /// does. It stops, with the stack complete again, at the first header that needs more:
    /// an error, a break, an indefinite length, a long argument, a header that has not fully
    /// arrived, or a limit about to be reached. [`Scan::step`] then takes that header exactly
    /// as if there were no fast walk, so every error is the same.
    fn walk_counted(&mut self, buf: &[u8], limits: &FrameLimits) {
        let limit = limits.max_frame_bytes;
        // Levels open, counting the innermost one held in `remaining`; 0 means the top level.
        let mut depth = self.stack.len();
        let mut remaining = match self.stack.last() {
            None => 1,
            Some(&Open::Items { remaining }) => {
                self.stack.pop();
                remaining
            }
            Some(Open::IndefArray | Open::IndefMap { .. }) => return,
        };
        let mut pos = self.pos;
        #[cfg(test)]
        let mut examined = 0;
        // `break 'walk` leaves the innermost level open in `remaining`.
        'walk: while let Some(&initial) = buf.get(pos) {
            // A header handed over to `step` is counted there, so `examined` counts only the
            // headers taken here.
            let leaf = usize::from(LEAF_LEN[usize::from(initial)]);
            if leaf != 0 {
                if leaf > limit - pos {
                    break 'walk;
                }
                pos += leaf;
                #[cfg(test)]
                {
                    examined += 1;
                }
            } else {
                let count = u64::from(initial & 0x1f);
                let (items, head) = match initial {
                    // A string with a one-byte length: the commonest longer header.
                    0x58 | 0x78 => {
                        let Some(&len) = buf.get(pos + 1) else {
                            break 'walk;
                        };
                        let len = 2 + usize::from(len);
                        if len > limit - pos {
                            break 'walk;
                        }
                        pos += len;
                        #[cfg(test)]
                        {
                            examined += 2;
                        }
                        (0, 0)
                    }
                    0x80..=0x97 => (count, 1),
                    0xa0..=0xb7 => (2 * count, 1),
                    0xc0..=0xd7 => (1, 1),
                    _ => break 'walk,
                };
                if head != 0 {
                    // Every item takes at least one byte, so the count must fit the limit too.
                    if items + 1 > (limit - pos) as u64 || depth >= limits.max_depth {
                        break 'walk;
                    }
                    pos += 1;
                    #[cfg(test)]
                    {
                        examined += 1;
                    }
                    if depth > 0 {
                        self.stack.push(Open::Items { remaining });
                    }
                    depth += 1;
                    remaining = items;
                    if items != 0 {
                        continue 'walk;
                    }
                    // An empty container is done at once; it is still a level of nesting.
                    remaining = 1;
                }
            }
            // An item is done: count it, closing every level it completes.
            remaining -= 1;
            while remaining == 0 {
                if depth <= 1 {
                    // The top level's one item, or a container on the top level, is done.
                    self.pos = pos;
                    self.walked = true;
                    #[cfg(test)]
                    {
                        self.examined += examined;
                    }
                    return;
                }
                depth -= 1;
                match self.stack.pop() {
                    Some(Open::Items { remaining: parent }) => remaining = parent.saturating_sub(1),
                    other => {
                        // The parent waits for a break, and the stack is complete again.
                        if let Some(open) = other {
                            self.stack.push(open);
                        }
                        self.pos = pos;
                        self.item_done();
                        #[cfg(test)]
                        {
                            self.examined += examined;
                        }
                        return;
                    }
                }
            }
        }
        #[cfg(test)]
        {
            self.examined += examined;
        }
        self.pos = pos;
        if depth > 0 {
            self.stack.push(Open::Items { remaining });
        }
    }

    /// Take the one header at `pos`: `Ok(false)` if it has not fully arrived.
    fn step(&mut self, buf: &[u8], limits: &FrameLimits) -> Result<bool, FrameError> {
        let at = self.pos;
        let Some(Head {
            major,
            info,
            arg,
            end,
        }) = self.head(buf, limits)?
        else {
            return Ok(false);
        };
        if let Some(string_major) = self.chunks_of {
            if major == 7 && info == 31 {
                self.pos = end;
                self.chunks_of = None;
                self.item_done();
                return Ok(true);
            }
            if major != string_major || info == 31 {
                return Err(invalid(
                    at,
                    "indefinite-length string chunk is not a definite string of the same type",
                ));
            }
        }
        match (major, info) {
            (0 | 1 | 6, 31) => {
                return Err(invalid(at, "indefinite length on an integer or a tag"));
            }
            (0 | 1, _) => {
                self.pos = end;
                self.item_done();
            }
            (2 | 3, 31) => {
                self.pos = end;
                self.chunks_of = Some(major);
            }
            (2 | 3, _) => {
                // Checked before the payload arrives; `pos` may now point past `buf`.
                self.pos = Self::need(end, arg, limits)?;
                self.item_done();
            }
            (4, 31) => {
                self.push(Open::IndefArray, limits)?;
                self.pos = end;
            }
            (5, 31) => {
                self.push(Open::IndefMap { key_pending: false }, limits)?;
                self.pos = end;
            }
            (4 | 5, _) => {
                let items = if major == 5 {
                    arg.saturating_mul(2)
                } else {
                    arg
                };
                // Every item takes at least one byte, so a count alone can exceed the limit.
                Self::need(end, items, limits)?;
                // An empty container is still a level of nesting, so it is pushed too.
                self.push(Open::Items { remaining: items }, limits)?;
                self.pos = end;
                if items == 0 {
                    self.stack.pop();
                    self.item_done();
                }
            }
            (6, _) => {
                self.push(Open::Items { remaining: 1 }, limits)?;
                self.pos = end;
            }
            (7, 24) if arg < 32 => {
                return Err(invalid(at, "two-byte simple value below 32"));
            }
            (7, 31) => match self.stack.last() {
                Some(Open::IndefArray | Open::IndefMap { key_pending: false }) => {
                    self.stack.pop();
                    self.pos = end;
                    self.item_done();
                }
                Some(Open::IndefMap { key_pending: true }) => {
                    return Err(invalid(at, "break after a map key without its value"));
                }
                _ => return Err(invalid(at, "break outside an indefinite-length item")),
            },
            // Major 7 (`major` is three bits, nothing else is left): simple values, floats.
            _ => {
                self.pos = end;
                self.item_done();
            }
        }
        Ok(true)
    }
}

impl Framer for CborSeq {
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(len) = self.scan.advance(src, &self.limits)? else {
            return Ok(None);
        };
        self.scan.reset();
        Ok(Some(src.split_to(len).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if src.is_empty() {
            return Ok(None);
        }
        Err(FrameError::Truncated {
            got: src.len(),
            snippet: escape_snippet(src, SNIPPET_BYTES),
        })
    }

    fn encode(&mut self, frame: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        self.check_frame(frame)?;
        dst.extend_from_slice(frame);
        Ok(())
    }
}

impl CborSeq {
    /// Check that `frame` is exactly one CBOR item within these limits, as `encode` does
    /// before it writes the frame.
    pub fn check_frame(&self, frame: &[u8]) -> Result<(), FrameError> {
        if frame.len() > self.limits.max_frame_bytes {
            return Err(FrameError::TooLarge {
                limit: self.limits.max_frame_bytes,
                got: frame.len(),
            });
        }
        match Scan::default().advance(frame, &self.limits)? {
            Some(len) if len == frame.len() => Ok(()),
            Some(len) => Err(FrameError::TrailingBytes {
                extra: frame.len() - len,
            }),
            None => Err(FrameError::Truncated {
                got: frame.len(),
                snippet: escape_snippet(frame, SNIPPET_BYTES),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{decode_pieces, every_split};

    fn limits(max_frame_bytes: usize, max_depth: usize) -> FrameLimits {
        FrameLimits {
            max_frame_bytes,
            max_depth,
            ..FrameLimits::default()
        }
    }

    fn decode_all(limits: FrameLimits, input: &[u8]) -> (Vec<Bytes>, Option<FrameError>) {
        decode_pieces(CborSeq::new(limits), [input])
    }

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| {
                let text = std::str::from_utf8(pair).expect("ascii");
                u8::from_str_radix(text, 16).expect("hex digits")
            })
            .collect()
    }

    /// Single well-formed items, each decoded as exactly one frame.
    const VALID: &[(&str, &str)] = &[
        ("uint 0", "00"),
        ("uint 23", "17"),
        ("uint 1 byte", "18 18"),
        ("uint 2 bytes", "19 01 00"),
        ("uint 4 bytes", "1a 00 01 00 00"),
        ("uint 8 bytes", "1b ff ff ff ff ff ff ff ff"),
        ("negative", "20"),
        ("negative 1 byte", "38 ff"),
        ("empty bytes", "40"),
        ("bytes", "43 01 02 03"),
        ("empty text", "60"),
        ("text", "65 68 65 6c 6c 6f"),
        ("text 1-byte length", "78 03 61 62 63"),
        ("empty array", "80"),
        ("array", "83 01 02 03"),
        (
            "array 25 items",
            "98 19 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17 18 18 18 19",
        ),
        ("empty map", "a0"),
        ("map", "a2 61 61 01 61 62 82 02 03"),
        ("indefinite empty array", "9f ff"),
        ("indefinite array", "9f 01 82 02 03 9f ff ff"),
        ("indefinite empty map", "bf ff"),
        ("indefinite map", "bf 61 61 01 61 62 9f 02 ff ff"),
        ("indefinite bytes", "5f 42 01 02 43 03 04 05 ff"),
        ("indefinite bytes no chunks", "5f ff"),
        ("indefinite text", "7f 65 73 74 72 65 61 64 6d 69 6e 67 ff"),
        ("indefinite string in array", "82 7f 61 61 ff 01"),
        ("tag", "c1 1a 51 4b 67 b0"),
        ("tag 1-byte number", "d8 20 63 61 62 63"),
        ("nested tags", "c6 c6 c6 01"),
        ("tag on array", "d9 01 02 82 01 02"),
        ("false", "f4"),
        ("true", "f5"),
        ("null", "f6"),
        ("undefined", "f7"),
        ("simple 16", "f0"),
        ("simple 255", "f8 ff"),
        ("half float", "f9 3c 00"),
        ("single float", "fa 47 c3 50 00"),
        ("double float", "fb 3f f1 99 99 99 99 99 9a"),
        ("text that is not utf-8", "62 ff fe"),
        ("ascii text is cbor", "61 62"),
    ];

    #[test]
    fn empty_input_is_no_frame() {
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        assert_eq!(framer.decode(&mut buf), Ok(None));
        assert_eq!(framer.decode_eof(&mut buf), Ok(None));
    }

    #[test]
    fn valid_items_are_single_frames() {
        for (name, item) in VALID {
            let item = hex(item);
            let got = decode_all(FrameLimits::default(), &item);
            assert_eq!(got, (vec![Bytes::from(item.clone())], None), "{name}");
            // Every proper prefix is an incomplete item.
            for cut in 1..item.len() {
                let mut framer = CborSeq::new(FrameLimits::default());
                let mut buf = BytesMut::from(&item[..cut]);
                assert_eq!(framer.decode(&mut buf), Ok(None), "{name} cut at {cut}");
                let err = FrameError::Truncated {
                    got: cut,
                    snippet: escape_snippet(&item[..cut], 200),
                };
                assert_eq!(framer.decode_eof(&mut buf), Err(err), "{name} cut at {cut}");
            }
            let mut wire = BytesMut::new();
            assert_eq!(
                CborSeq::new(FrameLimits::default()).encode(&item, &mut wire),
                Ok(()),
                "{name}"
            );
            assert_eq!(wire, item, "{name}");
        }
    }

    #[test]
    fn null_is_a_single_frame() {
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::from(&[0xf6, 0xf6][..]);
        assert_eq!(
            framer.decode(&mut buf),
            Ok(Some(Bytes::from_static(&[0xf6])))
        );
        assert_eq!(
            framer.decode_eof(&mut buf),
            Ok(Some(Bytes::from_static(&[0xf6])))
        );
        assert_eq!(framer.decode_eof(&mut buf), Ok(None));
    }

    #[test]
    fn malformed_items_table() {
        let cases: &[(&str, &str, FrameError)] = &[
            (
                "reserved 28",
                "1c",
                invalid(0, "reserved additional information 28-30"),
            ),
            (
                "reserved 29",
                "3d",
                invalid(0, "reserved additional information 28-30"),
            ),
            (
                "reserved 30 in array",
                "82 01 5e",
                invalid(2, "reserved additional information 28-30"),
            ),
            (
                "stray break",
                "ff",
                invalid(0, "break outside an indefinite-length item"),
            ),
            (
                "break in definite array",
                "82 01 ff",
                invalid(2, "break outside an indefinite-length item"),
            ),
            (
                "break after tag",
                "c1 ff",
                invalid(1, "break outside an indefinite-length item"),
            ),
            (
                "break after map key",
                "bf 01 ff",
                invalid(2, "break after a map key without its value"),
            ),
            (
                "indefinite uint",
                "1f",
                invalid(0, "indefinite length on an integer or a tag"),
            ),
            (
                "indefinite negative",
                "3f",
                invalid(0, "indefinite length on an integer or a tag"),
            ),
            (
                "indefinite tag",
                "df",
                invalid(0, "indefinite length on an integer or a tag"),
            ),
            (
                "text chunk in bytes",
                "5f 61 61 ff",
                invalid(
                    1,
                    "indefinite-length string chunk is not a definite string of the same type",
                ),
            ),
            (
                "nested indefinite chunk",
                "7f 7f ff ff",
                invalid(
                    1,
                    "indefinite-length string chunk is not a definite string of the same type",
                ),
            ),
            (
                "integer chunk",
                "5f 01 ff",
                invalid(
                    1,
                    "indefinite-length string chunk is not a definite string of the same type",
                ),
            ),
            (
                "two-byte simple below 32",
                "f8 1f",
                invalid(0, "two-byte simple value below 32"),
            ),
        ];
        for (name, input, err) in cases {
            let got = decode_all(FrameLimits::default(), &hex(input));
            assert_eq!(got, (vec![], Some(err.clone())), "{name}");
            let encoded =
                CborSeq::new(FrameLimits::default()).encode(&hex(input), &mut BytesMut::new());
            assert_eq!(encoded, Err(err.clone()), "{name}");
        }
    }

    #[test]
    fn garbage_between_frames() {
        let got = decode_all(FrameLimits::default(), &hex("01 ff 02"));
        let err = invalid(0, "break outside an indefinite-length item");
        assert_eq!(got, (vec![Bytes::from_static(&[1])], Some(err)));
        let got = decode_all(FrameLimits::default(), &hex("f6 fc f6"));
        let err = invalid(0, "reserved additional information 28-30");
        assert_eq!(got, (vec![Bytes::from_static(&[0xf6])], Some(err)));
    }

    #[test]
    fn nesting_at_depth_limit_accepted_and_one_deeper_rejected() {
        let cases: &[(&str, &str, &str)] = &[
            ("definite arrays", "81 81 81 00", "81 81 81 81 00"),
            ("empty array innermost", "81 81 80", "81 81 81 80"),
            ("maps", "a1 00 a1 00 a1 00 00", "a1 00 a1 00 a1 00 a1 00 00"),
            ("indefinite", "9f 9f 9f ff ff ff", "9f 9f 9f 9f ff ff ff ff"),
            ("tags", "c6 c6 c6 00", "c6 c6 c6 c6 00"),
            ("mixed", "c6 9f a1 00 00 ff", "c6 9f a1 00 81 00 ff"),
            (
                "indefinite string is not a level",
                "81 81 81 5f 41 00 ff",
                "81 81 81 81 5f ff",
            ),
        ];
        for (name, at_limit, over) in cases {
            let at_limit = hex(at_limit);
            assert_eq!(
                decode_all(limits(1024, 3), &at_limit),
                (vec![Bytes::from(at_limit)], None),
                "{name}"
            );
            let got = decode_all(limits(1024, 3), &hex(over));
            assert_eq!(
                got,
                (vec![], Some(FrameError::TooDeep { limit: 3 })),
                "{name}"
            );
        }
    }

    #[test]
    fn deep_nesting_uses_no_recursion() {
        let deep = vec![0x81; 1_000_000];
        let got = decode_all(limits(usize::MAX, usize::MAX), &[&deep[..], &[0]].concat());
        assert_eq!(got.1, None);
        assert_eq!(got.0[0].len(), 1_000_001);
        let got = decode_all(FrameLimits::default(), &deep);
        assert_eq!(got, (vec![], Some(FrameError::TooDeep { limit: 128 })));
    }

    #[test]
    fn frame_at_limit_accepted_and_one_over_rejected() {
        // A 32-byte item: a byte string of 30 bytes behind a 2-byte header.
        let at = [&[0x58, 30][..], &[7; 30]].concat();
        assert_eq!(
            decode_all(limits(32, 8), &at),
            (vec![Bytes::from(at.clone())], None)
        );
        // One more byte is rejected from the header alone, before the payload arrives.
        let mut framer = CborSeq::new(limits(32, 8));
        let mut buf = BytesMut::from(&[0x58, 31][..]);
        assert_eq!(
            framer.decode(&mut buf),
            Err(FrameError::TooLarge { limit: 32, got: 33 })
        );

        let too_large = |got| Some(FrameError::TooLarge { limit: 32, got });
        let cases: &[(&str, Vec<u8>, Option<FrameError>)] = &[
            (
                "array of 31 ints is 32 bytes",
                [&[0x98, 30][..], &[1; 30]].concat(),
                None,
            ),
            (
                "array of 32 ints is 33 bytes",
                [&[0x98, 31][..], &[1; 31]].concat(),
                too_large(33),
            ),
            (
                "indefinite array runs over",
                [&[0x9f][..], &[1; 40]].concat(),
                too_large(33),
            ),
            (
                "header crosses the limit",
                [&[0x9f][..], &[1; 30], &[0x1b]].concat(),
                too_large(40),
            ),
            ("count alone exceeds", hex("98 ff"), too_large(257)),
            (
                "u64::MAX string",
                hex("5b ff ff ff ff ff ff ff ff"),
                too_large(usize::MAX),
            ),
            (
                "u64::MAX array",
                hex("9b ff ff ff ff ff ff ff ff"),
                too_large(usize::MAX),
            ),
            (
                "u64::MAX map pairs",
                hex("bb ff ff ff ff ff ff ff ff"),
                too_large(usize::MAX),
            ),
            ("long chunk", hex("5f 41 00 58 1d"), too_large(34)),
        ];
        for (name, input, err) in cases {
            let got = decode_all(limits(32, 8), input);
            let want = if err.is_some() {
                vec![]
            } else {
                vec![Bytes::from(input.clone())]
            };
            assert_eq!(got, (want, err.clone()), "{name}");
        }
        let over = [&[0x58, 31][..], &[7; 31]].concat();
        let encoded = CborSeq::new(limits(32, 8)).encode(&over, &mut BytesMut::new());
        assert_eq!(encoded, Err(FrameError::TooLarge { limit: 32, got: 33 }));
    }

    fn stream() -> (Vec<u8>, Vec<Bytes>) {
        let items = [
            "a3 62 69 64 01 66 6d 65 74 68 6f 64 6a 74 6f 6f 6c 73 2f 6c 69 73 74 66 70 61 72 61 6d 73 83 fb 3f f8 00 00 00 00 00 00 f6 f5",
            "f6",
            "9f 5f 41 01 ff bf 61 6b d8 20 61 76 ff ff",
            "00",
            "c1 fa 47 c3 50 00",
        ];
        let items: Vec<Vec<u8>> = items.iter().map(|s| hex(s)).collect();
        (items.concat(), items.into_iter().map(Bytes::from).collect())
    }

    #[test]
    fn split_at_every_offset_gives_the_same_frames() {
        let (input, want) = stream();
        every_split(|| CborSeq::new(FrameLimits::default()), &input, &want);
    }

    #[test]
    fn one_byte_at_a_time() {
        let (input, want) = stream();
        assert_eq!(
            decode_pieces(CborSeq::new(FrameLimits::default()), input.chunks(1)),
            (want, None)
        );
    }

    #[test]
    fn many_frames_in_one_read() {
        let (input, want) = stream();
        let input = input.repeat(500);
        let want: Vec<Bytes> = std::iter::repeat_n(want, 500).flatten().collect();
        assert_eq!(decode_all(FrameLimits::default(), &input), (want, None));
    }

    #[test]
    fn eof_mid_frame_is_truncated() {
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::from(&hex("01 83 01 02")[..]);
        assert_eq!(
            framer.decode_eof(&mut buf),
            Ok(Some(Bytes::from_static(&[1])))
        );
        let err = FrameError::Truncated {
            got: 3,
            snippet: "\\x83\\x01\\x02".into(),
        };
        assert_eq!(framer.decode_eof(&mut buf), Err(err));
        // A string whose payload never fully arrived.
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::from(&hex("44 01 02")[..]);
        assert_eq!(framer.decode(&mut buf), Ok(None));
        assert!(matches!(
            framer.decode_eof(&mut buf),
            Err(FrameError::Truncated { got: 3, .. })
        ));
    }

    #[test]
    fn encode_requires_exactly_one_item() {
        let cases: &[(&str, &str, Result<(), FrameError>)] = &[
            ("one item", "82 01 02", Ok(())),
            (
                "two items",
                "01 02 03",
                Err(FrameError::TrailingBytes { extra: 2 }),
            ),
            (
                "empty",
                "",
                Err(FrameError::Truncated {
                    got: 0,
                    snippet: String::new(),
                }),
            ),
            (
                "partial",
                "82 01",
                Err(FrameError::Truncated {
                    got: 2,
                    snippet: "\\x82\\x01".into(),
                }),
            ),
        ];
        for (name, frame, want) in cases {
            let mut dst = BytesMut::from(&b"x"[..]);
            assert_eq!(
                CborSeq::new(FrameLimits::default()).encode(&hex(frame), &mut dst),
                *want,
                "{name}"
            );
            let expect = if want.is_ok() {
                [&b"x"[..], &hex(frame)].concat()
            } else {
                b"x".to_vec()
            };
            assert_eq!(dst, expect, "{name}");
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let (_, items) = stream();
        let mut encoder = CborSeq::new(FrameLimits::default());
        let mut wire = BytesMut::new();
        for item in &items {
            encoder.encode(item, &mut wire).expect("encodes");
        }
        assert_eq!(decode_all(FrameLimits::default(), &wire), (items, None));
    }

    #[test]
    fn one_token_per_write_is_walked_once() {
        // How a streaming encoder (e.g. Python's cbor2) writes {"id": 1, "p": [1.5, null, "ab"]}.
        let tokens = [
            "a2",
            "62",
            "69 64",
            "01",
            "61",
            "70",
            "83",
            "fb 3f f8 00 00 00 00 00 00",
            "f6",
            "62",
            "61 62",
        ];
        let tokens: Vec<Vec<u8>> = tokens.iter().map(|t| hex(t)).collect();
        let item = tokens.concat();
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        let last = tokens.len() - 1;
        for (i, token) in tokens.iter().enumerate() {
            buf.extend_from_slice(token);
            let want = if i == last {
                Some(Bytes::from(item.clone()))
            } else {
                None
            };
            assert_eq!(framer.decode(&mut buf), Ok(want), "after token {i}");
        }
        // Only the 8 initial bytes of the item's 21 are read: string payloads and the float's
        // argument say nothing about where the item ends, so they are skipped unread.
        assert_eq!(framer.scan.examined, 8);
    }

    #[test]
    fn a_large_item_in_small_reads_is_walked_once() {
        // An array of 100000 small integers, fed 7 bytes at a time.
        let mut item = hex("9a 00 01 86 a0");
        item.extend(std::iter::repeat_n(0x05, 100_000));
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for piece in item.chunks(7) {
            buf.extend_from_slice(piece);
            frames.extend(framer.decode(&mut buf).expect("valid"));
        }
        assert_eq!(frames, [Bytes::from(item.clone())]);
        assert_eq!(framer.scan.examined, item.len(), "every byte read once");
        // A byte string payload is skipped, not read.
        let mut framer = CborSeq::new(FrameLimits::default());
        let mut buf = BytesMut::from(&hex("5a 00 10 00 00")[..]);
        for _ in 0..256 {
            assert_eq!(framer.decode(&mut buf), Ok(None));
            buf.extend_from_slice(&[0; 4096]);
        }
        assert_eq!(
            framer.decode(&mut buf).expect("valid").map(|f| f.len()),
            Some(5 + (1 << 20))
        );
        assert_eq!(framer.scan.examined, 5);
    }

    /// The framer as it was before the fast walk, from `cbor_seq_reference`.
    struct Reference {
        limits: FrameLimits,
        scan: crate::frame::cbor_seq_reference::Scan,
    }

    impl Framer for Reference {
        fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
            let Some(len) = self.scan.advance(src, &self.limits)? else {
                return Ok(None);
            };
            self.scan = Default::default();
            Ok(Some(src.split_to(len).freeze()))
        }

        fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
            if let Some(frame) = self.decode(src)? {
                return Ok(Some(frame));
            }
            if src.is_empty() {
                return Ok(None);
            }
            Err(FrameError::Truncated {
                got: src.len(),
                snippet: escape_snippet(src, SNIPPET_BYTES),
            })
        }

        fn encode(&mut self, _: &[u8], _: &mut BytesMut) -> Result<(), FrameError> {
            unreachable!("only decoding is compared")
        }
    }

    /// A tiny deterministic generator, so the generated streams are the same on every run.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A header of major type `major` with argument `arg`, in the shortest form or, when
    /// `wide`, in a longer one than needed (still well-formed).
    fn head_bytes(major: u8, arg: u64, wide: u64) -> Vec<u8> {
        let m = major << 5;
        match (arg, wide) {
            (0..=23, 0) => vec![m | arg as u8],
            (0..=0xff, 0 | 1) => vec![m | 24, arg as u8],
            (0..=0xffff, 0..=2) => [&[m | 25][..], &(arg as u16).to_be_bytes()].concat(),
            (0..=0xffff_ffff, 0..=3) => [&[m | 26][..], &(arg as u32).to_be_bytes()].concat(),
            _ => [&[m | 27][..], &arg.to_be_bytes()].concat(),
        }
    }

    /// Append one CBOR item to `out`: mostly well-formed, every kind of head, nested up to
    /// `depth` more levels (the generator recurses; the framer must not).
    fn gen_item(rng: &mut XorShift, depth: u32, out: &mut Vec<u8>) {
        let arg = |rng: &mut XorShift| match rng.below(8) {
            0..=4 => rng.below(24),
            5 => rng.below(256),
            6 => rng.below(1 << 16),
            _ => rng.next() >> rng.below(64),
        };
        let wide = |rng: &mut XorShift| if rng.below(6) == 0 { rng.below(4) } else { 0 };
        let small_len = |rng: &mut XorShift| match rng.below(6) {
            0..=3 => rng.below(24),
            4 => rng.below(60),
            _ => rng.below(300),
        };
        let kind = if depth == 0 {
            rng.below(6)
        } else {
            rng.below(11)
        };
        match kind {
            0 | 1 => {
                let (a, w) = (arg(rng), wide(rng));
                out.extend(head_bytes(rng.below(2) as u8, a, w));
            }
            2 | 3 => {
                let (len, w) = (small_len(rng), wide(rng));
                out.extend(head_bytes(2 + rng.below(2) as u8, len, w));
                out.extend((0..len).map(|_| rng.next() as u8));
            }
            4 => out.extend(match rng.below(6) {
                0 => vec![0xe0 | rng.below(24) as u8],
                1 => vec![0xf8, rng.below(256) as u8],
                2 => vec![0xf9, 0x3c, 0x00],
                3 => vec![0xfa, 0x47, 0xc3, 0x50, 0x00],
                4 => vec![0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a],
                _ => vec![0xf4 + rng.below(4) as u8],
            }),
            5 => {
                // An indefinite-length string of definite chunks.
                let major = 2 + rng.below(2) as u8;
                out.push((major << 5) | 31);
                for _ in 0..rng.below(4) {
                    let len = rng.below(30);
                    out.extend(head_bytes(major, len, wide(rng)));
                    out.extend((0..len).map(|_| rng.next() as u8));
                }
                out.push(0xff);
            }
            6 | 7 => {
                let major = 4 + rng.below(2) as u8;
                let n = if rng.below(4) == 0 {
                    rng.below(40)
                } else {
                    rng.below(6)
                };
                out.extend(head_bytes(major, n, wide(rng)));
                for _ in 0..n * u64::from(major - 3) {
                    gen_item(rng, depth - 1, out);
                }
            }
            8 | 9 => {
                let major = 4 + rng.below(2) as u8;
                out.push((major << 5) | 31);
                for _ in 0..rng.below(6) * u64::from(major - 3) {
                    gen_item(rng, depth - 1, out);
                }
                out.push(0xff);
            }
            _ => {
                let (a, w) = (arg(rng), wide(rng));
                out.extend(head_bytes(6, a, w));
                gen_item(rng, depth - 1, out);
            }
        }
    }

    /// `SANDPIPE_CBOR_CASES` sets how many streams (default 4000), for long runs.
    #[test]
    fn fast_walk_matches_the_reference_walk() {
        let rounds = std::env::var("SANDPIPE_CBOR_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(4000);
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for round in 0..rounds {
            let mut stream = Vec::new();
            for _ in 0..rng.below(6) {
                let depth = rng.below(7) as u32;
                gen_item(&mut rng, depth, &mut stream);
            }
            // Some streams are damaged: bytes overwritten, or cut short.
            for _ in 0..rng.below(4).saturating_sub(1) {
                if !stream.is_empty() {
                    let at = rng.below(stream.len() as u64) as usize;
                    stream[at] = rng.next() as u8;
                }
            }
            if rng.below(5) == 0 && !stream.is_empty() {
                stream.truncate(rng.below(stream.len() as u64) as usize);
            }
            let limits = limits(
                [usize::MAX, 16 << 20, 40, 300, rng.below(200) as usize][rng.below(5) as usize],
                [128, 0, 1, 3, rng.below(10) as usize][rng.below(5) as usize],
            );
            let mut rest = &stream[..];
            let mut pieces = Vec::new();
            while !rest.is_empty() {
                let size = match rng.below(4) {
                    0 => 1,
                    1 => rng.below(4) as usize,
                    2 => rng.below(40) as usize,
                    _ => rest.len(),
                };
                let (piece, tail) = rest.split_at(size.min(rest.len()));
                pieces.push(piece);
                rest = tail;
            }
            let want = decode_pieces(
                Reference {
                    limits,
                    scan: Default::default(),
                },
                pieces.iter().copied(),
            );
            let got = decode_pieces(CborSeq::new(limits), pieces.iter().copied());
            assert_eq!(got, want, "round {round}: {stream:02x?} in {pieces:?}");
            let want = decode_pieces(
                Reference {
                    limits,
                    scan: Default::default(),
                },
                [&stream[..]],
            );
            assert_eq!(
                decode_all(limits, &stream),
                want,
                "round {round}: {stream:02x?}"
            );
            // `check_frame` passes exactly the streams that are one item.
            let one_item = want.1.is_none() && want.0.len() == 1;
            assert_eq!(
                CborSeq::new(limits).check_frame(&stream).is_ok(),
                one_item,
                "round {round}: {stream:02x?}"
            );
        }
    }

    /// One item holding every head the fast walk takes, and heads it hands back to the general
    /// walk between them.
    fn every_fast_head() -> Vec<u8> {
        hex("84
             a6 00 17 20 37 18 ff 39 01 00 1a 00 01 00 00 3b ff ff ff ff ff ff ff ff
                40 57 41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f 50 51 52 53 54 55 56 57
                78 01 61 58 00
             8a 80 a0 c0 c1 82 f4 f5 f6 f7 f0 f9 3c 00 fa 47 c3 50 00
                fb 3f f1 99 99 99 99 99 9a d8 20 83 9f 01 ff 5f 41 00 ff f8 20
             99 00 02
                b7 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17
                   00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15
                98 19 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17
                   18 18
             c2 80")
    }

    #[test]
    fn every_fast_head_split_at_every_pair_of_offsets() {
        let item = every_fast_head();
        let stream = [&item[..], &hex("f6 81 00")].concat();
        let want = vec![
            Bytes::from(item.clone()),
            Bytes::from_static(&[0xf6]),
            Bytes::from_static(&[0x81, 0x00]),
        ];
        every_split(|| CborSeq::new(FrameLimits::default()), &stream, &want);
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let pieces = [&stream[..a], &stream[a..b], &stream[b..]];
                let got = decode_pieces(CborSeq::new(FrameLimits::default()), pieces);
                assert_eq!(got, (want.clone(), None), "split at {a} and {b}");
            }
        }
        // Every item is needed: each proper prefix is incomplete.
        for cut in 0..item.len() {
            let mut buf = BytesMut::from(&item[..cut]);
            let got = CborSeq::new(FrameLimits::default()).decode(&mut buf);
            assert_eq!(got, Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn fast_heads_at_the_size_and_depth_limits() {
        let item = every_fast_head();
        let n = item.len();
        assert_eq!(
            decode_all(limits(n, 5), &item),
            (vec![Bytes::from(item.clone())], None)
        );
        assert_eq!(
            decode_all(limits(n - 1, 5), &item).1,
            Some(FrameError::TooLarge {
                limit: n - 1,
                got: n
            })
        );
        assert_eq!(
            decode_all(limits(n, 4), &item).1,
            Some(FrameError::TooDeep { limit: 4 })
        );
        // Each kind of fast head crossing the limit, and the same head one byte earlier.
        let cases: &[(&str, &str, usize)] = &[
            ("uint", "82 00 1a 00 00 00 00", 7),
            ("short text", "82 00 65 61 62 63 64 65", 8),
            ("one-byte text length", "82 00 78 02 61 62", 6),
            ("array", "82 00 83 01 02 03", 6),
            ("map", "82 00 a1 01 02", 5),
            ("tag", "82 00 c1 00", 4),
            ("empty map", "82 00 a0", 3),
        ];
        for (name, input, len) in cases {
            let input = hex(input);
            assert_eq!(input.len(), *len, "{name}");
            let got = decode_all(limits(*len, 8), &input);
            assert_eq!(got, (vec![Bytes::from(input.clone())], None), "{name}");
            let want = decode_pieces(
                Reference {
                    limits: limits(len - 1, 8),
                    scan: Default::default(),
                },
                [&input[..]],
            );
            assert!(
                matches!(want.1, Some(FrameError::TooLarge { .. })),
                "{name}: {want:?}"
            );
            assert_eq!(decode_all(limits(len - 1, 8), &input), want, "{name}");
        }
    }
}
