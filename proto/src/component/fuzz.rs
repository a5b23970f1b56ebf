//! The felt codec's and the selectors' fuzz body.

use super::{
    SelectorError, Selectors, Ty, Value, decode_args, encode_results, felt_from_i64, felt_of_be,
    felt_of_bytes,
};
use crate::oracle::Felt;

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
