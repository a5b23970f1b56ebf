use super::*;

type Pair = crate::testing::Pair<Client, Server>;

fn pair() -> Pair {
    Pair::new(Client::new(), Server::new())
}

fn server_events(s: &mut Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn client_events(c: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn schema() -> ProviderSchema {
    ProviderSchema::new("demo").with_action(
        "echo",
        ActionSchema::new("echo attrs").with_attribute("x", AttributeSchema::new("string", true)),
    )
}

/// A client and server through describe and configure.
fn configured() -> Pair {
    let mut p = pair();
    p.client.describe(p.now, DESCRIBE_TIMEOUT).expect("start");
    p.deliver_to_server();
    let [ServerEvent::Describe { id }] = &p.server_events()[..] else {
        panic!("no describe")
    };
    p.server
        .respond_describe(id.clone(), &schema())
        .expect("answer");
    p.deliver_to_client();
    p.client.configure(json!({"k": 1})).expect("described");
    p.deliver_to_server();
    let [ServerEvent::Configure { id, config }] = &p.server_events()[..] else {
        panic!("no configure")
    };
    assert_eq!(config, &json!({"k": 1}));
    p.server
        .respond_configure(id.clone(), Ok(()))
        .expect("answer");
    p.deliver_to_client();
    let evs = p.client_events();
    assert!(
        matches!(
            &evs[..],
            [
                ClientEvent::Described { result: Ok(_), .. },
                ClientEvent::Configured { result: Ok(()), .. }
            ]
        ),
        "{evs:?}"
    );
    assert_eq!(p.client.state(), ClientState::Configured);
    p
}

#[test]
fn full_lifecycle_with_answers_out_of_order() {
    let mut p = pair();
    p.client.describe(p.now, DESCRIBE_TIMEOUT).expect("start");
    assert_eq!(
        p.client.poll_transmit().expect("frame"),
        br#"{"id":1,"method":"describe","params":{}}"#
    );
    p.server
        .handle_frame(br#"{"id":1,"method":"describe","params":{}}"#)
        .expect("request");
    let [ServerEvent::Describe { id }] = &p.server_events()[..] else {
        panic!()
    };
    p.server
        .respond_describe(id.clone(), &schema())
        .expect("answer");
    let answer = p.server.poll_transmit().expect("frame");
    assert_eq!(
        std::str::from_utf8(&answer).expect("utf8"),
        r#"{"id":1,"result":{"schema":{"name":"demo","protocol":"1","actions":{"echo":{"description":"echo attrs","attributes":{"x":{"type":"string","required":true}}}}}}}"#
    );
    p.client.handle_frame(&answer).expect("answer");
    assert_eq!(p.client.schema(), Some(&schema()));
    assert_eq!(p.client.state(), ClientState::Described);
    p.client.configure(json!({})).expect("described");
    p.deliver_to_server();
    let [ServerEvent::Configure { id, .. }] = &p.server_events()[..] else {
        panic!()
    };
    p.server
        .respond_configure(id.clone(), Ok(()))
        .expect("answer");
    p.deliver_to_client();
    let a = p
        .client
        .execute("echo", json!({"x": "a"}))
        .expect("configured");
    let b = p
        .client
        .execute("echo", json!({"x": "b"}))
        .expect("configured");
    p.deliver_to_server();
    let evs = p.server_events();
    assert_eq!(
        evs,
        vec![
            ServerEvent::Execute {
                id: a.clone(),
                action: "echo".into(),
                attrs: json!({"x": "a"})
            },
            ServerEvent::Execute {
                id: b.clone(),
                action: "echo".into(),
                attrs: json!({"x": "b"})
            },
        ]
    );
    assert_eq!(p.server.in_flight(), 2);
    p.server
        .respond_execute(b.clone(), Ok(json!({"x": "b"})))
        .expect("b");
    p.server
        .respond_execute(a.clone(), Ok(json!({"x": "a"})))
        .expect("a");
    p.deliver_to_client();
    p.client.shutdown().expect("configured");
    p.deliver_to_server();
    let [ServerEvent::Shutdown { id }] = &p.server_events()[..] else {
        panic!()
    };
    p.server.respond_shutdown(id.clone()).expect("answer");
    assert!(p.server.is_shut_down());
    p.deliver_to_client();
    let evs = p.client_events();
    let order: Vec<(Id, bool)> = evs
        .iter()
        .map(|e| match e {
            ClientEvent::Described { id, result } => (id.clone(), result.is_ok()),
            ClientEvent::Configured { id, result } => (id.clone(), result.is_ok()),
            ClientEvent::Executed { id, result, .. } => (id.clone(), result.is_ok()),
            ClientEvent::ShutDown { id, result } => (id.clone(), result.is_ok()),
        })
        .collect();
    assert_eq!(order, [1, 2, 4, 3, 5].map(|n| (Id::Num(n), true)).to_vec());
    assert_eq!(
        evs[2],
        ClientEvent::Executed {
            id: b,
            action: "echo".into(),
            result: Ok(json!({"x": "b"}))
        }
    );
    assert_eq!(p.client.state(), ClientState::Closed);
}

#[test]
fn calls_in_the_wrong_state_are_unexpected() {
    let t0 = Instant::now();
    type Call = fn(&mut Client, Instant) -> Result<Id, ProtocolError>;
    let describe: Call = |c, t| c.describe(t, DESCRIBE_TIMEOUT);
    let configure: Call = |c, _| c.configure(json!({}));
    let execute: Call = |c, _| c.execute("echo", json!({}));
    let shutdown: Call = |c, _| c.shutdown();
    // (calls made first, the call that must be refused, the state it names)
    let cases: &[(&[Call], Call, &str)] = &[
        (&[], configure, "not described"),
        (&[], execute, "not described"),
        (&[], shutdown, "not described"),
        (&[describe], describe, "describing"),
        (&[describe], configure, "describing"),
        (&[describe], shutdown, "describing"),
    ];
    for (i, (before, refused, state)) in cases.iter().enumerate() {
        let mut c = Client::new();
        for call in *before {
            call(&mut c, t0).expect("allowed");
        }
        match refused(&mut c, t0) {
            Err(ProtocolError::Unexpected { state: got, .. }) => {
                assert_eq!(got, *state, "case {i}")
            }
            other => panic!("case {i}: {other:?}"),
        }
    }
    // Once described: no execute before configure, no second describe.
    let mut c = configured().client;
    assert!(matches!(
        c.describe(t0, DESCRIBE_TIMEOUT),
        Err(ProtocolError::Unexpected { .. })
    ));
    assert!(matches!(
        c.configure(json!({})),
        Err(ProtocolError::Unexpected { .. })
    ));
    c.shutdown().expect("configured");
    assert!(matches!(
        c.execute("echo", json!({})),
        Err(ProtocolError::Unexpected {
            state: "shutting down",
            ..
        })
    ));
    let mut c = Client::new();
    c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
    c.handle_frame(br#"{"id":1,"result":{"schema":{"name":"d","protocol":"1"}}}"#)
        .expect("answer");
    assert_eq!(
        c.execute("echo", json!({})),
        Err(ProtocolError::Unexpected {
            state: "described, not configured",
            got: "call to execute".into()
        })
    );
}

#[test]
fn the_schema_protocol_must_be_1() {
    let cases: &[(&str, ProtocolError)] = &[
        (
            r#"{"id":1,"result":{"schema":{"name":"d","protocol":"2"}}}"#,
            ProtocolError::BadPayload {
                what: "schema.protocol",
                reason: "expected \"1\", got \"2\"".into(),
            },
        ),
        (
            r#"{"id":1,"result":{}}"#,
            ProtocolError::BadPayload {
                what: "describe result",
                reason: "no schema member".into(),
            },
        ),
        (
            r#"{"id":1,"result":[]}"#,
            ProtocolError::BadPayload {
                what: "describe result",
                reason: "expected an object, got []".into(),
            },
        ),
    ];
    for (frame, want) in cases {
        let mut c = Client::new();
        c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
        assert_eq!(
            c.handle_frame(frame.as_bytes()).as_ref(),
            Err(want),
            "{frame}"
        );
        assert_eq!(
            client_events(&mut c),
            vec![ClientEvent::Described {
                id: Id::Num(1),
                result: Err(CallError::Protocol(want.clone()))
            }]
        );
        assert_eq!(c.state(), ClientState::Closed);
    }
    // A schema without a protocol member is refused too.
    let mut c = Client::new();
    c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
    assert!(matches!(
        c.handle_frame(br#"{"id":1,"result":{"schema":{"name":"d"}}}"#),
        Err(ProtocolError::BadPayload { what: "schema", .. })
    ));
}

#[test]
fn describe_times_out_at_the_deadline() {
    let mut p = pair();
    let t0 = p.now;
    let id = p.client.describe(t0, DESCRIBE_TIMEOUT).expect("start");
    assert_eq!(p.client.poll_timeout(), Some(t0 + DESCRIBE_TIMEOUT));
    p.advance(Duration::from_millis(4999));
    assert!(p.client_events().is_empty());
    p.advance(Duration::from_millis(1));
    assert_eq!(p.now, t0 + DESCRIBE_TIMEOUT);
    assert_eq!(
        p.client_events(),
        vec![ClientEvent::Described {
            id,
            result: Err(CallError::TimedOut {
                method: Method::Describe,
                timeout: DESCRIBE_TIMEOUT
            })
        }]
    );
    assert_eq!(p.client.state(), ClientState::Closed);
    // The late answer is ignored.
    p.client
        .handle_frame(br#"{"id":1,"result":{"schema":{"name":"d","protocol":"1"}}}"#)
        .expect("ignored");
    assert!(p.client_events().is_empty());
    assert_eq!(p.client.poll_timeout(), None);
}

#[test]
fn provider_errors_complete_their_call() {
    let mut p = configured();
    let cases: &[(&str, ProviderError)] = &[
        (
            "nope",
            ProviderError::new(codes::UNKNOWN_ACTION, "unknown action: nope"),
        ),
        (
            "echo",
            ProviderError::validation_failed("x is required").with_detail("attrs: {}"),
        ),
        (
            "echo",
            ProviderError::new("quota_exceeded", "provider-specific"),
        ),
    ];
    for (action, error) in cases {
        let id = p.client.execute(action, json!({})).expect("configured");
        p.deliver_to_server();
        let _ = p.server_events();
        p.server
            .respond_execute(id.clone(), Err(error.clone()))
            .expect("answer");
        p.deliver_to_client();
        assert_eq!(
            p.client_events(),
            vec![ClientEvent::Executed {
                id,
                action: (*action).into(),
                result: Err(CallError::Provider(error.clone()))
            }]
        );
    }
    // configure_failed returns to Described; a second configure may succeed.
    let mut p = pair();
    p.client.describe(p.now, DESCRIBE_TIMEOUT).expect("start");
    p.deliver_to_server();
    p.server
        .respond_describe(Id::Num(1), &schema())
        .expect("answer");
    p.deliver_to_client();
    p.client
        .configure(json!({"fail": true}))
        .expect("described");
    p.deliver_to_server();
    p.server
        .respond_configure(
            Id::Num(2),
            Err(ProviderError::configure_failed("bad token")),
        )
        .expect("answer");
    assert_eq!(
        p.server.poll_transmit().expect("frame"),
        br#"{"id":2,"error":{"code":"configure_failed","message":"bad token"}}"#
    );
    p.client
        .handle_frame(br#"{"id":2,"error":{"code":"configure_failed","message":"bad token"}}"#)
        .expect("answer");
    assert_eq!(p.client.state(), ClientState::Described);
    p.client.configure(json!({})).expect("retry allowed");
}

#[test]
fn bad_execute_answers_are_typed() {
    let mut c = configured().client;
    let id = c.execute("echo", json!({})).expect("configured");
    assert!(c.poll_transmit().is_some());
    let want = ProtocolError::BadPayload {
        what: "execute result",
        reason: "no outputs member".into(),
    };
    let frame = format!(r#"{{"id":{id},"result":{{}}}}"#);
    assert_eq!(c.handle_frame(frame.as_bytes()), Err(want.clone()));
    assert_eq!(
        client_events(&mut c),
        vec![ClientEvent::Executed {
            id,
            action: "echo".into(),
            result: Err(CallError::Protocol(want))
        }]
    );
    // A request from the provider is refused and answered.
    assert!(matches!(
        c.handle_frame(br#"{"id":7,"method":"ask"}"#),
        Err(ProtocolError::Unexpected { .. })
    ));
    assert_eq!(
        c.poll_transmit().expect("frame"),
        br#"{"id":7,"error":{"code":"unknown_method","message":"orchard hosts do not answer requests"}}"#
    );
    assert_eq!(
        c.handle_frame(br#"{"id":99,"result":{}}"#),
        Err(ProtocolError::UnknownResponseId { id: "99".into() })
    );
}

#[test]
fn fail_pending_uses_execute_failed_for_executes() {
    let mut c = configured().client;
    let a = c.execute("echo", json!({})).expect("configured");
    let b = c.shutdown().expect("configured");
    let tail = vec![
        "panicked at src/lib.rs".to_owned(),
        "note: backtrace".to_owned(),
    ];
    c.fail_pending(&Stopped::by_host("plugin trapped", tail));
    let detail = "panicked at src/lib.rs\nnote: backtrace";
    assert_eq!(
        client_events(&mut c),
        vec![
            ClientEvent::Executed {
                id: a,
                action: "echo".into(),
                result: Err(CallError::Provider(
                    ProviderError::execute_failed("plugin trapped").with_detail(detail)
                ))
            },
            ClientEvent::ShutDown {
                id: b,
                result: Err(CallError::Provider(
                    ProviderError::internal("plugin trapped").with_detail(detail)
                ))
            },
        ]
    );
    assert_eq!(c.state(), ClientState::Closed);
    // A describe in flight gets internal_error.
    let mut c = Client::new();
    c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
    c.fail_pending(&Stopped::by_host("exited with code 2", Vec::new()));
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Described { result: Err(CallError::Provider(e)), .. }] if e.code == codes::INTERNAL_ERROR && e.detail.as_deref() == Some("")
    ));
}

#[test]
fn server_answers_what_is_not_a_request_of_the_protocol() {
    // (frame, the reply the server sends by itself, whether handle_frame errs)
    let cases: &[(&str, &str, bool)] = &[
        (
            "not json",
            r#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: not JSON"}}"#,
            true,
        ),
        (
            "[1]",
            r#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: not an object"}}"#,
            true,
        ),
        (
            r#"{"id":5,"method":7}"#,
            r#"{"id":5,"error":{"code":"invalid_request","message":"invalid request: method is not a string"}}"#,
            true,
        ),
        (
            r#"{"id":5,"method":"frobnicate"}"#,
            r#"{"id":5,"error":{"code":"unknown_method","message":"unknown method: frobnicate"}}"#,
            false,
        ),
        (
            r#"{"id":5,"method":"execute","params":[]}"#,
            r#"{"id":5,"error":{"code":"invalid_request","message":"execute params must be an object"}}"#,
            false,
        ),
        (
            r#"{"id":5,"method":"execute","params":{"attrs":{}}}"#,
            r#"{"id":5,"error":{"code":"invalid_request","message":"execute needs a string action"}}"#,
            false,
        ),
    ];
    for (frame, reply, errs) in cases {
        let mut s = Server::new();
        assert_eq!(s.handle_frame(frame.as_bytes()).is_err(), *errs, "{frame}");
        assert_eq!(
            s.poll_transmit().as_deref(),
            Some(reply.as_bytes()),
            "{frame}"
        );
        assert!(s.poll_event().is_none(), "{frame}");
    }
}

#[test]
fn server_accepts_omitted_params_and_refuses_after_shutdown() {
    let mut s = Server::new();
    for frame in [
        r#"{"id":1,"method":"describe"}"#,
        r#"{"id":2,"method":"configure"}"#,
        r#"{"id":3,"method":"execute","params":{"action":"echo"}}"#,
        r#"{"id":4,"method":"shutdown"}"#,
        r#"{"id":5,"method":"execute","params":{"action":"echo"}}"#,
    ] {
        s.handle_frame(frame.as_bytes()).expect(frame);
    }
    assert_eq!(
        server_events(&mut s),
        vec![
            ServerEvent::Describe { id: Id::Num(1) },
            ServerEvent::Configure {
                id: Id::Num(2),
                config: json!({})
            },
            ServerEvent::Execute {
                id: Id::Num(3),
                action: "echo".into(),
                attrs: json!({})
            },
            ServerEvent::Shutdown { id: Id::Num(4) },
        ]
    );
    assert_eq!(
        s.poll_transmit().expect("frame"),
        br#"{"id":5,"error":{"code":"invalid_request","message":"execute after shutdown"}}"#
    );
    // Answers must match the request's method and id.
    assert!(matches!(
        s.respond_shutdown(Id::Num(3)),
        Err(ProtocolError::Unexpected { .. })
    ));
    assert_eq!(
        s.respond_execute(Id::Num(9), Ok(json!({}))),
        Err(ProtocolError::NotAwaitingResponse { id: "9".into() })
    );
    s.respond_error(
        Id::Num(3),
        ProviderError::execute_failed("boom").with_detail("d"),
    )
    .expect("pending");
    assert_eq!(
        s.poll_transmit().expect("frame"),
        br#"{"id":3,"error":{"code":"execute_failed","message":"boom","detail":"d"}}"#
    );
    assert!(matches!(
        s.handle_frame(br#"{"method":"shutdown"}"#),
        Err(ProtocolError::Unexpected { .. })
    ));
    s.reject_frame("frame too large");
    assert_eq!(
        s.poll_transmit().expect("frame"),
        br#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: frame too large"}}"#
    );
}

#[test]
fn schema_output_is_one_json_line() {
    let ok = encode_schema_output(&schema());
    assert_eq!(ok.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(parse_schema_output(&ok), Ok(schema()));
    assert_eq!(parse_schema_output(&ok[..ok.len() - 1]), Ok(schema()));
    let cases: &[(&str, &str, &str)] = &[
        ("", "schema output", "empty"),
        ("\n", "schema output", "empty"),
        (
            "{\"name\":\"d\",\"protocol\":\"1\"}\n{}\n",
            "schema output",
            "expected one line, found a line break at byte 27",
        ),
        (
            "{\"name\":\"d\",\"protocol\":\"2\"}\n",
            "schema.protocol",
            "expected \"1\", got \"2\"",
        ),
    ];
    for (out, what, reason) in cases {
        assert_eq!(
            parse_schema_output(out.as_bytes()),
            Err(ProtocolError::BadPayload {
                what,
                reason: (*reason).into()
            }),
            "{out:?}"
        );
    }
    assert!(matches!(
        parse_schema_output(b"usage: provider [schema]\n"),
        Err(ProtocolError::BadPayload {
            what: "schema output",
            ..
        })
    ));
}

#[test]
fn unknown_schema_members_are_kept() {
    let text = r#"{"name":"d","protocol":"1","actions":{"a":{"attributes":{"n":{"type":"number","sensitive":true}},"idempotent":true}},"version":"0.3"}"#;
    let s = parse_schema_output(text.as_bytes()).expect("valid");
    assert_eq!(s.extra.get("version"), Some(&json!("0.3")));
    assert_eq!(s.actions["a"].extra.get("idempotent"), Some(&json!(true)));
    assert_eq!(
        s.actions["a"].attributes["n"].extra.get("sensitive"),
        Some(&json!(true))
    );
    assert_eq!(encode_schema_output(&s), format!("{text}\n").into_bytes());
}

#[test]
fn actions_may_be_a_list() {
    let listed = r#"{"name":"d","protocol":"1","actions":[{"name":"echo","description":"echo attrs","attributes":{"x":{"type":"string","required":true}}}]}"#;
    let s = parse_schema_output(listed.as_bytes()).expect("valid");
    assert_eq!(s.actions, schema().actions);
    let cases = [
        r#"{"name":"d","protocol":"1","actions":[{"description":"no name"}]}"#,
        r#"{"name":"d","protocol":"1","actions":[{"name":"a"},{"name":"a"}]}"#,
        r#"{"name":"d","protocol":"1","actions":7}"#,
    ];
    for text in cases {
        assert!(
            matches!(
                parse_schema_output(text.as_bytes()),
                Err(ProtocolError::BadPayload { what: "schema", .. })
            ),
            "{text}"
        );
    }
}

#[test]
fn provider_errors_convert_both_ways() {
    let e = ProviderError::validation_failed("x").with_detail("d");
    assert_eq!(ProviderError::from(ErrorObject::from(e.clone())), e);
    let lenient = ProviderError::from(ErrorObject::new(-32603, "m").with_data(json!({"a": 1})));
    assert_eq!(
        lenient,
        ProviderError::new("-32603", "m").with_detail(r#"{"a":1}"#)
    );
}

/// The golden transcripts' lines, both directions, and hostile ones: a seed corpus for
/// [`fuzz`].
const FUZZ_SEEDS: &[&str] = &[
    r#"{"id":1,"method":"describe","params":{}}"#,
    r#"{"id":1,"result":{"schema":{"name":"example-orchard","protocol":"1","actions":{"echo":{"description":"return the attrs as outputs","attributes":{"defer":{"type":"bool"}}}}}}}"#,
    r#"{"id":1,"result":{"schema":{"name":"l","protocol":"1","actions":[{"name":"a","x":1,"attributes":{"k":{"type":"string","required":true,"y":[]}}}],"z":null}}}"#,
    r#"{"id":1,"result":{"schema":{"name":"old","protocol":"2"}}}"#,
    r#"{"name":"plan","protocol":"1","actions":{"a":{}}}"#,
    r#"{"id":2,"method":"configure","params":{"config":{"fail":true}}}"#,
    r#"{"id":2,"error":{"code":"configure_failed","message":"configuration rejected","detail":"config.fail is true"}}"#,
    r#"{"id":3,"result":{}}"#,
    r#"{"id":4,"method":"execute","params":{"action":"prune","attrs":{}}}"#,
    r#"{"id":4,"result":{"outputs":{"x":1}}}"#,
    r#"{"id":5,"result":{"outputs":null}}"#,
    r#"{"id":5,"error":{"code":"validation_failed","message":"values[1] is not a number","detail":"got \"two\""}}"#,
    r#"{"id":6,"result":[]}"#,
    r#"{"id":100,"method":"harvest","params":{}}"#,
    r#"{"id":101,"method":"execute","params":{"attrs":{}}}"#,
    r#"{"id":7,"method":"shutdown","params":{}}"#,
    r#"{"id":7,"result":{}}"#,
    r#"{"method":"log","params":{}}"#,
    r#"{"id":"s","method":"describe","params":[]}"#,
    r#"{"id":1.5,"method":"describe"}"#,
    r#"{"id":null,"method":"describe"}"#,
    "not json",
    "",
];

#[test]
fn fuzz_body_over_the_seed_corpus() {
    let epoch = Instant::now();
    fuzz(epoch, FUZZ_SEEDS.join("\n").as_bytes());
    for seed in FUZZ_SEEDS {
        for cut in 0..=seed.len() {
            fuzz(epoch, &seed.as_bytes()[..cut]);
        }
    }
    for a in FUZZ_SEEDS {
        for b in FUZZ_SEEDS {
            fuzz(epoch, format!("{a}\n{b}\n{a}\n{b}").as_bytes());
        }
    }
}

#[test]
fn pair_body_over_scripted_and_pseudo_random_sessions() {
    let epoch = Instant::now();
    // describe, deliver, answer, deliver back, configure (refused: answer not yet
    // delivered), …, execute twice, answer out of order, time passes, shut down.
    let scripts: &[&[u8]] = &[
        &[
            0, 250, 4, 6, 0, 0, 5, 1, 7, 1, 4, 6, 0, 0, 5, 2, 0, 9, 2, 1, 9, 4, 4, 6, 1, 1, 6, 0,
            0, 5, 5, 3, 4, 6, 0, 0, 5,
        ],
        &[0, 1, 4, 7, 5, 5, 6, 0, 0, 5, 0, 0],
        &[0, 0, 7, 0, 4, 6, 0, 0, 5],
        &[
            0, 100, 4, 6, 0, 0, 5, 1, 3, 4, 6, 0, 1, 5, 2, 0, 1, 1, 4, 6, 0, 0, 2, 0, 0, 8,
        ],
        &[],
    ];
    for script in scripts {
        fuzz_pair(epoch, script);
    }
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..2000 {
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let len = (next() % 200) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        fuzz_pair(epoch, &data);
    }
}
