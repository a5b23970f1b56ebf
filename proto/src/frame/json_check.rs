//! A JSON validator: decides whether bytes are exactly one RFC 8259 JSON text, and builds no
//! value.
//!
//! It accepts exactly what `serde_json::from_str::<IgnoredAny>` accepts after
//! `std::str::from_utf8`, which is what JSON Lines used before (the differential fuzz body
//! [`crate::fuzz::json_check`] holds it to that):
//! - one value, with optional whitespace (` `, `\t`, `\n`, `\r`) around it;
//! - strings: no raw byte below 0x20; escapes `\" \\ \/ \b \f \n \r \t \uXXXX`, where any
//!   `\uXXXX` goes, lone surrogates included (serde_json does not pair them when it ignores a
//!   string); contents valid UTF-8 (outside strings only ASCII can be valid anyway);
//! - numbers `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, of any length;
//! - no nesting limit: serde_json's `ignore_value` keeps its own heap stack and sets none.
//!   Nesting costs one bit per level here, in a `u64` for the innermost 64 levels and a `Vec`
//!   beyond, so only input nested over 64 deep allocates.
//!
//! It is one loop over the bytes, without recursion. UTF-8 is checked first, for the whole
//! input, by `simdutf8` (SIMD on x86_64, chosen at run time, and on aarch64; the std check on
//! wasm32); strings are then scanned 8 bytes at a time with word arithmetic (no `unsafe`, so
//! wasm32 runs the same code). Only input that is not UTF-8 is walked checking each string's
//! bytes over 0x7f with `std::str::from_utf8`, to say where it goes wrong.
//!
//! Two simdjson-style block validators were measured against this walk and left out:
//! - SSE2 bit masks of quotes, escapes, strings and controls per 64 bytes, then only the marked
//!   tokens through the grammar: it won only on long strings, and lost on the dense frames
//!   JSON-RPC sends (17.5 against 13.2 instructions a byte, and many more mispredicted branches,
//!   for one token per 2.4 bytes).
//! - AVX2 (chosen at run time), proving validity 64 bytes at a time with the follow rules as
//!   masks, branch-free bracket steps and a bit stack, and falling back to this walk for any
//!   error: on the round-trip bench's 64 KiB frame (`cargo bench -p sandpipe-proto --bench
//!   framers -- rpc-`, the `lines/rpc-64KiB/check` row) 0.88 against 0.75 GB/s, 9.5 against
//!   10.6 instructions a byte (cachegrind). What is left is per-token work: about 3 bracket
//!   steps and 3 number or literal parses per block, at 30-40 instructions each. 17 % on large
//!   frames did not pay for some 860 lines of SIMD, four of them `unsafe` blocks, in the check
//!   every frame goes through; 2 GB/s would need the object-comma and number checks as masks
//!   too.

use std::fmt;

/// Why input is not JSON, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonError {
    /// Byte offset of the problem.
    pub(crate) offset: usize,
    /// The byte found there (`None` at the end of the input).
    pub(crate) found: Option<u8>,
    pub(crate) kind: ErrorKind,
}

/// What the validator wanted, or what was wrong with what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    ExpectedValue,
    /// `true`, `false` or `null` misspelt or cut short.
    ExpectedLiteral(&'static str),
    /// A key or `}` just after `{`.
    ExpectedKeyOrEnd,
    /// A key after `,` in an object.
    ExpectedKey,
    ExpectedColon,
    ExpectedCommaOrEnd(Container),
    /// A number without a digit where one is required.
    ExpectedDigit,
    InvalidEscape,
    ControlCharacter,
    InvalidUtf8,
    UnterminatedString,
    TrailingCharacters,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Container {
    Array,
    Object,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::ExpectedValue => "expected value",
            ErrorKind::ExpectedLiteral("true") => "invalid literal (expected `true`)",
            ErrorKind::ExpectedLiteral("false") => "invalid literal (expected `false`)",
            ErrorKind::ExpectedLiteral(_) => "invalid literal (expected `null`)",
            ErrorKind::ExpectedKeyOrEnd => "expected string key or `}`",
            ErrorKind::ExpectedKey => "expected string key",
            ErrorKind::ExpectedColon => "expected `:`",
            ErrorKind::ExpectedCommaOrEnd(Container::Array) => "expected `,` or `]`",
            ErrorKind::ExpectedCommaOrEnd(Container::Object) => "expected `,` or `}`",
            ErrorKind::ExpectedDigit => "expected digit",
            ErrorKind::InvalidEscape => "invalid escape",
            ErrorKind::ControlCharacter => "control character in string",
            ErrorKind::InvalidUtf8 => "invalid utf-8 in string",
            ErrorKind::UnterminatedString => "unterminated string",
            ErrorKind::TrailingCharacters => "trailing characters",
        };
        write!(f, "{what} at byte {}", self.offset)?;
        match self.found {
            Some(b) => write!(f, ", found `{}`", [b].escape_ascii()),
            None => write!(f, ", found end of input"),
        }
    }
}

/// Check that `input` is one JSON value with optional whitespace around it.
///
/// UTF-8 is checked first, for the whole input, by `simdutf8` (outside strings only ASCII can
/// be valid anyway, so that is the same as checking the strings); the walk then skips the
/// check. Only input that fails it is walked checking each string, to find where.
pub(crate) fn validate(input: &[u8]) -> Result<(), JsonError> {
    // For short frames of non-ASCII text the call costs more than checking each string as
    // the walk meets it (100 B: 16.2 against 14.7 callgrind instructions a byte), but less for
    // ASCII ones (13.4 against 13.8), which is what protocols mostly send.
    if simdutf8::basic::from_utf8(input).is_ok() {
        walk::<false>(input)
    } else {
        walk::<true>(input)
    }
}

/// The byte walk; `CHECK_UTF8` says whether strings still need their UTF-8 checked.
pub(crate) fn walk<const CHECK_UTF8: bool>(input: &[u8]) -> Result<(), JsonError> {
    let mut nesting = Nesting::default();
    let mut outer = Vec::new();
    let mut pos = 0;
    'value: loop {
        pos = skip_whitespace(input, pos);
        match input.get(pos) {
            Some(b'{') => {
                pos = skip_whitespace(input, pos + 1);
                if input.get(pos) == Some(&b'}') {
                    pos += 1;
                } else {
                    nesting.push(Container::Object, &mut outer);
                    pos = key::<CHECK_UTF8>(input, pos, ErrorKind::ExpectedKeyOrEnd)?;
                    continue 'value;
                }
            }
            Some(b'[') => {
                pos = skip_whitespace(input, pos + 1);
                if input.get(pos) == Some(&b']') {
                    pos += 1;
                } else {
                    nesting.push(Container::Array, &mut outer);
                    continue 'value;
                }
            }
            Some(b'"') => pos = string::<CHECK_UTF8>(input, pos + 1)?,
            Some(b'-' | b'0'..=b'9') => pos = number(input, pos)?,
            Some(b't') => pos = literal(input, pos, "true")?,
            Some(b'f') => pos = literal(input, pos, "false")?,
            Some(b'n') => pos = literal(input, pos, "null")?,
            _ => return Err(error(input, pos, ErrorKind::ExpectedValue)),
        }
        // A value is complete: close containers until one goes on after a `,`.
        loop {
            pos = skip_whitespace(input, pos);
            let Some(container) = nesting.top() else {
                if pos == input.len() {
                    return Ok(());
                }
                return Err(error(input, pos, ErrorKind::TrailingCharacters));
            };
            match (input.get(pos), container) {
                (Some(b','), Container::Array) => {
                    pos += 1;
                    continue 'value;
                }
                (Some(b','), Container::Object) => {
                    pos = key::<CHECK_UTF8>(
                        input,
                        skip_whitespace(input, pos + 1),
                        ErrorKind::ExpectedKey,
                    )?;
                    continue 'value;
                }
                (Some(b']'), Container::Array) | (Some(b'}'), Container::Object) => {
                    pos += 1;
                    nesting.pop(&mut outer);
                }
                _ => return Err(error(input, pos, ErrorKind::ExpectedCommaOrEnd(container))),
            }
        }
    }
}

#[cold]
fn error(input: &[u8], offset: usize, kind: ErrorKind) -> JsonError {
    JsonError {
        offset,
        found: input.get(offset).copied(),
        kind,
    }
}

#[inline(always)]
fn skip_whitespace(input: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = input.get(pos) {
        pos += 1;
    }
    pos
}

/// An object key and its `:`, from `pos` (past any whitespace); returns the position after
/// the `:`. `missing` says what was expected if no key starts at `pos`.
#[inline(always)]
fn key<const CHECK_UTF8: bool>(
    input: &[u8],
    pos: usize,
    missing: ErrorKind,
) -> Result<usize, JsonError> {
    if input.get(pos) != Some(&b'"') {
        return Err(error(input, pos, missing));
    }
    let pos = skip_whitespace(input, string::<CHECK_UTF8>(input, pos + 1)?);
    if input.get(pos) != Some(&b':') {
        return Err(error(input, pos, ErrorKind::ExpectedColon));
    }
    Ok(pos + 1)
}

#[inline(always)]
fn literal(input: &[u8], pos: usize, word: &'static str) -> Result<usize, JsonError> {
    let end = pos + word.len();
    if input.get(pos..end) == Some(word.as_bytes()) {
        Ok(end)
    } else {
        // Point at the first byte that differs (`this` is wrong at its `h`, not its `t`).
        let same = word
            .bytes()
            .zip(&input[pos..])
            .take_while(|(w, b)| w == *b)
            .count();
        Err(error(input, pos + same, ErrorKind::ExpectedLiteral(word)))
    }
}

/// A number starting at `pos` (a `-` or a digit); returns the position after it.
#[inline(always)]
fn number(input: &[u8], mut pos: usize) -> Result<usize, JsonError> {
    if input.get(pos) == Some(&b'-') {
        pos += 1;
    }
    match input.get(pos) {
        // A leading zero stands alone: `01` ends the number after the `0`, and whatever
        // reads the next byte rejects the `1`.
        Some(b'0') => pos += 1,
        Some(b'1'..=b'9') => pos = digits(input, pos + 1),
        _ => return Err(error(input, pos, ErrorKind::ExpectedDigit)),
    }
    if input.get(pos) == Some(&b'.') {
        pos = some_digits(input, pos + 1)?;
    }
    if let Some(b'e' | b'E') = input.get(pos) {
        pos += 1;
        if let Some(b'+' | b'-') = input.get(pos) {
            pos += 1;
        }
        pos = some_digits(input, pos)?;
    }
    Ok(pos)
}

/// One or more digits from `pos`; returns the position after them.
#[inline(always)]
fn some_digits(input: &[u8], pos: usize) -> Result<usize, JsonError> {
    match input.get(pos) {
        Some(b'0'..=b'9') => Ok(digits(input, pos + 1)),
        _ => Err(error(input, pos, ErrorKind::ExpectedDigit)),
    }
}

/// Digits from `pos`, eight at a time; returns the position after them.
#[inline(always)]
fn digits(input: &[u8], mut pos: usize) -> usize {
    while let Some(chunk) = input.get(pos..).and_then(<[u8]>::first_chunk::<8>) {
        let count = leading_digits(u64::from_le_bytes(*chunk));
        pos += count;
        if count < 8 {
            return pos;
        }
    }
    while let Some(b'0'..=b'9') = input.get(pos) {
        pos += 1;
    }
    pos
}

/// How many ASCII digits `word` (little-endian) starts with, 0 to 8.
#[inline(always)]
fn leading_digits(word: u64) -> usize {
    // After the xor a digit byte is below 10: its high bit is clear, and adding 0x76 to its
    // low seven bits does not set it (no carry leaves a byte, as 0x7f + 0x76 < 0x100).
    let x = word ^ (LOW_BITS * u64::from(b'0'));
    let not_digits = (((x & !HIGH_BITS) + LOW_BITS * 0x76) | x) & HIGH_BITS;
    (not_digits.trailing_zeros() / 8) as usize
}

const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is zero. Bytes above the lowest zero byte may be
/// flagged wrongly (a borrow runs upward), but the lowest flag is always right, and that is
/// the only one read.
#[inline(always)]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(LOW_BITS) & !word & HIGH_BITS
}

/// The high bit of each byte of `word` below 0x20, with the same caveat as [`zero_bytes`].
#[inline(always)]
fn control_bytes(word: u64) -> u64 {
    word.wrapping_sub(LOW_BITS * 0x20) & !word & HIGH_BITS
}

/// A string's contents from `pos` (just past the opening `"`); returns the position after
/// the closing `"`.
#[inline(always)]
fn string<const CHECK_UTF8: bool>(input: &[u8], mut pos: usize) -> Result<usize, JsonError> {
    // Bytes from `unchecked` to `pos` have not been checked as UTF-8; `high` collects their
    // bits, so a stretch of ASCII skips the check.
    let mut unchecked = pos;
    let mut high = 0u64;
    loop {
        // Eight bytes at a time (little-endian, so the lowest flag is the first byte), until
        // a `"`, `\` or control byte.
        if let Some(chunk) = input.get(pos..).and_then(<[u8]>::first_chunk::<8>) {
            let word = u64::from_le_bytes(*chunk);
            let quotes = zero_bytes(word ^ (LOW_BITS * u64::from(b'"')));
            let stops =
                quotes | zero_bytes(word ^ (LOW_BITS * u64::from(b'\\'))) | control_bytes(word);
            if stops == 0 {
                if CHECK_UTF8 {
                    high |= word;
                }
                pos += 8;
                continue;
            }
            let first = stops & stops.wrapping_neg();
            if CHECK_UTF8 {
                high |= word & (first - 1);
            }
            pos += (first.trailing_zeros() / 8) as usize;
            // The lowest quote flag is right too, so it marks a real `"` if it is the first stop.
            if first & quotes != 0 {
                if CHECK_UTF8 && high & HIGH_BITS != 0 {
                    check_utf8(input, unchecked, pos)?;
                }
                return Ok(pos + 1);
            }
        }
        // At a `\` or control byte, or within 8 bytes of the end.
        let Some(&byte) = input.get(pos) else {
            return Err(error(input, pos, ErrorKind::UnterminatedString));
        };
        match byte {
            b'"' | b'\\' => {
                if CHECK_UTF8 && high & HIGH_BITS != 0 {
                    check_utf8(input, unchecked, pos)?;
                    high = 0;
                }
                if byte == b'"' {
                    return Ok(pos + 1);
                }
                pos = escape(input, pos)?;
                unchecked = pos;
            }
            0..0x20 => return Err(error(input, pos, ErrorKind::ControlCharacter)),
            _ => {
                if CHECK_UTF8 {
                    high |= u64::from(byte);
                }
                pos += 1;
            }
        }
    }
}

#[cold]
fn check_utf8(input: &[u8], start: usize, end: usize) -> Result<(), JsonError> {
    match std::str::from_utf8(&input[start..end]) {
        Ok(_) => Ok(()),
        Err(e) => Err(error(
            input,
            start + e.valid_up_to(),
            ErrorKind::InvalidUtf8,
        )),
    }
}

/// An escape at `pos` (the `\`); returns the position after it.
#[inline(always)]
fn escape(input: &[u8], pos: usize) -> Result<usize, JsonError> {
    match input.get(pos + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(pos + 2),
        Some(b'u') => {
            for at in pos + 2..pos + 6 {
                if !input.get(at).is_some_and(u8::is_ascii_hexdigit) {
                    return Err(error(input, at, ErrorKind::InvalidEscape));
                }
            }
            Ok(pos + 6)
        }
        _ => Err(error(input, pos + 1, ErrorKind::InvalidEscape)),
    }
}

/// The open containers, one bit each (1 = object): the innermost 64 in `inner`, the lowest
/// bit innermost, and full words of outer levels in a `Vec` kept apart (so that this struct
/// stays in registers).
#[derive(Debug, Default)]
struct Nesting {
    depth: usize,
    inner: u64,
}

impl Nesting {
    #[inline(always)]
    fn push(&mut self, container: Container, outer: &mut Vec<u64>) {
        if self.depth > 0 && self.depth.is_multiple_of(64) {
            spill(outer, self.inner);
            self.inner = 0;
        }
        self.inner = (self.inner << 1) | u64::from(container == Container::Object);
        self.depth += 1;
    }

    /// Close the innermost container; only called when `top` returned one.
    #[inline(always)]
    fn pop(&mut self, outer: &mut Vec<u64>) {
        self.depth -= 1;
        self.inner >>= 1;
        if self.depth > 0 && self.depth.is_multiple_of(64) {
            self.inner = outer.pop().unwrap_or_default();
        }
    }

    #[inline(always)]
    fn top(&self) -> Option<Container> {
        match (self.depth, self.inner & 1) {
            (0, _) => None,
            (_, 0) => Some(Container::Array),
            _ => Some(Container::Object),
        }
    }
}

#[cold]
fn spill(outer: &mut Vec<u64>, word: u64) {
    outer.push(word);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::json_check as agrees_with_serde_json;

    /// A tiny deterministic generator, so the generated cases are the same on every run.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Valid documents that the mutations start from.
    const VALID: &[&[u8]] = &[
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"items\":[{\"k\":\"k0\",\"v\":0,\"ok\":true},{\"k\":\"k1\",\"v\":7919,\"ok\":true}],\"pad\":\"xxxxxxxxxxxxxxxxxxxxx\"}}",
        b" [ 1 , -0 , 0.5 , -12.25e+3 , 1E-7 , 6.02e23 , 1e999999999999 , 123456789012345678901234567890 ] ",
        b"\"escapes \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \\ud800 \\udfff x\"",
        "\"utf-8: \u{e9} \u{20ac} \u{1f600} \u{7f} \u{10ffff} and a longer ascii tail\"".as_bytes(),
        b"{\"a\":{\"b\":[[],{},[{}],\"\",null,false]},\"c\":\"\",\"\":{}}\t\r\n",
        b"[true,false,null,{\"nested\":[[[[[[[[1]]]]]]]]}]",
        b"0",
        b"\"12345678\"",
    ];

    /// Bytes that often change what a parser does.
    const INTERESTING: &[u8] = b"\"\\,:[]{}0123456789-+.eEtfnu \t\r\n\x00\x1f\x7f\x80\xbf\xc0\xc3\xe0\xed\xf0\xf4\xf5\xff/abx";

    #[test]
    fn table() {
        let cases: &[(&[u8], bool)] = &[
            (b"", false),
            (b" \t\r\n", false),
            (b"1 2", false),
            (b"{} x", false),
            (b"[1,]", false),
            (b"[,1]", false),
            (b"{\"a\":1,}", false),
            (b"{\"a\" 1}", false),
            (b"{1:2}", false),
            (b"-", false),
            (b"01", false),
            (b"-01", false),
            (b"1.", false),
            (b".5", false),
            (b"1e", false),
            (b"1e+", false),
            (b"+1", false),
            (b"-0", true),
            (b"1E+5", true),
            (b"1e-0005", true),
            (b"1.0e999999999999999999999", true),
            (b"\"\\ud800\"", true),
            (b"\"\\udc00\\ud800\"", true),
            (b"\"\\u12\"", false),
            (b"\"\\u12g4\"", false),
            (b"\"\\x\"", false),
            (b"\"\x1f\"", false),
            (b"\"\x7f\"", true),
            (b"\"\xed\xa0\x80\"", false),
            (b"\"\xc0\xaf\"", false),
            (b"\"\xe0\x80\xaf\"", false),
            (b"\"\xf4\x90\x80\x80\"", false),
            (b"\"\xf4\x8f\xbf\xbf\"", true),
            (b"\xef\xbb\xbf{}", false),
            (b"tru", false),
            (b"nul", false),
            (b"truex", false),
            (b"[true}", false),
            (b"{\"a\":1]", false),
            (b"\"abc", false),
            (b"\"abcdefghijklmnop", false),
            (b"\"abcdefghij\\", false),
        ];
        for &(input, valid) in cases {
            assert_eq!(
                validate(input).is_ok(),
                valid,
                "{:?}",
                input.escape_ascii().to_string()
            );
            agrees_with_serde_json(input);
        }
    }

    #[test]
    fn errors_say_where_and_what() {
        let cases: &[(&[u8], &str)] = &[
            (b"[1,x]", "expected value at byte 3, found `x`"),
            (b"{\"a\" 1}", "expected `:` at byte 5, found `1`"),
            (b"[1", "expected `,` or `]` at byte 2, found end of input"),
            (
                b"\"a\x01\"",
                "control character in string at byte 2, found `\\x01`",
            ),
            (
                b"\"ab\xff\"",
                "invalid utf-8 in string at byte 3, found `\\xff`",
            ),
            (b"1 2", "trailing characters at byte 2, found `2`"),
            (b"-x", "expected digit at byte 1, found `x`"),
            (
                b"this is not json",
                "invalid literal (expected `true`) at byte 1, found `h`",
            ),
            (
                b"[nul]",
                "invalid literal (expected `null`) at byte 4, found `]`",
            ),
            (
                b"fals",
                "invalid literal (expected `false`) at byte 4, found end of input",
            ),
        ];
        for &(input, want) in cases {
            let err = validate(input).expect_err("invalid");
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn every_prefix_and_single_byte_mutation_of_valid_documents() {
        for doc in VALID {
            agrees_with_serde_json(doc);
            for cut in 0..doc.len() {
                agrees_with_serde_json(&doc[..cut]);
                agrees_with_serde_json(&doc[cut..]);
                let mut removed = doc.to_vec();
                removed.remove(cut);
                agrees_with_serde_json(&removed);
                for &b in INTERESTING {
                    let mut replaced = doc.to_vec();
                    replaced[cut] = b;
                    agrees_with_serde_json(&replaced);
                    let mut inserted = doc.to_vec();
                    inserted.insert(cut, b);
                    agrees_with_serde_json(&inserted);
                }
            }
        }
    }

    #[test]
    fn random_mutations_of_valid_documents() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for doc in VALID {
            for _ in 0..3000 {
                let mut data = doc.to_vec();
                for _ in 0..=rng.below(4) {
                    let at = rng.below(data.len() + 1);
                    let byte = if rng.below(2) == 0 {
                        INTERESTING[rng.below(INTERESTING.len())]
                    } else {
                        rng.next() as u8
                    };
                    match rng.below(3) {
                        0 if at < data.len() => data[at] = byte,
                        1 if at < data.len() => {
                            data.remove(at);
                        }
                        _ => data.insert(at, byte),
                    }
                }
                agrees_with_serde_json(&data);
            }
        }
    }

    #[test]
    fn every_two_and_three_byte_sequence_in_and_out_of_strings() {
        for first in 0..=255u8 {
            for second in 0..=255u8 {
                agrees_with_serde_json(&[b'"', first, second, b'"']);
                agrees_with_serde_json(&[
                    b'"', b'a', first, second, b'a', b'b', b'c', b'd', b'e', b'"',
                ]);
                agrees_with_serde_json(&[first, second]);
            }
        }
        let continuation = [0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0];
        for first in 0xc0..=0xffu8 {
            for &second in &continuation {
                for &third in &continuation {
                    for &fourth in &continuation {
                        agrees_with_serde_json(&[b'"', first, second, third, fourth, b'"']);
                        agrees_with_serde_json(&[b'"', first, second, third, b'"']);
                    }
                }
            }
        }
    }

    /// simdutf8 checks a whole input in SIMD blocks and then its tail, so long documents with
    /// text over 0x7f, mutated at every few offsets (invalid UTF-8 among the mutations), go
    /// through both before the walk that trusts them.
    #[test]
    fn long_non_ascii_input_agrees_too() {
        for doc in VALID {
            for pad in [100, 317] {
                let long = [
                    &b"[\""[..],
                    "\u{e9}\u{20ac}\u{1f600} ".repeat(pad / 10 + 1).as_bytes(),
                    b"\",",
                    doc,
                    b"]",
                ]
                .concat();
                agrees_with_serde_json(&long);
                for cut in (0..long.len()).step_by(7) {
                    agrees_with_serde_json(&long[..cut]);
                    for &b in INTERESTING {
                        let mut replaced = long.clone();
                        replaced[cut] = b;
                        agrees_with_serde_json(&replaced);
                    }
                }
            }
        }
    }

    #[test]
    fn deep_nesting_has_no_limit_as_in_serde_json() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        for depth in [1, 63, 64, 65, 127, 128, 129, 130, 192, 10_000] {
            // A random mix of arrays and objects, closed properly, then with one closer wrong,
            // one missing, and one too many.
            let kinds: Vec<Container> = (0..depth)
                .map(|_| {
                    if rng.below(2) == 0 {
                        Container::Array
                    } else {
                        Container::Object
                    }
                })
                .collect();
            let mut doc = Vec::new();
            for kind in &kinds {
                doc.extend_from_slice(match kind {
                    Container::Array => b"[",
                    Container::Object => b"{\"k\":",
                });
            }
            doc.push(b'0');
            for kind in kinds.iter().rev() {
                doc.push(match kind {
                    Container::Array => b']',
                    Container::Object => b'}',
                });
            }
            assert!(validate(&doc).is_ok(), "depth {depth}");
            agrees_with_serde_json(&doc);
            for _ in 0..20 {
                let closer = doc.len() - 1 - rng.below(depth);
                let mut wrong = doc.clone();
                wrong[closer] = if wrong[closer] == b']' { b'}' } else { b']' };
                assert!(validate(&wrong).is_err(), "depth {depth}");
                agrees_with_serde_json(&wrong);
                let mut missing = doc.clone();
                missing.remove(closer);
                agrees_with_serde_json(&missing);
            }
            agrees_with_serde_json(&[&doc[..], b"]"].concat());
            agrees_with_serde_json(&doc[..doc.len() - 1]);
            // Only arrays, so that word boundaries of the nesting bits are hit exactly.
            let arrays = [vec![b'['; depth], vec![b']'; depth]].concat();
            assert!(validate(&arrays).is_ok(), "depth {depth}");
            agrees_with_serde_json(&arrays);
        }
    }
}
