//! A component's exported functions as values, sans-IO: the component-model value model every
//! caller of exports meets ([`Ty`], [`Value`]), selector resolution over the functions
//! ([`Selectors`]), and the Cairo-Serde felt codec that carries a subset of the values for
//! `wasm:` oracles ([`decode_args`], [`encode_results`], [`check_supported`]).
//!
//! A `wasm:` oracle is a WASI 0.2 component whose exported functions the Cairo executor calls
//! with arguments decoded from felts. The executor (the host's `sandbox`) walks the component's
//! exports, resolves the selector here ([`Selectors`]), turns the function's parameter types
//! into [`Ty`]s, decodes the calldata ([`decode_args`]), calls the guest, and encodes the
//! results ([`encode_results`]). MCP serves the same functions as tools
//! ([`crate::mcp::exports`]), mapping JSON to the same values.
//!
//! Files: `types.rs` the model (`Ty`, `Value`, `CodecError`), this file the codec and the
//! selectors, `fuzz.rs` the fuzz body, `tests.rs` the unit tests.
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
//! use sandpipe_proto::component::{Ty, Value, decode_args, encode_results};
//!
//! let calldata = [Felt::from(2u128), Felt::from(7u128), Felt::from(9u128)];
//! let args = decode_args(&[Ty::List(Box::new(Ty::U64))], &calldata).unwrap();
//! assert_eq!(args, vec![Value::List(vec![Value::U64(7), Value::U64(9)])]);
//! let felts = encode_results(&[Value::S8(-1)], 16).unwrap();
//! assert_eq!(felts[0].as_str(), "0x800000000000011000000000000000000000000000000000000000000000000");
//! ```

mod fuzz;
mod types;

pub use fuzz::fuzz;
pub use types::*;

use std::fmt;

use thiserror::Error;

use crate::oracle::Felt;

/// The field prime `P = 2^251 + 17·2^192 + 1`, big-endian.
const PRIME: [u8; 32] = [
    0x08, 0, 0, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0x01,
];

/// Bytes in a full `ByteArray` word.
pub const WORD_BYTES: usize = 31;

/// The default cap on the felts one call's results may encode to.
pub const DEFAULT_MAX_RESULT_FELTS: usize = 1 << 20;

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

pub(super) fn felt_of_be(b: &[u8; 32]) -> Felt {
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
pub(super) fn felt_of_bytes(bytes: &[u8]) -> Felt {
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

#[cfg(test)]
mod tests;
