//! The CBOR boundary walk as it was before the fast path (one header at a time, every header
//! through `Result<Option<Head>>`), kept for tests only: `cbor_seq`'s differential test checks
//! the fast walk against it over generated streams split at random offsets.

use super::{FrameError, FrameLimits};

/// A container that is still open at the scan position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// A definite-length array or map: items still expected (a map of `n` pairs holds `2n`).
    Items { remaining: u64 },
    /// An indefinite-length array: items until a break.
    IndefArray,
    /// An indefinite-length map: key/value pairs until a break; `key_pending` after a key.
    IndefMap { key_pending: bool },
    /// A tag: exactly one item follows.
    Tag,
}

/// The resumable walk over one item at the front of the buffer.
#[derive(Debug, Clone, Default)]
pub(super) struct Scan {
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
                Some(Open::Tag) => {}
            }
            self.stack.pop();
        }
    }

    /// Walk the item at the front of `buf` as far as it has arrived: `Ok(Some(len))` once the
    /// whole item, `len` bytes, is in `buf`.
    pub(super) fn advance(
        &mut self,
        buf: &[u8],
        limits: &FrameLimits,
    ) -> Result<Option<usize>, FrameError> {
        loop {
            if self.pos > buf.len() {
                return Ok(None); // a string payload is still arriving
            }
            if self.walked {
                return Ok(Some(self.pos));
            }
            let at = self.pos;
            let Some(Head {
                major,
                info,
                arg,
                end,
            }) = self.head(buf, limits)?
            else {
                return Ok(None);
            };
            if let Some(string_major) = self.chunks_of {
                if major == 7 && info == 31 {
                    self.pos = end;
                    self.chunks_of = None;
                    self.item_done();
                    continue;
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
                    self.push(Open::Tag, limits)?;
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
        }
    }
}
