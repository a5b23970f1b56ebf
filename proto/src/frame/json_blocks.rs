//! The fast path of [`super::json_check`]: JSON validation 64 bytes at a time with SSE2, in
//! the way of simdjson's two stages, without building anything.
//!
//! Stage one classifies each 64-byte block into bit masks (quotes, backslashes, whitespace,
//! `{}[]:,`, control bytes, bytes over 0x7f) and from them finds which quotes are escaped and
//! which bytes lie inside strings, carrying the state from block to block. A string's contents
//! are then checked for the whole block at once: no control byte, and every escaped byte one
//! of `"\/bfnrtu` (a `u` followed by four hex digits). Stage two walks only the tokens the
//! masks mark (each `{}[]:,` outside strings, each string's opening quote, each run of other
//! bytes outside strings) through the grammar, with the nesting kept as bits as the scalar
//! validator keeps it. A run of other bytes must be exactly one number or literal. UTF-8 is
//! checked once, for the whole input, by `simdutf8`, and only if some byte is over 0x7f
//! (outside strings such a byte is a syntax error anyway, so checking all of the input is the
//! same as checking the strings).
//!
//! It answers only whether the input is valid: [`super::json_check::validate`] runs the scalar
//! validator on a rejected input to say where and why, so the two must agree exactly (the
//! unit tests and the differential fuzz body compare both against serde_json).

use std::arch::x86_64::{
    __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x,
    _mm_set1_epi8,
};

use super::json_check::{Container, Nesting, literal_end, number_end};

/// Bits of one 64-byte block, bit `i` for byte `i`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Masks {
    pub(crate) quote: u64,
    pub(crate) backslash: u64,
    /// ` `, `\t`, `\n`, `\r`.
    pub(crate) whitespace: u64,
    /// `{`, `}`, `[`, `]`, `:`, `,`.
    pub(crate) op: u64,
    /// Below 0x20.
    pub(crate) control: u64,
    /// Over 0x7f.
    pub(crate) high: u64,
}

#[target_feature(enable = "sse2")]
fn load(bytes: &[u8; 16]) -> __m128i {
    // Two word loads that the compiler merges into one unaligned vector load, without the
    // raw pointer `_mm_loadu_si128` would take.
    let (lo, hi) = bytes.split_at(8);
    let word = |half: &[u8]| i64::from_le_bytes(half.try_into().unwrap_or_default());
    _mm_set_epi64x(word(hi), word(lo))
}

/// Classify 16 bytes: `[quote, backslash, whitespace, op, control, high]`, 16 bits each.
#[target_feature(enable = "sse2")]
fn classify16(bytes: &[u8; 16]) -> [u64; 6] {
    let v = load(bytes);
    let eq = |c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
    // `[` and `]` are `{` and `}` with bit 5 clear.
    let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
    let eq_folded = |c: u8| _mm_cmpeq_epi8(folded, _mm_set1_epi8(c as i8));
    let bits = |m: __m128i| u64::from(_mm_movemask_epi8(m) as u16);
    let whitespace = _mm_or_si128(
        _mm_or_si128(eq(b' '), eq(b'\t')),
        _mm_or_si128(eq(b'\n'), eq(b'\r')),
    );
    let op = _mm_or_si128(
        _mm_or_si128(eq_folded(b'{'), eq_folded(b'}')),
        _mm_or_si128(eq(b':'), eq(b',')),
    );
    // Unsigned `c < 0x20` is `min(c, 0x1f) == c`.
    let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
    [
        bits(eq(b'"')),
        bits(eq(b'\\')),
        bits(whitespace),
        bits(op),
        bits(control),
        u64::from(_mm_movemask_epi8(v) as u16),
    ]
}

/// Classify a 64-byte block.
#[target_feature(enable = "sse2")]
pub(crate) fn classify(block: &[u8; 64]) -> Masks {
    let mut m = [0u64; 6];
    for (i, chunk) in block.as_chunks::<16>().0.iter().enumerate() {
        for (mask, bits) in m.iter_mut().zip(classify16(chunk)) {
            *mask |= bits << (16 * i);
        }
    }
    Masks {
        quote: m[0],
        backslash: m[1],
        whitespace: m[2],
        op: m[3],
        control: m[4],
        high: m[5],
    }
}

const EVEN_BITS: u64 = 0x5555_5555_5555_5555;

/// The bytes escaped by a backslash, given the block's backslashes; `carry` is 1 when the
/// block's first byte is escaped by the previous block's last backslash, and is updated for
/// the next block. simdjson's `find_escaped_branchless`: in each run of backslashes every
/// other one escapes the byte after it, and an add finds where each run ends.
pub(crate) fn escaped(backslash: u64, carry: &mut u64) -> u64 {
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN_BITS & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN_BITS ^ (even_starts << 1)) & follows_escape
}

/// Each bit set where an odd number of bits at or below it are set in `x`.
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// What the grammar expects at the next token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    /// Just after `[`.
    ValueOrClose,
    /// Just after `{`.
    KeyOrClose,
    /// After `,` in an object.
    Key,
    Colon,
    CommaOrClose,
    /// The top-level value is complete.
    End,
}

/// The walk's state between blocks.
#[derive(Debug)]
struct Walk<'a> {
    input: &'a [u8],
    expect: Expect,
    nesting: Nesting,
    outer: Vec<u64>,
    /// 1 if the next block's first byte is escaped.
    escape_carry: u64,
    /// All ones if the next block starts inside a string.
    in_string: u64,
    /// 1 if the previous block's last byte was part of a number or literal run.
    scalar_carry: u64,
    high: u64,
}

/// Whether `input` is exactly one JSON value with optional whitespace around it, as
/// [`super::json_check::validate`] decides.
#[target_feature(enable = "sse2")]
pub(crate) fn is_valid(input: &[u8]) -> bool {
    let mut walk = Walk {
        input,
        expect: Expect::Value,
        nesting: Nesting::default(),
        outer: Vec::new(),
        escape_carry: 0,
        in_string: 0,
        scalar_carry: 0,
        high: 0,
    };
    let (blocks, rest) = input.as_chunks::<64>();
    for (i, block) in blocks.iter().enumerate() {
        if !walk.block(block, i * 64) {
            return false;
        }
    }
    if !rest.is_empty() {
        // Spaces are whitespace outside a string, and leave an open string open.
        let mut padded = [b' '; 64];
        padded[..rest.len()].copy_from_slice(rest);
        if !walk.block(&padded, blocks.len() * 64) {
            return false;
        }
    }
    walk.expect == Expect::End
        && walk.in_string == 0
        && (walk.high == 0 || simdutf8::basic::from_utf8(input).is_ok())
}

impl Walk<'_> {
    /// The block at `base`; false if it makes the input invalid.
    #[target_feature(enable = "sse2")]
    fn block(&mut self, block: &[u8; 64], base: usize) -> bool {
        let m = classify(block);
        self.high |= m.high;
        let escaped = escaped(m.backslash, &mut self.escape_carry);
        let quote = m.quote & !escaped;
        // Inside a string: its opening quote and contents, not its closing quote.
        let string = prefix_xor(quote) ^ self.in_string;
        self.in_string = ((string as i64) >> 63) as u64;
        if m.control & string != 0 {
            return false;
        }
        let mut escapes = escaped & string;
        while escapes != 0 {
            if !self.escape_ok(base + escapes.trailing_zeros() as usize) {
                return false;
            }
            escapes &= escapes - 1;
        }
        let outside = !string & !quote;
        let scalar = outside & !m.whitespace & !m.op;
        let scalar_starts = scalar & !((scalar << 1) | self.scalar_carry);
        self.scalar_carry = scalar >> 63;
        let mut tokens = (m.op & outside) | (quote & string) | scalar_starts;
        while tokens != 0 {
            let at = tokens.trailing_zeros() as usize;
            tokens &= tokens - 1;
            if !self.token(block[at], base + at) {
                return false;
            }
        }
        true
    }

    /// The escaped byte at `at` (just after its backslash).
    fn escape_ok(&self, at: usize) -> bool {
        match self.input.get(at) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => true,
            Some(b'u') => self
                .input
                .get(at + 1..at + 5)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)),
            _ => false,
        }
    }

    /// After a complete value.
    fn value_done(&self) -> Expect {
        if self.nesting.top().is_some() {
            Expect::CommaOrClose
        } else {
            Expect::End
        }
    }

    /// A number or literal starting at `at`; it must run up to a delimiter.
    fn scalar(&self, at: usize) -> bool {
        let end = match self.input.get(at) {
            Some(b'-' | b'0'..=b'9') => number_end(self.input, at),
            Some(b't') => literal_end(self.input, at, "true"),
            Some(b'f') => literal_end(self.input, at, "false"),
            Some(b'n') => literal_end(self.input, at, "null"),
            _ => None,
        };
        end.is_some_and(|end| {
            matches!(
                self.input.get(end),
                None | Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}' | b':' | b'"')
            )
        })
    }

    /// One token: `byte`, at `at`, is an op outside strings, a string's opening quote, or the
    /// first byte of a run of other bytes outside strings.
    fn token(&mut self, byte: u8, at: usize) -> bool {
        self.expect = match (self.expect, byte) {
            (Expect::Value | Expect::ValueOrClose, b'{') => {
                self.nesting.push(Container::Object, &mut self.outer);
                Expect::KeyOrClose
            }
            (Expect::Value | Expect::ValueOrClose, b'[') => {
                self.nesting.push(Container::Array, &mut self.outer);
                Expect::ValueOrClose
            }
            (Expect::Value | Expect::ValueOrClose, b'"') => self.value_done(),
            (Expect::ValueOrClose, b']') | (Expect::KeyOrClose, b'}') => {
                self.nesting.pop(&mut self.outer);
                self.value_done()
            }
            (Expect::Value | Expect::ValueOrClose, b',' | b':' | b']' | b'}') => return false,
            (Expect::Value | Expect::ValueOrClose, _) => {
                if !self.scalar(at) {
                    return false;
                }
                self.value_done()
            }
            (Expect::KeyOrClose | Expect::Key, b'"') => Expect::Colon,
            (Expect::Colon, b':') => Expect::Value,
            (Expect::CommaOrClose, b',') => match self.nesting.top() {
                Some(Container::Array) => Expect::Value,
                _ => Expect::Key,
            },
            (Expect::CommaOrClose, b']' | b'}') => {
                let want = if byte == b']' {
                    Container::Array
                } else {
                    Container::Object
                };
                if self.nesting.top() != Some(want) {
                    return false;
                }
                self.nesting.pop(&mut self.outer);
                self.value_done()
            }
            _ => return false,
        };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::json_check as agrees_with_serde_json;

    /// The escaped bytes of `input`, one byte at a time.
    fn escaped_reference(input: &[u8]) -> Vec<bool> {
        let mut out = vec![false; input.len()];
        let mut escape_next = false;
        for (i, &b) in input.iter().enumerate() {
            out[i] = escape_next;
            escape_next = !escape_next && b == b'\\';
        }
        out
    }

    #[test]
    fn escaped_bytes_match_a_byte_walk_across_blocks() {
        let mut seed = 0x853c_49e6_748f_ea9bu64;
        for round in 0..2000 {
            let len = 64 * (1 + round % 4);
            // Backslash runs of every length, most often short, at every alignment.
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    if seed % (2 + round as u64 % 5) == 0 {
                        b'a'
                    } else {
                        b'\\'
                    }
                })
                .collect();
            let want = escaped_reference(&input);
            let mut carry = 0;
            for (i, block) in input.chunks(64).enumerate() {
                let backslash = block
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (j, &b)| m | (u64::from(b == b'\\') << j));
                let got = escaped(backslash, &mut carry);
                for j in 0..64 {
                    assert_eq!(got >> j & 1 == 1, want[i * 64 + j], "round {round} byte {j}");
                }
            }
        }
    }

    #[test]
    fn classify_marks_each_class() {
        let mut block = [b'a'; 64];
        block[..16].copy_from_slice(b"\"\\ \t\n\r{}[]:,\x00\x1f\x7f\x80");
        block[63] = 0xff;
        block[40] = b'[';
        #[allow(unsafe_code)]
        // SAFETY: this module is only compiled with SSE2 enabled.
        let m = unsafe { classify(&block) };
        assert_eq!(
            m,
            Masks {
                quote: 1,
                backslash: 1 << 1,
                whitespace: 0b1111 << 2,
                op: (0b11_1111 << 6) | (1 << 40),
                control: (0b11 << 12) | (0b111 << 3),
                high: (1 << 15) | (1 << 63),
            }
        );
    }

    /// Documents whose tokens, strings, escapes and backslash runs land on every offset of a
    /// block, so that every carry from one block to the next is crossed.
    #[test]
    fn every_alignment_of_strings_escapes_and_numbers() {
        let docs: &[&[u8]] = &[
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"items\":[{\"k\":\"k0\",\"v\":0,\"ok\":true}]}}",
            b"[\"\\\\\\\\\\\\\",\"\\\\\\\"\",\"\\\"\\\\\",\"a\\\\\",\"\\u00e9\\uD83D\\uDE00\",\"\\/\\b\\f\\n\\r\\t\"]",
            b"[-0.5e-7,123456789012345678901234567890,true,false,null,{},[],\"\"]",
            "[\"caf\u{e9} \u{20ac} \u{1f600}\",\"\u{10ffff}\"]".as_bytes(),
            b"[[[[[[[[[[{\"a\":[{\"b\":{}}]}]]]]]]]]]]",
        ];
        for doc in docs {
            for pad in 0..70 {
                let shifted = [vec![b' '; pad], doc.to_vec()].concat();
                agrees_with_serde_json(&shifted);
                // One byte changed or cut at each offset, from the padded start.
                for cut in pad..shifted.len() {
                    agrees_with_serde_json(&shifted[..cut]);
                    for b in [b'"', b'\\', b'x', b'\x01', b'1', b' ', 0xc3] {
                        let mut changed = shifted.clone();
                        changed[cut] = b;
                        agrees_with_serde_json(&changed);
                    }
                }
            }
        }
    }

    #[test]
    fn long_strings_and_backslash_runs_across_blocks() {
        for len in [0, 1, 30, 62, 63, 64, 65, 127, 128, 200] {
            for run in 0..6 {
                for tail in [&b"\""[..], b"\"]", b"x\"]", b"", b"\\u12\"]"] {
                    let mut doc = b"[\"".to_vec();
                    doc.extend(std::iter::repeat_n(b'a', len));
                    doc.extend(std::iter::repeat_n(b'\\', run));
                    doc.extend_from_slice(tail);
                    agrees_with_serde_json(&doc);
                    let mut closed = doc.clone();
                    closed.extend_from_slice(b"\"]");
                    agrees_with_serde_json(&closed);
                }
            }
        }
    }
}
