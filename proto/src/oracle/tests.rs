use super::*;
use crate::jsonrpc::ErrorCode;

fn felt(n: u128) -> Felt {
    Felt::from(n)
}

type Pair = crate::testing::Pair<OracleClient, OracleServer>;

fn pair() -> Pair {
    Pair::new(OracleClient::new(), OracleServer::new())
}

impl Pair {
    /// A connected pair after the handshake.
    fn ready() -> Self {
        let mut p = pair();
        p.deliver_to_client();
        p.deliver_to_server();
        assert_eq!(p.client_events(), vec![ClientEvent::Ready]);
        assert_eq!(p.server_events(), vec![ServerEvent::Ready]);
        p
    }

    /// One invoke round trip; the plugin answers with `answer`.
    #[allow(clippy::result_large_err)]
    fn invoke(
        &mut self,
        selector: &str,
        calldata: &[Felt],
        answer: Result<Vec<Felt>, ErrorObject>,
    ) -> Result<Vec<Felt>, OracleError> {
        let id = self.client.invoke(selector, calldata).expect("idle");
        self.deliver_to_server();
        assert_eq!(
            self.server_events(),
            vec![ServerEvent::Invoke {
                id: id.clone(),
                selector: selector.into(),
                calldata: calldata.to_vec()
            }]
        );
        self.server.respond(id.clone(), answer).expect("serving");
        self.deliver_to_client();
        match &self.client_events()[..] {
            [
                ClientEvent::Invoked {
                    id: got,
                    selector: s,
                    result,
                },
            ] if *got == id && s == selector => result.clone(),
            other => panic!("{other:?}"),
        }
    }
}

fn text(frames: &[Vec<u8>]) -> Vec<String> {
    frames
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect()
}

#[test]
fn felts_parse_only_the_canonical_form() {
    let max = format!("0x{FELT_MAX_DIGITS}");
    let ok: &[&str] = &["0x0", "0x1", "0x2710", "0xabcdef", &max];
    for s in ok {
        assert_eq!(Felt::parse(s).expect(s).as_str(), *s);
    }
    let over = format!("0x{}1", &FELT_MAX_DIGITS[..62]);
    let too_long = format!("0x1{}", "0".repeat(63));
    let bad: &[(&str, FeltError)] = &[
        ("", FeltError::MissingPrefix { got: "".into() }),
        ("10", FeltError::MissingPrefix { got: "10".into() }),
        ("0X1", FeltError::MissingPrefix { got: "0X1".into() }),
        ("0x", FeltError::NoDigits),
        (
            "0xA",
            FeltError::BadDigit {
                got: "0xA".into(),
                bad: 'A',
                index: 2,
            },
        ),
        (
            "0x1g",
            FeltError::BadDigit {
                got: "0x1g".into(),
                bad: 'g',
                index: 3,
            },
        ),
        (
            "0x-1",
            FeltError::BadDigit {
                got: "0x-1".into(),
                bad: '-',
                index: 2,
            },
        ),
        ("0x00", FeltError::LeadingZero { got: "0x00".into() }),
        ("0x01", FeltError::LeadingZero { got: "0x01".into() }),
        (&over, FeltError::OutOfRange { digits: 63 }),
        (&too_long, FeltError::OutOfRange { digits: 64 }),
    ];
    for (s, want) in bad {
        assert_eq!(Felt::parse(s).as_ref(), Err(want), "{s:?}");
    }
}

#[test]
fn felts_convert_from_and_to_u128() {
    for n in [0u128, 1, 0x10, 0x2710, u64::MAX as u128, u128::MAX] {
        let f = felt(n);
        assert_eq!(Felt::parse(f.as_str()).as_ref(), Ok(&f));
        assert_eq!(f.to_u128(), Some(n));
    }
    assert_eq!(felt(0).as_str(), "0x0");
    assert_eq!(felt(255).as_str(), "0xff");
    assert_eq!(Felt::zero(), felt(0));
    let big = Felt::parse(&format!("0x1{}", "0".repeat(32))).expect("2^128");
    assert_eq!(big.to_u128(), None);
    assert_eq!(
        serde_json::from_str::<Felt>("\"0x01\"").map_err(|e| e.to_string()),
        Err("felt \"0x01\" has a leading zero".to_owned())
    );
    assert_eq!(
        serde_json::to_string(&InvokeParams {
            selector: "f".into(),
            calldata: vec![felt(1)]
        })
        .expect("serialize"),
        r#"{"selector":"f","calldata":["0x1"]}"#
    );
}

#[test]
fn first_byte_must_be_a_brace() {
    assert_eq!(check_first_byte(b'{'), Ok(()));
    for b in [b' ', b'\n', b'[', b'x', 0xef] {
        assert!(matches!(
            check_first_byte(b),
            Err(ProtocolError::BadPayload {
                what: "first byte of oracle output",
                ..
            })
        ));
    }
    let cases: &[&[u8]] = &[
        b" {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ready\"}",
        b"\xef\xbb\xbf{\"id\":0,\"method\":\"ready\"}",
        b"hello",
        b"",
    ];
    for frame in cases {
        let mut host = OracleClient::new();
        assert!(
            matches!(
                host.handle_frame(frame),
                Err(ProtocolError::BadPayload { .. })
            ),
            "{frame:?}"
        );
        assert_eq!(host.state(), ClientState::Closed);
        assert!(host.poll_transmit().is_none());
    }
}

#[test]
fn handshake_exact_bytes_and_any_ready_id() {
    let mut p = pair();
    assert_eq!(
        text(&p.deliver_to_client()),
        [r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#]
    );
    assert_eq!(
        text(&p.deliver_to_server()),
        [r#"{"jsonrpc":"2.0","id":0,"result":{}}"#]
    );
    assert_eq!(p.server.state(), ServerState::Serving);
    assert_eq!(p.client.state(), ClientState::Idle);

    // Any id, params and a missing `jsonrpc` member are fine.
    let readies: &[(&str, &str)] = &[
        (
            r#"{"jsonrpc":"2.0","id":"r-1","method":"ready"}"#,
            r#"{"jsonrpc":"2.0","id":"r-1","result":{}}"#,
        ),
        (
            r#"{"id":7,"method":"ready","params":{"version":2}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
        ),
    ];
    for (ready, ack) in readies {
        let mut host = OracleClient::new();
        host.handle_frame(ready.as_bytes()).expect(ready);
        assert_eq!(host.poll_event(), Some(ClientEvent::Ready));
        assert_eq!(host.poll_transmit().as_deref(), Some(ack.as_bytes()));
    }
    let mut plugin = OracleServer::with_ready_id(Id::from("hello"));
    assert_eq!(
        plugin.poll_transmit().as_deref(),
        Some(&br#"{"jsonrpc":"2.0","id":"hello","method":"ready"}"#[..])
    );
}

#[test]
fn invokes_results_and_plugin_errors() {
    let mut p = Pair::ready();
    type Case = (&'static str, Vec<Felt>, Result<Vec<Felt>, ErrorObject>);
    let cases: Vec<Case> = vec![
        ("f", vec![felt(0x2710)], Ok(vec![felt(0x5f5e100)])),
        ("empty", vec![], Ok(vec![])),
        (
            "many",
            vec![felt(1), felt(2), felt(3)],
            Ok(vec![felt(6), Felt::zero()]),
        ),
        (
            "f",
            vec![felt(0x2711)],
            Err(ErrorObject::new(-32603, "error message")),
        ),
        (
            "g",
            vec![],
            Err(ErrorObject::new(-32000, "custom").with_data(json!({"x": 1}))),
        ),
    ];
    for (selector, calldata, answer) in cases {
        let got = p.invoke(selector, &calldata, answer.clone());
        match answer {
            Ok(felts) => assert_eq!(got, Ok(felts)),
            Err(e) => assert_eq!(
                got,
                Err(OracleError {
                    origin: ErrorOrigin::Plugin,
                    code: e.code,
                    message: e.message,
                    data: e.data,
                    stopped: None,
                })
            ),
        }
        assert_eq!(p.client.state(), ClientState::Idle);
    }
}

#[test]
fn invoke_wire_format_matches_the_seed() {
    let mut p = Pair::ready();
    p.client.invoke("f", &[felt(0x2710)]).expect("idle");
    assert_eq!(
        text(&p.deliver_to_server()),
        [
            r#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"f","calldata":["0x2710"]}}"#
        ]
    );
    let Some(ServerEvent::Invoke { id, .. }) = p.server.poll_event() else {
        panic!("no invoke")
    };
    p.server
        .respond(id, Ok(vec![felt(0x5f5e100)]))
        .expect("serving");
    assert_eq!(
        text(&p.deliver_to_client()),
        [r#"{"jsonrpc":"2.0","id":0,"result":["0x5f5e100"]}"#]
    );
    p.client_events();
    p.client.invoke("f", &[felt(0x2711)]).expect("idle");
    p.deliver_to_server();
    let Some(ServerEvent::Invoke { id, .. }) = p.server.poll_event() else {
        panic!("no invoke")
    };
    p.server
        .respond(id, Err(ErrorObject::new(-32603, "error message")))
        .expect("serving");
    assert_eq!(
        text(&p.deliver_to_client()),
        [r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"error message"}}"#]
    );
}

#[test]
fn calls_in_the_wrong_state_are_unexpected() {
    let mut host = OracleClient::new();
    assert_eq!(
        host.invoke("f", &[]),
        Err(ProtocolError::Unexpected {
            state: "awaiting ready",
            got: "invoke \"f\"".into()
        })
    );
    assert!(host.poll_transmit().is_none(), "nothing before ready");

    let mut p = Pair::ready();
    p.client.invoke("a", &[]).expect("idle");
    assert_eq!(
        p.client.invoke("b", &[]),
        Err(ProtocolError::Unexpected {
            state: "an invoke is in flight",
            got: "invoke \"b\"".into()
        })
    );
    assert_eq!(p.deliver_to_server().len(), 1);
    // A response the host did not ask for.
    assert_eq!(
        p.client
            .handle_frame(br#"{"jsonrpc":"2.0","id":5,"result":[]}"#),
        Err(ProtocolError::UnknownResponseId { id: "5".into() })
    );
    // A second ready.
    assert!(matches!(
        p.client
            .handle_frame(br#"{"jsonrpc":"2.0","id":9,"method":"ready"}"#),
        Err(ProtocolError::Unexpected { .. })
    ));
    // The plugin may not answer twice or answer something it was not asked.
    assert_eq!(
        p.server.respond(Id::Num(3), Ok(vec![])),
        Err(ProtocolError::NotAwaitingResponse { id: "3".into() })
    );
    // A host that sends a second invoke anyway breaks the protocol.
    assert!(matches!(
        p.server.handle_frame(
            br#"{"jsonrpc":"2.0","id":8,"method":"invoke","params":{"selector":"x","calldata":[]}}"#
        ),
        Err(ProtocolError::Unexpected {
            state: "answering an invoke",
            ..
        })
    ));
}

#[test]
fn plugin_output_before_ready_must_be_ready() {
    let cases: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":0,"result":[]}"#,
        r#"{"jsonrpc":"2.0","method":"log","params":["hi"]}"#,
        r#"{"jsonrpc":"2.0","id":0,"method":"invoke"}"#,
    ];
    for frame in cases {
        let mut host = OracleClient::new();
        assert!(
            matches!(
                host.handle_frame(frame.as_bytes()),
                Err(ProtocolError::Unexpected {
                    state: "awaiting ready",
                    ..
                })
            ),
            "{frame}"
        );
        assert!(host.poll_transmit().is_none());
    }
}

#[test]
fn lenient_with_plugin_notifications_and_requests() {
    let mut p = Pair::ready();
    p.client
        .handle_frame(br#"{"jsonrpc":"2.0","method":"log","params":["hi"]}"#)
        .expect("ignored");
    p.client
        .handle_frame(br#"{"jsonrpc":"2.0","id":"q","method":"what"}"#)
        .expect("answered");
    assert_eq!(
        text(&[p.client.poll_transmit().expect("reply")]),
        [r#"{"jsonrpc":"2.0","id":"q","error":{"code":-32601,"message":"unknown method: what"}}"#]
    );
    assert!(p.client_events().is_empty());
    assert_eq!(p.invoke("f", &[], Ok(vec![felt(1)])), Ok(vec![felt(1)]));
}

#[test]
fn bad_results_are_bad_payload_and_complete_the_invoke() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
            "expected an array of felts, got an object",
        ),
        (
            r#"{"jsonrpc":"2.0","id":0,"result":["0x01"]}"#,
            "element 0: felt \"0x01\" has a leading zero",
        ),
        (
            r#"{"jsonrpc":"2.0","id":0,"result":["0x1","0xA"]}"#,
            "element 1: felt \"0xA\" has 'A' at 2, expected a lowercase hex digit",
        ),
        (
            r#"{"jsonrpc":"2.0","id":0,"result":[1]}"#,
            "element 0: expected a string, got a number",
        ),
        (
            r#"{"jsonrpc":"2.0","id":0,"result":["12"]}"#,
            "element 0: felt \"12\" does not start with 0x",
        ),
    ];
    for (frame, reason) in cases {
        let mut p = Pair::ready();
        p.client.invoke("f", &[]).expect("idle");
        assert_eq!(
            p.client.handle_frame(frame.as_bytes()),
            Err(ProtocolError::BadPayload {
                what: "invoke result",
                reason: (*reason).into()
            }),
            "{frame}"
        );
        match &p.client_events()[..] {
            [ClientEvent::Invoked { result: Err(e), .. }] => {
                assert_eq!(e.origin, ErrorOrigin::BadResult);
                assert_eq!(e.message, format!("bad invoke result: {reason}"));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn server_answers_bad_invokes_and_unknown_methods_itself() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"selector":"f","calldata":["0x01"]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid invoke params: calldata: element 0: felt \"0x01\" has a leading zero"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"calldata":[]}}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid invoke params: missing selector"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"selector":1,"calldata":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid invoke params: selector: expected a string, got a number"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"selector":"f"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"invalid invoke params: missing calldata"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"invoke"}"#,
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"invalid invoke params: params must be an object with selector and calldata"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"describe"}"#,
            r#"{"jsonrpc":"2.0","id":6,"error":{"code":-32601,"message":"unknown method: describe"}}"#,
        ),
    ];
    let mut p = Pair::ready();
    for (frame, reply) in cases {
        p.server.handle_frame(frame.as_bytes()).expect(frame);
        assert_eq!(text(&[p.server.poll_transmit().expect("reply")]), [*reply]);
        assert!(p.server_events().is_empty());
    }
    // Unknown notifications are ignored, and the plugin still serves.
    p.server
        .handle_frame(br#"{"jsonrpc":"2.0","method":"$/progress"}"#)
        .expect("ignored");
    assert!(p.server.poll_transmit().is_none());
    assert_eq!(p.invoke("f", &[], Ok(vec![])), Ok(vec![]));
}

#[test]
fn server_waits_for_the_ack() {
    let mut plugin = OracleServer::new();
    plugin.poll_transmit();
    assert!(matches!(
        plugin.handle_frame(
            br#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"f","calldata":[]}}"#
        ),
        Err(ProtocolError::Unexpected {
            state: "awaiting the ready ack",
            ..
        })
    ));
    assert_eq!(
        plugin.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        Err(ProtocolError::UnknownResponseId { id: "1".into() })
    );
    plugin
        .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#)
        .expect("ack");
    assert_eq!(plugin.poll_event(), Some(ServerEvent::Ready));
}

#[test]
fn a_rejected_ready_terminates_the_plugin() {
    let mut plugin = OracleServer::new();
    plugin.poll_transmit();
    plugin
        .handle_frame(br#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"go away"}}"#)
        .expect("error ack");
    assert_eq!(
        plugin.poll_event(),
        Some(ServerEvent::Rejected {
            error: ErrorObject::new(-32603, "go away")
        })
    );
    assert_eq!(plugin.state(), ServerState::Rejected);
    assert!(plugin.must_terminate());
    assert!(matches!(
        plugin.handle_frame(br#"{"jsonrpc":"2.0","method":"shutdown"}"#),
        Err(ProtocolError::Unexpected { .. })
    ));
}

#[test]
fn shutdown_is_a_notification_and_closes_both_sides() {
    let mut p = Pair::ready();
    p.client.shutdown().expect("idle");
    assert_eq!(
        text(&p.deliver_to_server()),
        [r#"{"jsonrpc":"2.0","method":"shutdown"}"#]
    );
    assert_eq!(p.server_events(), vec![ServerEvent::Shutdown]);
    assert!(p.server.must_terminate());
    assert_eq!(p.client.state(), ClientState::Closed);
    assert!(matches!(
        p.client.invoke("f", &[]),
        Err(ProtocolError::Unexpected {
            state: "closed",
            ..
        })
    ));
    assert!(matches!(
        p.client.shutdown(),
        Err(ProtocolError::Unexpected { .. })
    ));
    // Late plugin output is refused.
    assert!(matches!(
        p.client
            .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":[]}"#),
        Err(ProtocolError::Unexpected {
            state: "closed",
            ..
        })
    ));

    // Before ready nothing is sent.
    let mut host = OracleClient::new();
    host.shutdown().expect("closes");
    assert!(host.poll_transmit().is_none());
    assert_eq!(host.state(), ClientState::Closed);
}

#[test]
fn shutdown_with_an_invoke_in_flight_completes_it() {
    let mut p = Pair::ready();
    p.client.invoke("slow", &[]).expect("idle");
    p.deliver_to_server();
    p.client.shutdown().expect("invoking");
    match &p.client_events()[..] {
        [
            ClientEvent::Invoked {
                selector,
                result: Err(e),
                ..
            },
        ] => {
            assert_eq!(selector, "slow");
            assert_eq!(e.origin, ErrorOrigin::Host);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fail_pending_carries_reason_and_stderr() {
    let mut p = Pair::ready();
    let id = p.client.invoke("sqrt", &[felt(4)]).expect("idle");
    p.client.fail_pending(&Stopped::ended(
        crate::stopped::Exit::OutOfFuel { limit: 9 },
        vec!["line 1".to_owned(), "line 2".to_owned()],
    ));
    assert_eq!(
        p.client_events(),
        vec![ClientEvent::Invoked {
            id,
            selector: "sqrt".into(),
            result: Err(OracleError {
                origin: ErrorOrigin::Host,
                code: ErrorCode::Int(-32603),
                message: "oracle failed: plugin ran out of fuel (limit 9)".into(),
                data: Some(json!({
                    "reason": "plugin ran out of fuel (limit 9)",
                    "exit": {"kind": "out_of_fuel", "limit": 9},
                    "stderr": ["line 1", "line 2"]
                })),
                stopped: Some(Stopped::ended(
                    crate::stopped::Exit::OutOfFuel { limit: 9 },
                    vec!["line 1".to_owned(), "line 2".to_owned()],
                )),
            })
        }]
    );
    assert_eq!(p.client.state(), ClientState::Closed);
    // Nothing in flight: no event, still closed.
    p.client
        .fail_pending(&Stopped::by_host("again", Vec::new()));
    assert!(p.client_events().is_empty());
}

#[test]
fn garbage_from_either_side_is_a_typed_error() {
    let mut p = Pair::ready();
    assert!(matches!(
        p.client.handle_frame(b"{not json"),
        Err(ProtocolError::NotJson { .. })
    ));
    assert!(matches!(
        p.server
            .handle_frame(b"{\"jsonrpc\":\"1.0\",\"method\":\"shutdown\"}"),
        Err(ProtocolError::WrongVersion { .. })
    ));
}

/// Every golden transcript line, both directions, as one input: a seed corpus for
/// [`fuzz`], with each line's truncations and some hostile lines.
const FUZZ_SEEDS: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#,
    r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
    r#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"sqrt","calldata":["0x10"]}}"#,
    r#"{"jsonrpc":"2.0","id":0,"result":["0x4"]}"#,
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"sqrt: expected exactly one argument"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"result":["0x0","0x800000000000011000000000000000000000000000000000000000000000000"]}"#,
    r#"{"jsonrpc":"2.0","id":2,"result":["0x800000000000011000000000000000000000000000000000000000000000001"]}"#,
    r#"{"jsonrpc":"2.0","id":3,"result":["0x01","0xA",7]}"#,
    r#"{"jsonrpc":"2.0","id":7,"method":"ready"}"#,
    r#"{"jsonrpc":"2.0","id":8,"method":"other"}"#,
    r#"{"jsonrpc":"2.0","method":"shutdown"}"#,
    r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"not today"}}"#,
    r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"selector":1,"calldata":[]}}"#,
    "0xffffffffffffffffffffffffffffffff",
    "0x100000000000000000000000000000000",
    "0x0",
    "[]",
    " {}",
];

#[test]
fn fuzz_body_over_the_seed_corpus() {
    fuzz(FUZZ_SEEDS.join("\n").as_bytes());
    for seed in FUZZ_SEEDS {
        for cut in 0..=seed.len() {
            fuzz(&seed.as_bytes()[..cut]);
        }
    }
    // Shuffled sessions: each seed followed by every other.
    for a in FUZZ_SEEDS {
        for b in FUZZ_SEEDS {
            fuzz(format!("{a}\n{b}\n{a}").as_bytes());
        }
    }
}
