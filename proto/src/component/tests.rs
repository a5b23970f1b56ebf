use super::*;

fn f(n: u128) -> Felt {
    Felt::from(n)
}

fn hex(s: &str) -> Felt {
    Felt::parse(s).expect("test felt")
}

/// `P - 1`, the felt of -1.
const MINUS_ONE: &str = "0x800000000000011000000000000000000000000000000000000000000000000";

/// The felt of a short string given as ASCII.
fn short(s: &str) -> Felt {
    felt_of_bytes(s.as_bytes())
}

#[test]
fn felt_bytes_round_trip() {
    for text in ["0x0", "0x1", "0xff", "0x100", MINUS_ONE, "0x61626364"] {
        let felt = hex(text);
        assert_eq!(Felt::from_be_bytes(&felt.to_be_bytes()), Ok(felt.clone()));
    }
    assert_eq!(hex(MINUS_ONE).to_be_bytes()[0], 0x08);
    assert!(
        Felt::from_be_bytes(&PRIME).is_err(),
        "P itself is not a felt"
    );
}

#[test]
fn byte_arrays_follow_the_31_byte_word_layout() {
    let a31 = "a".repeat(31);
    let word = short(&a31);
    let cases: Vec<(String, Vec<Felt>)> = vec![
        (String::new(), vec![f(0), f(0), f(0)]),
        ("abc".into(), vec![f(0), short("abc"), f(3)]),
        ("a".repeat(30), vec![f(0), short(&"a".repeat(30)), f(30)]),
        (a31.clone(), vec![f(1), word.clone(), f(0), f(0)]),
        (
            format!("{a31}b"),
            vec![f(1), word.clone(), short("b"), f(1)],
        ),
        (
            format!("{a31}{a31}"),
            vec![f(2), word.clone(), word.clone(), f(0), f(0)],
        ),
        (
            format!("{a31}{a31}xyz"),
            vec![f(2), word.clone(), word.clone(), short("xyz"), f(3)],
        ),
    ];
    for (text, want) in cases {
        let got = encode_results(&[Value::String(text.clone())], 100).expect("encode");
        assert_eq!(got, want, "{} bytes", text.len());
        assert_eq!(
            decode_args(&[Ty::String], &want),
            Ok(vec![Value::String(text.clone())])
        );
        assert_eq!(decode_byte_array(&want).as_deref(), Ok(text.as_str()));
    }
    // The word of 31 'a's is 0x6161…61 (62 hex digits).
    assert_eq!(word.as_str(), format!("0x{}", "61".repeat(31)));
    // Leading zero bytes in the pending word count in its length.
    let felts = vec![f(0), short("A"), f(2)];
    assert_eq!(
        decode_args(&[Ty::String], &felts),
        Ok(vec![Value::String("\0A".into())])
    );
}

#[test]
fn bad_byte_arrays_are_errors() {
    let word = short(&"a".repeat(31));
    let too_long_word = felt_of_bytes(&[0x61; 31]).to_be_bytes();
    let mut big = too_long_word;
    big[0] = 1;
    let cases: Vec<(&str, Vec<Felt>)> = vec![
        ("pending length 31", vec![f(0), f(0), f(31)]),
        ("pending length huge", vec![f(0), f(0), hex(MINUS_ONE)]),
        (
            "pending word longer than its length",
            vec![f(0), short("ab"), f(1)],
        ),
        ("word of 32 bytes", vec![f(1), felt_of_be(&big), f(0), f(0)]),
        (
            "word count of 2^64",
            vec![f(u128::from(u64::MAX) + 1), word.clone(), f(0), f(0)],
        ),
        (
            "word count past the calldata",
            vec![f(2), word.clone(), f(0), f(0)],
        ),
        ("not UTF-8", vec![f(0), felt_of_bytes(&[0xff, 0xfe]), f(2)]),
        ("ends early", vec![f(0), f(0)]),
    ];
    for (what, felts) in cases {
        let got = decode_args(&[Ty::String], &felts);
        assert!(got.is_err(), "{what}: {got:?}");
    }
    assert!(matches!(
        decode_args(&[Ty::String], &[f(0), f(0), f(31)]),
        Err(CodecError::BadByteArray { at: 2, .. })
    ));
    assert!(matches!(
        decode_args(&[Ty::String], &[f(u128::MAX), f(0), f(0)]),
        Err(CodecError::LengthTooLarge {
            what: "ByteArray",
            at: 0,
            ..
        })
    ));
}

#[test]
fn integers_and_signed_values() {
    let minus_one = hex(MINUS_ONE);
    let i64_min = felt_from_i64(i64::MIN);
    let cases: Vec<(Ty, Felt, Option<Value>)> = vec![
        (Ty::Bool, f(0), Some(Value::Bool(false))),
        (Ty::Bool, f(1), Some(Value::Bool(true))),
        (Ty::Bool, f(2), None),
        (Ty::U8, f(255), Some(Value::U8(255))),
        (Ty::U8, f(256), None),
        (Ty::U16, f(65535), Some(Value::U16(65535))),
        (Ty::U32, f(u32::MAX.into()), Some(Value::U32(u32::MAX))),
        (Ty::U64, f(u64::MAX.into()), Some(Value::U64(u64::MAX))),
        (Ty::U64, f(u128::from(u64::MAX) + 1), None),
        (Ty::U64, minus_one.clone(), None),
        (Ty::S8, minus_one.clone(), Some(Value::S8(-1))),
        (Ty::S8, f(127), Some(Value::S8(127))),
        (Ty::S8, f(128), None),
        (Ty::S8, felt_from_i64(-128), Some(Value::S8(-128))),
        (Ty::S8, felt_from_i64(-129), None),
        (Ty::S16, felt_from_i64(-300), Some(Value::S16(-300))),
        (Ty::S32, felt_from_i64(-70000), Some(Value::S32(-70000))),
        (Ty::S64, i64_min.clone(), Some(Value::S64(i64::MIN))),
        (Ty::S64, f(i64::MAX as u128), Some(Value::S64(i64::MAX))),
        (Ty::S64, f(i64::MAX as u128 + 1), None),
        (
            Ty::S64,
            felt_from_i64(i64::MIN + 1),
            Some(Value::S64(i64::MIN + 1)),
        ),
        (Ty::Char, short("a"), Some(Value::Char('a'))),
        (Ty::Char, f(0), Some(Value::Char('\0'))),
        (Ty::Char, felt_from_char('é'), Some(Value::Char('é'))),
        (Ty::Char, short("ab"), None),
        (Ty::Char, felt_of_bytes(&[0xff]), None),
    ];
    for (ty, felt, want) in cases {
        let got = decode_args(std::slice::from_ref(&ty), std::slice::from_ref(&felt));
        match want {
            Some(v) => {
                assert_eq!(got, Ok(vec![v.clone()]), "{ty} {felt}");
                assert_eq!(encode_results(&[v], 1), Ok(vec![felt]), "{ty}");
            }
            None => assert!(got.is_err(), "{ty} {felt}: {got:?}"),
        }
    }
    assert_eq!(felt_from_i64(-1), minus_one);
    assert_eq!(felt_from_char('é').as_str(), "0xc3a9");
    // -2^63 is P - 2^63.
    assert_eq!(
        sub_be(&PRIME, &i64_min.to_be_bytes()),
        be_of_u128(1u128 << 63)
    );
}

#[test]
fn lists_tuples_options_and_results() {
    let list_u64 = Ty::List(Box::new(Ty::U64));
    let result = Ty::Result {
        ok: Some(Box::new(Ty::U64)),
        err: Some(Box::new(Ty::String)),
    };
    let bare_result = Ty::Result {
        ok: None,
        err: None,
    };
    let cases: Vec<(Vec<Ty>, Vec<Felt>, Vec<Value>)> = vec![
        (
            vec![list_u64.clone()],
            vec![f(2), f(7), f(9)],
            vec![Value::List(vec![Value::U64(7), Value::U64(9)])],
        ),
        (
            vec![list_u64.clone()],
            vec![f(0)],
            vec![Value::List(vec![])],
        ),
        (
            vec![Ty::Tuple(vec![Ty::U8, Ty::Bool]), Ty::S32],
            vec![f(1), f(1), hex(MINUS_ONE)],
            vec![
                Value::Tuple(vec![Value::U8(1), Value::Bool(true)]),
                Value::S32(-1),
            ],
        ),
        (
            vec![Ty::Option(Box::new(Ty::U8))],
            vec![f(1), f(5)],
            vec![Value::Option(Some(Box::new(Value::U8(5))))],
        ),
        (
            vec![Ty::Option(Box::new(Ty::U8))],
            vec![f(0)],
            vec![Value::Option(None)],
        ),
        (
            vec![result.clone()],
            vec![f(0), f(5)],
            vec![Value::Result(Ok(Some(Box::new(Value::U64(5)))))],
        ),
        (
            vec![result.clone()],
            vec![f(1), f(0), short("no"), f(2)],
            vec![Value::Result(Err(Some(Box::new(Value::String(
                "no".into(),
            )))))],
        ),
        (
            vec![bare_result.clone()],
            vec![f(1)],
            vec![Value::Result(Err(None))],
        ),
        (
            vec![Ty::List(Box::new(Ty::String))],
            vec![f(2), f(0), f(0), f(0), f(0), short("x"), f(1)],
            vec![Value::List(vec![
                Value::String(String::new()),
                Value::String("x".into()),
            ])],
        ),
    ];
    for (types, felts, values) in cases {
        assert_eq!(decode_args(&types, &felts), Ok(values.clone()), "{types:?}");
        assert_eq!(encode_results(&values, 100), Ok(felts), "{types:?}");
    }
    assert!(matches!(
        decode_args(&[result], &[f(2), f(5)]),
        Err(CodecError::BadTag { at: 0, .. })
    ));
    assert!(matches!(
        decode_args(&[Ty::Option(Box::new(Ty::U8))], &[hex(MINUS_ONE)]),
        Err(CodecError::BadTag { .. })
    ));
}

#[test]
fn hostile_lengths_are_refused_before_allocating() {
    let list_u64 = Ty::List(Box::new(Ty::U64));
    let list_str = Ty::List(Box::new(Ty::String));
    let nested = Ty::List(Box::new(Ty::List(Box::new(Ty::U8))));
    let cases: Vec<(Ty, Vec<Felt>)> = vec![
        (list_u64.clone(), vec![f(u128::from(u64::MAX))]),
        (list_u64.clone(), vec![hex(MINUS_ONE), f(1)]),
        (
            list_u64.clone(),
            vec![f(u128::from(u32::MAX) + 1), f(1), f(2)],
        ),
        (list_u64.clone(), vec![f(3), f(1), f(2)]),
        // Each string needs three felts: two strings cannot fit in five.
        (list_str, vec![f(2), f(0), f(0), f(0), f(0), f(0)]),
        (nested, vec![f(1), f(u128::MAX)]),
    ];
    for (ty, felts) in cases {
        let got = decode_args(std::slice::from_ref(&ty), &felts);
        assert!(
            matches!(got, Err(CodecError::LengthTooLarge { .. })),
            "{ty}: {got:?}"
        );
    }
    let err = decode_args(&[list_u64], &[f(1 << 40), f(1)]).expect_err("too long");
    assert_eq!(
        err.to_string(),
        "felt 0 (0x10000000000) is a list length that 1 remaining felts cannot hold (at most 1)"
    );
}

#[test]
fn calldata_that_runs_out_or_is_left_over_is_an_error() {
    assert_eq!(
        decode_args(&[Ty::U64, Ty::U64], &[f(1)]),
        Err(CodecError::CalldataEnded {
            ty: "u64".into(),
            at: 1
        })
    );
    assert_eq!(
        decode_args(&[Ty::U64], &[f(1), f(2), f(3)]),
        Err(CodecError::LeftOver { left: 2, total: 3 })
    );
    assert_eq!(decode_args(&[], &[]), Ok(vec![]));
    assert_eq!(
        decode_args(&[], &[f(0)]).map_err(|e| e.to_string()),
        Err("not all calldata was consumed: 1 of 1 felts left over".into())
    );
}

#[test]
fn results_are_capped_and_types_bounded() {
    let big = Value::List((0..10).map(Value::U8).collect());
    assert_eq!(
        encode_results(std::slice::from_ref(&big), 10),
        Err(CodecError::TooManyFelts { limit: 10 })
    );
    assert_eq!(encode_results(&[big], 11).map(|v| v.len()), Ok(11));
    assert_eq!(
        encode_results(&[Value::String("a".repeat(100))], 5),
        Err(CodecError::TooManyFelts { limit: 5 })
    );
    let mut deep = Ty::U8;
    for _ in 0..MAX_TYPE_DEPTH {
        deep = Ty::List(Box::new(deep));
    }
    assert!(matches!(
        decode_args(&[deep], &[]),
        Err(CodecError::TooDeep { .. })
    ));
}

#[test]
fn failures_encode_as_an_oracle_error() {
    let felts = encode_failure("boom");
    assert_eq!(felts, vec![f(1), f(0), short("boom"), f(4)]);
    assert_eq!(decode_byte_array(&felts[1..]).as_deref(), Ok("boom"));
}

#[test]
fn types_print_as_wit() {
    let ty = Ty::Result {
        ok: Some(Box::new(Ty::List(Box::new(Ty::Tuple(vec![
            Ty::U8,
            Ty::Char,
        ]))))),
        err: Some(Box::new(Ty::String)),
    };
    assert_eq!(ty.to_string(), "result<list<tuple<u8, char>>, string>");
    assert_eq!(
        Ty::Result {
            ok: None,
            err: Some(Box::new(Ty::U8))
        }
        .to_string(),
        "result<_, u8>"
    );
}

#[test]
fn selectors_resolve_full_and_unique_short_names() {
    let s = Selectors::new(
        [
            "add",
            "count",
            "sandpipe:oracle/math@0.1.0/mul",
            "sandpipe:oracle/math@0.1.0/pick",
            "sandpipe:oracle/other@0.1.0/pick",
            "sandpipe:oracle/other@0.1.0/add",
        ]
        .map(String::from),
    );
    assert_eq!(s.resolve("add"), Ok(0), "a full name wins over a short one");
    assert_eq!(s.resolve("mul"), Ok(2));
    assert_eq!(s.resolve("sandpipe:oracle/math@0.1.0/mul"), Ok(2));
    assert_eq!(s.resolve("sandpipe:oracle/other@0.1.0/pick"), Ok(4));
    assert_eq!(s.resolve("sandpipe:oracle/other@0.1.0/add"), Ok(5));
    let ambiguous = s.resolve("pick").expect_err("ambiguous");
    assert_eq!(
        ambiguous.to_string(),
        "multiple exports named: pick\nnote: possible matches are: \
         sandpipe:oracle/math@0.1.0/pick, sandpipe:oracle/other@0.1.0/pick"
    );
    let unknown = s.resolve("nope").expect_err("unknown");
    assert_eq!(
        unknown.to_string(),
        "no exported func in component named: nope\nnote: available funcs are: add, count, \
         sandpipe:oracle/math@0.1.0/mul, sandpipe:oracle/math@0.1.0/pick, \
         sandpipe:oracle/other@0.1.0/add, sandpipe:oracle/other@0.1.0/pick"
    );
    assert!(matches!(
        s.resolve("math@0.1.0/mul"),
        Err(SelectorError::Unknown { .. })
    ));
    assert_eq!(
        Selectors::full_name(&["ns:pkg/iface@1.0.0", "f"]),
        "ns:pkg/iface@1.0.0/f"
    );
}

#[test]
fn fuzz_body_runs_over_a_seed_corpus() {
    let mut state = 0x9e37_79b9u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    fuzz(&[]);
    for len in [1usize, 2, 8, 16, 64, 200, 1000] {
        for _ in 0..300 {
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            fuzz(&data);
        }
    }
    // Hand-made: one list<u64> parameter, a length of 2^64 - 1 and nothing behind it.
    fuzz(&[
        1, 11, 8, 1, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ]);
}
