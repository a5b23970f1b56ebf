//! The component-model value model: types and values as the host reads them from a
//! component's exports, and the codec's errors.

use std::fmt;

use thiserror::Error;

use crate::oracle::Felt;

/// Deepest type nesting the codec accepts (`list<list<…>>`); deeper types are refused when a
/// function's signature is read, so neither direction recurses without bound.
pub const MAX_TYPE_DEPTH: usize = 32;

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
    pub(super) fn min_felts(&self) -> usize {
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
    pub(super) fn unsupported_name(&self) -> Option<&'static str> {
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
