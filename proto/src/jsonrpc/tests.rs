//! The messages' codec in both dialects, then the peer's rules.

use std::time::Duration;

use serde_json::json;

use super::*;

#[test]
fn decodes_every_kind_in_both_dialects() {
    let cases: &[(&str, Dialect, Message)] = &[
        (
            r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#,
            Dialect::JsonRpc2,
            Message::request(0, "ready", None),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"a","method":"invoke","params":{"selector":"f"}}"#,
            Dialect::JsonRpc2,
            Message::request("a", "invoke", Some(json!({"selector":"f"}))),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"shutdown"}"#,
            Dialect::JsonRpc2,
            Message::notification("shutdown", None),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":["0x1"]}"#,
            Dialect::JsonRpc2,
            Message::response(1, Ok(json!(["0x1"]))),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom","data":{"x":1}}}"#,
            Dialect::JsonRpc2,
            Message::response(
                1,
                Err(ErrorObject::new(-32603, "boom").with_data(json!({"x":1}))),
            ),
        ),
        (
            r#"{"id":42,"method":"describe","params":{}}"#,
            Dialect::Orchard,
            Message::request(42, "describe", Some(json!({}))),
        ),
        (
            r#"{"id":42,"error":{"code":"unknown_action","message":"unknown action: foo","detail":"more"}}"#,
            Dialect::Orchard,
            Message::response(
                42,
                Err(ErrorObject::new("unknown_action", "unknown action: foo")
                    .with_data(json!("more"))),
            ),
        ),
    ];
    for (text, dialect, want) in cases {
        let got = Message::decode(text.as_bytes(), *dialect).expect(text);
        assert_eq!(&got, want, "{text}");
        // Round trip.
        assert_eq!(
            Message::decode(&got.encode(*dialect), *dialect).expect("re-decode"),
            got
        );
    }
}

#[test]
fn encodes_exact_bytes() {
    let m = Message::request(0, "ready", None);
    assert_eq!(
        m.encode(Dialect::JsonRpc2),
        br#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#
    );
    assert_eq!(m.encode(Dialect::Orchard), br#"{"id":0,"method":"ready"}"#);
}

#[test]
fn rejects_invalid_messages() {
    let cases: &[(&str, &str)] = &[
        ("[1]", "not an object"),
        (r#"{"jsonrpc":"2.0"}"#, "no method and no id"),
        (r#"{"id":1}"#, "neither method, result nor error"),
        (
            r#"{"id":1,"result":1,"error":{"code":1}}"#,
            "both result and error",
        ),
        (r#"{"id":{},"method":"x"}"#, "id is not a number or string"),
        (r#"{"id":null,"method":"x"}"#, "request id is null"),
        (r#"{"method":3}"#, "method is not a string"),
        (r#"{"id":1,"error":"bad"}"#, "error is not an object"),
    ];
    for (text, reason) in cases {
        match Message::decode(text.as_bytes(), Dialect::JsonRpc2) {
            Err(ProtocolError::Invalid { reason: got, .. }) => {
                assert_eq!(&got, reason, "{text}")
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(
        Message::decode(br#"{"jsonrpc":"1.0","id":1,"result":1}"#, Dialect::JsonRpc2),
        Err(ProtocolError::WrongVersion {
            got: "\"1.0\"".into()
        })
    );
    assert!(matches!(
        Message::decode(b"hello", Dialect::JsonRpc2),
        Err(ProtocolError::NotJson { .. })
    ));
}

// The peer: requests, answers, cancels and deadlines between two connected peers.

/// Deliver everything `from` has to send to `to`.
fn pump(from: &mut Peer, to: &mut Peer) {
    while let Some(frame) = from.poll_transmit() {
        to.handle_frame(&frame).expect("valid frame");
    }
}

fn events(p: &mut Peer) -> Vec<Event> {
    std::iter::from_fn(|| p.poll_event()).collect()
}

#[test]
fn requests_both_ways_out_of_order_and_notifications() {
    let mut host = Peer::new(Dialect::JsonRpc2);
    let mut plugin = Peer::new(Dialect::JsonRpc2);
    let a = host.request("a", None);
    let b = host.request("b", Some(json!([1])));
    host.notify("note", None);
    pump(&mut host, &mut plugin);
    assert_eq!(
        events(&mut plugin),
        vec![
            Event::Request {
                id: Id::Num(0),
                method: "a".into(),
                params: None
            },
            Event::Request {
                id: Id::Num(1),
                method: "b".into(),
                params: Some(json!([1]))
            },
            Event::Notification {
                method: "note".into(),
                params: None
            },
        ]
    );
    // The plugin asks the host something with a string id, then answers b before a.
    plugin
        .request_with_id(Id::from("p1"), "ask", None)
        .expect("fresh id");
    plugin
        .respond(b.clone(), Ok(json!("B")))
        .expect("b pending");
    plugin
        .respond(a.clone(), Err(ErrorObject::new(-32603, "nope")))
        .expect("a pending");
    pump(&mut plugin, &mut host);
    assert_eq!(
        events(&mut host),
        vec![
            Event::Request {
                id: Id::from("p1"),
                method: "ask".into(),
                params: None
            },
            Event::Response {
                id: b,
                method: "b".into(),
                result: Ok(json!("B"))
            },
            Event::Response {
                id: a,
                method: "a".into(),
                result: Err(ErrorObject::new(-32603, "nope"))
            },
        ]
    );
    host.respond(Id::from("p1"), Ok(json!({})))
        .expect("p1 pending");
    pump(&mut host, &mut plugin);
    assert!(matches!(events(&mut plugin)[..], [Event::Response { .. }]));
    assert_eq!(host.pending().count(), 0);
}

#[test]
fn cancel_completes_locally_and_ignores_the_late_answer() {
    let mut host = Peer::new(Dialect::JsonRpc2);
    let mut plugin = Peer::new(Dialect::JsonRpc2);
    let id = host.request("slow", None);
    pump(&mut host, &mut plugin);
    assert!(host.cancel(&id));
    assert!(!host.cancel(&id));
    match &events(&mut host)[..] {
        [Event::Response { result: Err(e), .. }] => {
            assert_eq!(e.code, ErrorCode::Int(-32800))
        }
        other => panic!("{other:?}"),
    }
    let _ = events(&mut plugin);
    plugin.respond(id, Ok(json!(1))).expect("pending");
    pump(&mut plugin, &mut host);
    assert!(events(&mut host).is_empty());
}

/// Caught by the `jsonrpc_pair` fuzz body: an id reused after a cancel let the late
/// answer to the cancelled request complete the new one, and the other side saw the id
/// twice (`DuplicateId`).
#[test]
fn a_given_up_id_is_not_reused_while_its_answer_may_arrive() {
    let mut host = Peer::new(Dialect::JsonRpc2);
    host.request_with_id(Id::from("a"), "slow", None)
        .expect("fresh id");
    host.request_with_id(Id::Num(1), "slow", None)
        .expect("fresh id");
    assert!(host.cancel(&Id::from("a")));
    assert!(host.cancel(&Id::Num(1)));
    assert_eq!(
        host.request_with_id(Id::from("a"), "again", None),
        Err(ProtocolError::DuplicateId { id: "\"a\"".into() })
    );
    // Automatic ids skip it too.
    assert_eq!(host.request("x", None), Id::Num(0));
    assert_eq!(host.request("y", None), Id::Num(2));
    // The late answers are ignored, not taken for anything else.
    host.handle_frame(br#"{"jsonrpc":"2.0","id":"a","result":1}"#)
        .expect("late answer");
    host.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":1}"#)
        .expect("late answer");
    let evs = events(&mut host);
    assert_eq!(evs.len(), 2, "two cancels and nothing else: {evs:?}");
    assert_eq!(host.pending().count(), 2);
}

#[test]
fn timeouts_use_the_time_passed_in() {
    let t0 = Instant::now();
    let mut host = Peer::new(Dialect::Orchard);
    let id = host.request_with_deadline("describe", None, Some(t0 + Duration::from_secs(5)));
    assert_eq!(host.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    host.handle_timeout(t0 + Duration::from_secs(4));
    assert!(events(&mut host).is_empty());
    host.handle_timeout(t0 + Duration::from_secs(5));
    match &events(&mut host)[..] {
        [
            Event::Response {
                id: got,
                result: Err(e),
                ..
            },
        ] => {
            assert_eq!(got, &id);
            assert_eq!(e.code, ErrorCode::Str("internal_error".into()));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn protocol_violations_are_typed() {
    let mut host = Peer::new(Dialect::JsonRpc2);
    assert_eq!(
        host.handle_frame(br#"{"jsonrpc":"2.0","id":9,"result":1}"#),
        Err(ProtocolError::UnknownResponseId { id: "9".into() })
    );
    assert_eq!(
        host.respond(Id::Num(3), Ok(json!(1))),
        Err(ProtocolError::NotAwaitingResponse { id: "3".into() })
    );
    host.handle_frame(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#)
        .expect("request");
    assert_eq!(
        host.handle_frame(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#),
        Err(ProtocolError::DuplicateId { id: "1".into() })
    );
}

#[test]
fn fail_pending_answers_every_request() {
    let mut host = Peer::new(Dialect::JsonRpc2);
    host.request("a", None);
    host.request("b", None);
    host.fail_pending(
        ErrorObject::new(-32603, "plugin ran out of fuel").with_data(json!({"stderr": ["x"]})),
    );
    let evs = events(&mut host);
    assert_eq!(evs.len(), 2);
    for e in evs {
        assert!(
            matches!(e, Event::Response { result: Err(ref err), .. } if err.message == "plugin ran out of fuel")
        );
    }
}
