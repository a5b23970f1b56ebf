//! Cairo `wasm:` oracles, sans-IO: the Cairo-Serde felt codec for component-model values and
//! selector resolution over a component's exported functions.
//!
//! A `wasm:` oracle is a WASI 0.2 component whose exported functions the Cairo executor calls
//! with arguments decoded from felts. The executor (the host's `sandbox`) walks the component's
//! exports, resolves the selector here ([`Selectors`]), turns the function's parameter types
//! into [`Ty`]s, decodes the calldata ([`decode_args`]), calls the guest, and encodes the
//! results ([`encode_results`]).
//!
//! ```text
//!   calldata felts ─► decode_args(param types) ─► [Value] ─► (host: guest call) ─► [Value]
//!                          │ caps every length against                               │
//!                          │ the calldata left, before allocating                    ▼
//!                          └► CodecError (before the guest is entered)      encode_results ─► felts
//! ```
//!
//! The layout (Cairo Serde, as Scarb's executor reads and writes it):
//! - `bool`, `u8`–`u64`, `s8`–`s64`: one felt; a negative number `x` is `P − |x|`, where
//!   `P = 2^251 + 17·2^192 + 1`.
//! - `char`: a short string, the big-endian value of its UTF-8 bytes (zero is `'\0'`).
//! - `string`: a `ByteArray`: the number of full 31-byte words, the words, the pending word
//!   (fewer than 31 bytes, big-endian) and the pending word's length in bytes (0 to 30).
//! - `list<T>`: its length, then the items; a tuple: its items in order.
//! - `option<T>`: tag 0 (none) or 1 then the payload; `result<T, E>`: tag 0 then `T`'s payload
//!   if any, or tag 1 then `E`'s.
//! - Anything else (floats, records, variants, enums, flags, resources, futures, streams) is
//!   an unsupported type.
//!
//! Calldata that runs out, or is left over, is an error. Every length read from the calldata
//! (a list's, a `ByteArray`'s word count) is checked against what the remaining calldata could
//! hold before anything is allocated, so a felt claiming 2^64 items costs nothing.
//!
//! What it does not do: call anything (the host does), or know wasmtime's types (the host
//! converts them to [`Ty`] and [`Value`]).
//!
//! ```
//! use sandpipe_proto::oracle::Felt;
//! use sandpipe_proto::oracle::wasm::{Ty, Value, decode_args, encode_results};
//!
//! let calldata = [Felt::from(2u128), Felt::from(7u128), Felt::from(9u128)];
//! let args = decode_args(&[Ty::List(Box::new(Ty::U64))], &calldata).unwrap();
//! assert_eq!(args, vec![Value::List(vec![Value::U64(7), Value::U64(9)])]);
//! let felts = encode_results(&[Value::S8(-1)], 16).unwrap();
//! assert_eq!(felts[0].as_str(), "0x800000000000011000000000000000000000000000000000000000000000000");
//! ```

use std::fmt;

use thiserror::Error;

use super::Felt;

/// The field prime `P = 2^251 + 17·2^192 + 1`, big-endian.
const PRIME: [u8; 32] = [
    0x08, 0, 0, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0x01,
];

/// Bytes in a full `ByteArray` word.
pub const WORD_BYTES: usize = 31;

/// Deepest type nesting the codec accepts (`list<list<…>>`); deeper types are refused when a
/// function's signature is read, so neither direction recurses without bound.
pub const MAX_TYPE_DEPTH: usize = 32;

/// The default cap on the felts one call's results may encode to.
pub const DEFAULT_MAX_RESULT_FELTS: usize = 1 << 20;

/// A component-model type, as the host reads it from a component's exports. The Cairo codec
/// carries the scalars, `char`, `string`, lists, tuples, options and results; floats, records,
/// enums, variants and flags are for other callers of exports (MCP tools:
/// [`crate::mcp::exports`]) and are an unsupported type to the codec ([`check_supported`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// `bool`
    Bool,
    /// `s8`
    S8,
    /// `u8`
    U8,
    /// `s16`
    S16,
    /// `u16`
    U16,
    /// `s32`
    S32,
    /// `u32`
    U32,
    /// `s64`
    S64,
    /// `u64`
    U64,
    /// `char`
    Char,
    /// `string`
    String,
    /// `list<T>`
    List(Box<Ty>),
    /// `tuple<T, …>`
    Tuple(Vec<Ty>),
    /// `option<T>`
    Option(Box<Ty>),
    /// `result<T, E>`, either payload optional.
    Result {
        /// The `ok` payload type.
        ok: Option<Box<Ty>>,
        /// The `err` payload type.
        err: Option<Box<Ty>>,
    },
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// A `record`: its fields, in order.
    Record(Vec<(String, Ty)>),
    /// An `enum`: its case names.
    Enum(Vec<String>),
    /// A `variant`: its cases, each with its payload type if it has one.
    Variant(Vec<(String, Option<Ty>)>),
    /// `flags`: the flag names.
    Flags(Vec<String>),
}

impl Ty {
    /// How deeply the type nests (a scalar is 1).
    pub fn depth(&self) -> usize {
        match self {
            Ty::List(t) | Ty::Option(t) => 1 + t.depth(),
            Ty::Tuple(ts) => 1 + ts.iter().map(Ty::depth).max().unwrap_or(0),
            Ty::Result { ok, err } => {
                1 + ok
                    .iter()
                    .chain(err.iter())
                    .map(|t| t.depth())
                    .max()
                    .unwrap_or(0)
            }
            Ty::Record(fields) => 1 + fields.iter().map(|(_, t)| t.depth()).max().unwrap_or(0),
            Ty::Variant(cases) => {
                1 + cases
                    .iter()
                    .filter_map(|(_, t)| t.as_ref().map(Ty::depth))
                    .max()
                    .unwrap_or(0)
            }
            _ => 1,
        }
    }

    /// The fewest felts a value of this type takes.
    fn min_felts(&self) -> usize {
        match self {
            Ty::String => 3,
            Ty::Tuple(ts) => ts.iter().map(Ty::min_felts).sum(),
            _ => 1,
        }
    }
}

impl fmt::Display for Ty {
    /// WIT syntax: `list<u64>`, `result<_, string>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::S8 => f.write_str("s8"),
            Ty::U8 => f.write_str("u8"),
            Ty::S16 => f.write_str("s16"),
            Ty::U16 => f.write_str("u16"),
            Ty::S32 => f.write_str("s32"),
            Ty::U32 => f.write_str("u32"),
            Ty::S64 => f.write_str("s64"),
            Ty::U64 => f.write_str("u64"),
            Ty::Char => f.write_str("char"),
            Ty::String => f.write_str("string"),
            Ty::List(t) => write!(f, "list<{t}>"),
            Ty::Tuple(ts) => {
                f.write_str("tuple<")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(">")
            }
            Ty::Option(t) => write!(f, "option<{t}>"),
            Ty::Result { ok, err } => match (ok, err) {
                (None, None) => f.write_str("result"),
                (Some(o), None) => write!(f, "result<{o}>"),
                (None, Some(e)) => write!(f, "result<_, {e}>"),
                (Some(o), Some(e)) => write!(f, "result<{o}, {e}>"),
            },
            Ty::F32 => f.write_str("f32"),
            Ty::F64 => f.write_str("f64"),
            Ty::Record(fields) => {
                f.write_str("record { ")?;
                for (i, (n, t)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{n}: {t}")?;
                }
                f.write_str(" }")
            }
            Ty::Enum(names) => write!(f, "enum {{ {} }}", names.join(", ")),
            Ty::Flags(names) => write!(f, "flags {{ {} }}", names.join(", ")),
            Ty::Variant(cases) => {
                f.write_str("variant { ")?;
                for (i, (n, t)) in cases.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match t {
                        Some(t) => write!(f, "{n}({t})")?,
                        None => f.write_str(n)?,
                    }
                }
                f.write_str(" }")
            }
        }
    }
}

impl Ty {
    /// The name the Cairo codec gives this type when it cannot carry it (as Scarb's does).
    fn unsupported_name(&self) -> Option<&'static str> {
        match self {
            Ty::F32 => Some("float32"),
            Ty::F64 => Some("float64"),
            Ty::Record(_) => Some("record"),
            Ty::Enum(_) => Some("enum"),
            Ty::Variant(_) => Some("variant"),
            Ty::Flags(_) => Some("flags"),
            _ => None,
        }
    }
}

/// Check that the Cairo codec carries every one of `types` (and what they hold): floats,
/// records, enums, variants and flags are [`CodecError::UnsupportedType`], checked before the
/// guest is entered.
pub fn check_supported<'a>(types: impl IntoIterator<Item = &'a Ty>) -> Result<(), CodecError> {
    let mut stack: Vec<&Ty> = types.into_iter().collect();
    while let Some(t) = stack.pop() {
        if let Some(name) = t.unsupported_name() {
            return Err(CodecError::UnsupportedType {
                ty: name.to_owned(),
            });
        }
        match t {
            Ty::List(i) | Ty::Option(i) => stack.push(i),
            Ty::Tuple(ts) => stack.extend(ts.iter()),
            Ty::Result { ok, err } => stack.extend(ok.iter().chain(err.iter()).map(|b| &**b)),
            _ => {}
        }
    }
    Ok(())
}

/// A value of a [`Ty`]. Exhaustive, like [`Ty`]: a host converting to and from its own
/// representation must handle every variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `bool`
    Bool(bool),
    /// `s8`
    S8(i8),
    /// `u8`
    U8(u8),
    /// `s16`
    S16(i16),
    /// `u16`
    U16(u16),
    /// `s32`
    S32(i32),
    /// `u32`
    U32(u32),
    /// `s64`
    S64(i64),
    /// `u64`
    U64(u64),
    /// `char`
    Char(char),
    /// `string`
    String(String),
    /// `list<T>`
    List(Vec<Value>),
    /// `tuple<…>`
    Tuple(Vec<Value>),
    /// `option<T>`
    Option(Option<Box<Value>>),
    /// `result<T, E>`: the payload, if the type has one on that side.
    Result(Result<Option<Box<Value>>, Option<Box<Value>>>),
    /// `f32`
    F32(f32),
    /// `f64`
    F64(f64),
    /// A `record`'s fields, in order, by name.
    Record(Vec<(String, Value)>),
    /// An `enum` case, by name.
    Enum(String),
    /// A `variant` case, by name, with its payload if it has one.
    Variant(String, Option<Box<Value>>),
    /// The `flags` that are set, by name.
    Flags(Vec<String>),
}

/// Why calldata could not be decoded, or results encoded. `at` is the index of the felt
/// concerned in the calldata.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The function has a parameter or result type the codec cannot carry.
    #[error("unsupported type: {ty}")]
    UnsupportedType {
        /// The type, in WIT syntax.
        ty: String,
    },
    /// A type nests deeper than [`MAX_TYPE_DEPTH`].
    #[error("type nests {depth} deep, more than the {limit} the codec accepts")]
    TooDeep {
        /// How deep it nests.
        depth: usize,
        /// [`MAX_TYPE_DEPTH`].
        limit: usize,
    },
    /// The calldata ended before a value of `ty` was complete.
    #[error("calldata ended at felt {at} while decoding {ty}")]
    CalldataEnded {
        /// What was being read.
        ty: String,
        /// The calldata's length.
        at: usize,
    },
    /// Felts are left after the last argument.
    #[error("not all calldata was consumed: {left} of {total} felts left over")]
    LeftOver {
        /// Felts not read.
        left: usize,
        /// The calldata's length.
        total: usize,
    },
    /// A felt is out of range for its type.
    #[error("felt {at} ({felt}) is out of range for {ty}")]
    OutOfRange {
        /// The type.
        ty: String,
        /// The felt.
        felt: Felt,
        /// Its index.
        at: usize,
    },
    /// An `option`, `result` or `bool` tag that is neither 0 nor 1.
    #[error("felt {at} ({tag}) is not a valid tag for {ty} (0 or 1)")]
    BadTag {
        /// The type.
        ty: String,
        /// The tag read.
        tag: Felt,
        /// Its index.
        at: usize,
    },
    /// A length larger than the calldata left could hold: checked before allocating.
    #[error(
        "felt {at} ({len}) is a {what} length that {left} remaining felts cannot hold (at most {max})"
    )]
    LengthTooLarge {
        /// `list` or `ByteArray`.
        what: &'static str,
        /// The length read.
        len: Felt,
        /// The most the remaining calldata could hold.
        max: usize,
        /// Felts left after the length.
        left: usize,
        /// Its index.
        at: usize,
    },
    /// A `ByteArray` whose pending word length is over 30, or whose pending word does not fit
    /// in its length.
    #[error("bad ByteArray at felt {at}: {reason}")]
    BadByteArray {
        /// What is wrong.
        reason: String,
        /// The index of the felt concerned.
        at: usize,
    },
    /// A `string` whose bytes are not UTF-8.
    #[error("the ByteArray ending at felt {at} is not valid UTF-8")]
    NotUtf8 {
        /// The index of its last felt.
        at: usize,
    },
    /// A `char` felt that is not the UTF-8 encoding of one character.
    #[error("felt {at} ({felt}) is not a short string of one character")]
    BadChar {
        /// The felt.
        felt: Felt,
        /// Its index.
        at: usize,
    },
    /// The results would encode to more felts than allowed.
    #[error("results encode to more than {limit} felts")]
    TooManyFelts {
        /// The cap.
        limit: usize,
    },
}

// ---- 256-bit big-endian helpers -------------------------------------------------------------

fn sub_be(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut d = i16::from(a[i]) - i16::from(b[i]) - borrow;
        if d < 0 {
            d += 256;
            borrow = 1;
        } else {
            borrow = 0;
        }
        out[i] = d as u8;
    }
    out
}

fn be_of_u128(n: u128) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[16..].copy_from_slice(&n.to_be_bytes());
    out
}

fn u128_of_be(b: &[u8; 32]) -> Option<u128> {
    if b[..16].iter().any(|x| *x != 0) {
        return None;
    }
    let mut lo = [0u8; 16];
    lo.copy_from_slice(&b[16..]);
    Some(u128::from_be_bytes(lo))
}

fn felt_of_be(b: &[u8; 32]) -> Felt {
    // Every caller passes a value below P (a u64, P − |x|, or at most 31 bytes).
    Felt::from_be_bytes(b).unwrap_or_else(|_| Felt::zero())
}

/// The felt for a signed value: `x`, or `P − |x|` when negative.
pub fn felt_from_i64(x: i64) -> Felt {
    if x >= 0 {
        Felt::from(x as u128)
    } else {
        felt_of_be(&sub_be(&PRIME, &be_of_u128(u128::from(x.unsigned_abs()))))
    }
}

/// The signed value of `felt` if it lies in `[min, max]`, reading felts above `P/2` as
/// `−(P − felt)`.
fn signed_of(felt: &Felt, min: i64, max: i64) -> Option<i64> {
    let be = felt.to_be_bytes();
    if let Some(v) = u128_of_be(&be) {
        return i64::try_from(v).ok().filter(|v| *v <= max);
    }
    let magnitude = u128_of_be(&sub_be(&PRIME, &be))?;
    if magnitude <= u128::from(min.unsigned_abs()) {
        // magnitude ≤ 2^63, so the negation fits.
        Some((-(magnitude as i128)) as i64)
    } else {
        None
    }
}

fn bytes_of_short(felt: &Felt) -> Vec<u8> {
    let be = felt.to_be_bytes();
    let start = be.iter().position(|b| *b != 0).unwrap_or(32);
    be[start..].to_vec()
}

/// The felt of a big-endian byte string of at most 31 bytes.
fn felt_of_bytes(bytes: &[u8]) -> Felt {
    let mut be = [0u8; 32];
    be[32 - bytes.len()..].copy_from_slice(bytes);
    felt_of_be(&be)
}

/// The felt of a `char`: its UTF-8 bytes as a short string.
pub fn felt_from_char(c: char) -> Felt {
    let mut buf = [0u8; 4];
    felt_of_bytes(c.encode_utf8(&mut buf).as_bytes())
}

/// Encode `s` as a `ByteArray` onto `out`.
pub fn encode_byte_array(s: &[u8], out: &mut Vec<Felt>) {
    let words = s.chunks_exact(WORD_BYTES);
    let pending = words.remainder();
    out.push(Felt::from((s.len() / WORD_BYTES) as u128));
    for w in words {
        out.push(felt_of_bytes(w));
    }
    out.push(felt_of_bytes(pending));
    out.push(Felt::from(pending.len() as u128));
}

// ---- decoding ------------------------------------------------------------------------------

struct Reader<'a> {
    felts: &'a [Felt],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.felts.len() - self.at
    }

    fn next(&mut self, ty: &dyn fmt::Display) -> Result<(&'a Felt, usize), CodecError> {
        match self.felts.get(self.at) {
            Some(f) => {
                self.at += 1;
                Ok((f, self.at - 1))
            }
            None => Err(CodecError::CalldataEnded {
                ty: ty.to_string(),
                at: self.felts.len(),
            }),
        }
    }

    fn unsigned(&mut self, ty: &Ty, max: u64) -> Result<u64, CodecError> {
        let (felt, at) = self.next(ty)?;
        match felt.to_u128() {
            Some(v) if v <= u128::from(max) => Ok(v as u64),
            _ => Err(CodecError::OutOfRange {
                ty: ty.to_string(),
                felt: felt.clone(),
                at,
            }),
        }
    }

    fn signed(&mut self, ty: &Ty, min: i64, max: i64) -> Result<i64, CodecError> {
        let (felt, at) = self.next(ty)?;
        signed_of(felt, min, max).ok_or_else(|| CodecError::OutOfRange {
            ty: ty.to_string(),
            felt: felt.clone(),
            at,
        })
    }

    fn tag(&mut self, ty: &Ty) -> Result<bool, CodecError> {
        let (felt, at) = self.next(ty)?;
        match felt.to_u128() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(CodecError::BadTag {
                ty: ty.to_string(),
                tag: felt.clone(),
                at,
            }),
        }
    }

    /// A length, checked against what the remaining felts could hold at `per_item` each.
    fn length(&mut self, what: &'static str, per_item: usize) -> Result<usize, CodecError> {
        let (felt, at) = self.next(&what)?;
        let left = self.left();
        let max = left / per_item.max(1);
        match felt.to_u128() {
            Some(n) if n <= max as u128 => Ok(n as usize),
            _ => Err(CodecError::LengthTooLarge {
                what,
                len: felt.clone(),
                max,
                left,
                at,
            }),
        }
    }

    fn byte_array(&mut self) -> Result<Vec<u8>, CodecError> {
        // Data words, each one felt, then the pending word and its length.
        let words = self.length("ByteArray", 1)?;
        if words > self.left().saturating_sub(2) {
            return Err(CodecError::CalldataEnded {
                ty: "string".into(),
                at: self.felts.len(),
            });
        }
        let mut bytes = Vec::with_capacity(words * WORD_BYTES);
        for _ in 0..words {
            let (felt, at) = self.next(&"ByteArray word")?;
            let be = felt.to_be_bytes();
            if be[0] != 0 {
                return Err(CodecError::BadByteArray {
                    reason: format!("word {felt} is longer than 31 bytes"),
                    at,
                });
            }
            bytes.extend_from_slice(&be[1..]);
        }
        let (pending, pending_at) = self.next(&"ByteArray pending word")?;
        let (len, len_at) = self.next(&"ByteArray pending word length")?;
        let len = match len.to_u128() {
            Some(n) if n < WORD_BYTES as u128 => n as usize,
            _ => {
                return Err(CodecError::BadByteArray {
                    reason: format!("pending word length {len} is over 30"),
                    at: len_at,
                });
            }
        };
        let be = pending.to_be_bytes();
        if be[..32 - len].iter().any(|b| *b != 0) {
            return Err(CodecError::BadByteArray {
                reason: format!("pending word {pending} does not fit in {len} bytes"),
                at: pending_at,
            });
        }
        bytes.extend_from_slice(&be[32 - len..]);
        Ok(bytes)
    }

    fn value(&mut self, ty: &Ty) -> Result<Value, CodecError> {
        Ok(match ty {
            Ty::Bool => Value::Bool(self.tag(ty)?),
            Ty::U8 => Value::U8(self.unsigned(ty, u8::MAX.into())? as u8),
            Ty::U16 => Value::U16(self.unsigned(ty, u16::MAX.into())? as u16),
            Ty::U32 => Value::U32(self.unsigned(ty, u32::MAX.into())? as u32),
            Ty::U64 => Value::U64(self.unsigned(ty, u64::MAX)?),
            Ty::S8 => Value::S8(self.signed(ty, i8::MIN.into(), i8::MAX.into())? as i8),
            Ty::S16 => Value::S16(self.signed(ty, i16::MIN.into(), i16::MAX.into())? as i16),
            Ty::S32 => Value::S32(self.signed(ty, i32::MIN.into(), i32::MAX.into())? as i32),
            Ty::S64 => Value::S64(self.signed(ty, i64::MIN, i64::MAX)?),
            Ty::Char => {
                let (felt, at) = self.next(ty)?;
                let bytes = bytes_of_short(felt);
                let bad = || CodecError::BadChar {
                    felt: felt.clone(),
                    at,
                };
                if bytes.is_empty() {
                    Value::Char('\0')
                } else {
                    let s = std::str::from_utf8(&bytes).map_err(|_| bad())?;
                    let mut chars = s.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) => Value::Char(c),
                        _ => return Err(bad()),
                    }
                }
            }
            Ty::String => {
                let bytes = self.byte_array()?;
                let at = self.at.saturating_sub(1);
                Value::String(String::from_utf8(bytes).map_err(|_| CodecError::NotUtf8 { at })?)
            }
            Ty::List(item) => {
                let n = self.length("list", item.min_felts())?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(item)?);
                }
                Value::List(items)
            }
            Ty::Tuple(ts) => {
                let mut items = Vec::with_capacity(ts.len());
                for t in ts {
                    items.push(self.value(t)?);
                }
                Value::Tuple(items)
            }
            Ty::Option(inner) => {
                if self.tag(ty)? {
                    Value::Option(Some(Box::new(self.value(inner)?)))
                } else {
                    Value::Option(None)
                }
            }
            Ty::Result { ok, err } => {
                let is_err = self.tag(ty)?;
                let side = if is_err { err } else { ok };
                let payload = match side {
                    Some(t) => Some(Box::new(self.value(t)?)),
                    None => None,
                };
                Value::Result(if is_err { Err(payload) } else { Ok(payload) })
            }
            other => {
                return Err(CodecError::UnsupportedType {
                    ty: other.unsupported_name().unwrap_or("this type").to_owned(),
                });
            }
        })
    }
}

/// Check that every type nests at most [`MAX_TYPE_DEPTH`] deep.
pub fn check_depth<'a>(types: impl IntoIterator<Item = &'a Ty>) -> Result<(), CodecError> {
    for t in types {
        let depth = t.depth();
        if depth > MAX_TYPE_DEPTH {
            return Err(CodecError::TooDeep {
                depth,
                limit: MAX_TYPE_DEPTH,
            });
        }
    }
    Ok(())
}

/// Decode `calldata` as the arguments of a function taking `params`. All of it must be used.
pub fn decode_args(params: &[Ty], calldata: &[Felt]) -> Result<Vec<Value>, CodecError> {
    check_depth(params)?;
    let mut reader = Reader {
        felts: calldata,
        at: 0,
    };
    let mut out = Vec::with_capacity(params.len());
    for ty in params {
        out.push(reader.value(ty)?);
    }
    if reader.left() > 0 {
        return Err(CodecError::LeftOver {
            left: reader.left(),
            total: calldata.len(),
        });
    }
    Ok(out)
}

// ---- encoding ------------------------------------------------------------------------------

struct Writer {
    out: Vec<Felt>,
    limit: usize,
}

impl Writer {
    fn room(&self, n: usize) -> Result<(), CodecError> {
        if self.out.len().saturating_add(n) > self.limit {
            Err(CodecError::TooManyFelts { limit: self.limit })
        } else {
            Ok(())
        }
    }

    fn push(&mut self, f: Felt) -> Result<(), CodecError> {
        self.room(1)?;
        self.out.push(f);
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<(), CodecError> {
        match v {
            Value::Bool(b) => self.push(Felt::from(u128::from(*b))),
            Value::U8(n) => self.push(Felt::from(u128::from(*n))),
            Value::U16(n) => self.push(Felt::from(u128::from(*n))),
            Value::U32(n) => self.push(Felt::from(u128::from(*n))),
            Value::U64(n) => self.push(Felt::from(u128::from(*n))),
            Value::S8(n) => self.push(felt_from_i64((*n).into())),
            Value::S16(n) => self.push(felt_from_i64((*n).into())),
            Value::S32(n) => self.push(felt_from_i64((*n).into())),
            Value::S64(n) => self.push(felt_from_i64(*n)),
            Value::Char(c) => self.push(felt_from_char(*c)),
            Value::String(s) => {
                self.room(s.len() / WORD_BYTES + 3)?;
                encode_byte_array(s.as_bytes(), &mut self.out);
                Ok(())
            }
            Value::List(items) => {
                self.push(Felt::from(items.len() as u128))?;
                items.iter().try_for_each(|i| self.value(i))
            }
            Value::Tuple(items) => items.iter().try_for_each(|i| self.value(i)),
            Value::Option(None) => self.push(Felt::zero()),
            Value::Option(Some(v)) => {
                self.push(Felt::from(1u128))?;
                self.value(v)
            }
            Value::Result(r) => {
                let (tag, payload) = match r {
                    Ok(p) => (0u128, p),
                    Err(p) => (1u128, p),
                };
                self.push(Felt::from(tag))?;
                match payload {
                    Some(v) => self.value(v),
                    None => Ok(()),
                }
            }
            Value::F32(_) => Err(unsupported("float32")),
            Value::F64(_) => Err(unsupported("float64")),
            Value::Record(_) => Err(unsupported("record")),
            Value::Enum(_) => Err(unsupported("enum")),
            Value::Variant(..) => Err(unsupported("variant")),
            Value::Flags(_) => Err(unsupported("flags")),
        }
    }
}

fn unsupported(ty: &str) -> CodecError {
    CodecError::UnsupportedType { ty: ty.to_owned() }
}

/// Encode a call's results, refusing to produce more than `max_felts` felts.
pub fn encode_results(values: &[Value], max_felts: usize) -> Result<Vec<Felt>, CodecError> {
    let mut w = Writer {
        out: Vec::new(),
        limit: max_felts,
    };
    for v in values {
        w.value(v)?;
    }
    Ok(w.out)
}

/// Encode an oracle failure as Cairo reads an `oracle::Error`: `[1, ByteArray(message)]`.
/// (Success is `[0, ..result felts]`.)
pub fn encode_failure(message: &str) -> Vec<Felt> {
    let mut out = vec![Felt::from(1u128)];
    encode_byte_array(message.as_bytes(), &mut out);
    out
}

/// Decode a `ByteArray` that is the whole of `felts`, as UTF-8 (lossy). For tests and tools
/// that read an encoded failure back.
pub fn decode_byte_array(felts: &[Felt]) -> Result<String, CodecError> {
    let mut r = Reader { felts, at: 0 };
    let bytes = r.byte_array()?;
    if r.left() > 0 {
        return Err(CodecError::LeftOver {
            left: r.left(),
            total: felts.len(),
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

// ---- selectors -----------------------------------------------------------------------------

/// Why a selector names no single function.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// No function has this full or short name.
    #[error("no exported func in component named: {selector}\nnote: available funcs are: {}", available.join(", "))]
    Unknown {
        /// The selector.
        selector: String,
        /// Every full name, sorted.
        available: Vec<String>,
    },
    /// The short name belongs to several functions; use a full name.
    #[error("multiple exports named: {selector}\nnote: possible matches are: {}", candidates.join(", "))]
    Ambiguous {
        /// The selector.
        selector: String,
        /// The full names it could mean, sorted.
        candidates: Vec<String>,
    },
}

/// The exported functions of a component by full name: the export path joined with `/`
/// (`add` at world level, `ns:pkg/iface@1.0.0/add` inside an interface). A selector is a full
/// name, or a short name (the last segment) that only one function has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    names: Vec<String>,
}

impl Selectors {
    /// Functions by full name, in the order the caller will index them.
    pub fn new(full_names: impl IntoIterator<Item = String>) -> Self {
        Self {
            names: full_names.into_iter().collect(),
        }
    }

    /// The full name of the function at an export path.
    pub fn full_name<S: AsRef<str>>(path: &[S]) -> String {
        path.iter().map(AsRef::as_ref).collect::<Vec<_>>().join("/")
    }

    /// The short name of a full name: its last segment.
    pub fn short_name(full: &str) -> &str {
        full.rsplit('/').next().unwrap_or(full)
    }

    /// The full names, in the caller's order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index of the function `selector` names: a full name first, then a unique short one.
    pub fn resolve(&self, selector: &str) -> Result<usize, SelectorError> {
        if let Some(i) = self.names.iter().position(|n| n == selector) {
            return Ok(i);
        }
        let matches: Vec<usize> = (0..self.names.len())
            .filter(|i| Self::short_name(&self.names[*i]) == selector)
            .collect();
        match matches.as_slice() {
            [one] => Ok(*one),
            [] => {
                let mut available = self.names.clone();
                available.sort();
                Err(SelectorError::Unknown {
                    selector: selector.to_owned(),
                    available,
                })
            }
            many => {
                let mut candidates: Vec<String> =
                    many.iter().map(|i| self.names[*i].clone()).collect();
                candidates.sort();
                Err(SelectorError::Ambiguous {
                    selector: selector.to_owned(),
                    candidates,
                })
            }
        }
    }
}

// ---- fuzzing -------------------------------------------------------------------------------

/// Fuzz body (for the `oracle_wasm_codec` cargo-fuzz target and the unit tests).
///
/// The input picks up to three parameter types and then felts (small numbers, numbers near
/// `P`, huge lengths, random 252-bit values). Properties, besides never panicking and never
/// allocating more than the calldata could describe:
/// - calldata that decodes re-encodes to exactly itself (the codec is a bijection on what it
///   accepts);
/// - values generated for the same types encode to felts that decode back to them;
/// - a selector resolves only to a function with that full name, or to the one function
///   with that short name; otherwise the error lists the candidates or every name.
pub fn fuzz(data: &[u8]) {
    let mut c = crate::choices::Choices::new(data);
    let params: Vec<Ty> = (0..c.below(4)).map(|_| gen_ty(&mut c, 0)).collect();
    let count = c.below(64);
    let calldata: Vec<Felt> = (0..count).map(|_| gen_felt(&mut c)).collect();
    if let Ok(values) = decode_args(&params, &calldata) {
        let again = encode_results(&values, usize::MAX).expect("no cap");
        assert_eq!(again, calldata, "decoded calldata re-encodes to itself");
    }
    let values: Vec<Value> = params.iter().map(|t| gen_value(&mut c, t)).collect();
    let felts = encode_results(&values, usize::MAX).expect("no cap");
    assert_eq!(
        decode_args(&params, &felts).as_ref(),
        Ok(&values),
        "encoded values decode back"
    );
    if let Ok(capped) = encode_results(&values, felts.len()) {
        assert_eq!(capped, felts);
    }
    if !felts.is_empty() {
        assert!(encode_results(&values, felts.len() - 1).is_err());
    }
    fuzz_selectors(&mut c);
}

fn gen_ty(c: &mut crate::choices::Choices<'_>, depth: usize) -> Ty {
    let leaf = depth >= 4;
    match c.below(if leaf { 11 } else { 16 }) {
        0 => Ty::Bool,
        1 => Ty::S8,
        2 => Ty::U8,
        3 => Ty::S16,
        4 => Ty::U16,
        5 => Ty::S32,
        6 => Ty::U32,
        7 => Ty::S64,
        8 => Ty::U64,
        9 => Ty::Char,
        10 => Ty::String,
        11 => Ty::List(Box::new(gen_ty(c, depth + 1))),
        12 => Ty::Tuple((0..1 + c.below(3)).map(|_| gen_ty(c, depth + 1)).collect()),
        13 => Ty::Option(Box::new(gen_ty(c, depth + 1))),
        _ => {
            let shape = c.byte();
            Ty::Result {
                ok: (shape & 1 == 1).then(|| Box::new(gen_ty(c, depth + 1))),
                err: (shape & 2 == 2).then(|| Box::new(gen_ty(c, depth + 1))),
            }
        }
    }
}

fn gen_felt(c: &mut crate::choices::Choices<'_>) -> Felt {
    match c.below(8) {
        0..=2 => Felt::from(u128::from(c.byte() % 4)),
        3 => Felt::from(u128::from(c.byte())),
        // Just below P: negative numbers.
        4 => felt_from_i64(-i64::from(c.byte()) - 1),
        5 => Felt::from(u128::from(u64::from_le_bytes(c.array()))),
        6 => {
            let mut be: [u8; 32] = c.array();
            be[0] &= 0x07;
            felt_of_be(&be)
        }
        _ => {
            let n = c.below(32).min(31);
            felt_of_bytes(c.bytes(n))
        }
    }
}

fn gen_value(c: &mut crate::choices::Choices<'_>, ty: &Ty) -> Value {
    match ty {
        Ty::Bool => Value::Bool(c.byte() & 1 == 1),
        Ty::S8 => Value::S8(i8::from_le_bytes(c.array())),
        Ty::U8 => Value::U8(c.byte()),
        Ty::S16 => Value::S16(i16::from_le_bytes(c.array())),
        Ty::U16 => Value::U16(u16::from_le_bytes(c.array())),
        Ty::S32 => Value::S32(i32::from_le_bytes(c.array())),
        Ty::U32 => Value::U32(u32::from_le_bytes(c.array())),
        Ty::S64 => Value::S64(i64::from_le_bytes(c.array())),
        Ty::U64 => Value::U64(u64::from_le_bytes(c.array())),
        Ty::Char => {
            Value::Char(char::from_u32(u32::from_le_bytes(c.array())).unwrap_or('\u{1F980}'))
        }
        Ty::String => {
            let n = c.below(80);
            Value::String(String::from_utf8_lossy(c.bytes(n)).into_owned())
        }
        Ty::List(item) => Value::List((0..c.below(4)).map(|_| gen_value(c, item)).collect()),
        Ty::Tuple(ts) => Value::Tuple(ts.iter().map(|t| gen_value(c, t)).collect()),
        Ty::Option(inner) => Value::Option(if c.byte() & 1 == 1 {
            Some(Box::new(gen_value(c, inner)))
        } else {
            None
        }),
        Ty::Result { ok, err } => {
            if c.byte() & 1 == 1 {
                Value::Result(Err(err.as_ref().map(|t| Box::new(gen_value(c, t)))))
            } else {
                Value::Result(Ok(ok.as_ref().map(|t| Box::new(gen_value(c, t)))))
            }
        }
        // gen_ty makes none of the types the codec does not carry.
        _ => Value::Bool(false),
    }
}

fn fuzz_selectors(c: &mut crate::choices::Choices<'_>) {
    const PARTS: [&str; 4] = ["add", "f", "a:b/i@1.0.0", "c:d/j"];
    let names: Vec<String> = (0..c.below(6))
        .map(|_| match c.below(3) {
            0 => PARTS[c.below(2)].to_owned(),
            _ => format!("{}/{}", PARTS[2 + c.below(2)], PARTS[c.below(2)]),
        })
        .collect();
    let selectors = Selectors::new(names.clone());
    for sel in ["add", "f", "a:b/i@1.0.0/add", "c:d/j/f", "nope"] {
        match selectors.resolve(sel) {
            Ok(i) => {
                let full = &names[i];
                assert!(
                    full == sel
                        || (Selectors::short_name(full) == sel
                            && names
                                .iter()
                                .filter(|n| Selectors::short_name(n) == sel)
                                .count()
                                == 1)
                );
            }
            Err(SelectorError::Unknown { available, .. }) => {
                assert!(
                    !names
                        .iter()
                        .any(|n| n == sel || Selectors::short_name(n) == sel)
                );
                assert_eq!(available.len(), names.len());
            }
            Err(SelectorError::Ambiguous { candidates, .. }) => {
                assert!(candidates.len() >= 2);
                assert!(!names.iter().any(|n| n == sel));
            }
        }
    }
}

#[cfg(test)]
mod tests;
