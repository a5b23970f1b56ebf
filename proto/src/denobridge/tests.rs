use serde_json::json;

use super::*;
use crate::jsonrpc::{ErrorCode, REQUEST_CANCELLED};

fn server_events(s: &mut Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn client_events(c: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

type Pair = crate::testing::Pair<Client, Server>;

/// The frames as text, to compare with the expected lines.
fn text(frames: &[Vec<u8>]) -> Vec<String> {
    frames
        .iter()
        .map(|f| String::from_utf8(f.clone()).expect("utf8"))
        .collect()
}

/// A client and server of `kind` past the health check.
fn pair(kind: ProviderKind) -> Pair {
    let mut p = Pair::new(Client::new(kind), Server::new(kind));
    p.client.health().expect("health first");
    assert_eq!(
        text(&p.deliver_to_server()),
        [r#"{"jsonrpc":"2.0","id":0,"method":"health"}"#]
    );
    assert!(p.server_events().is_empty(), "server answers health itself");
    assert_eq!(
        text(&p.deliver_to_client()),
        [r#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#]
    );
    assert!(matches!(
        &p.client_events()[..],
        [ClientEvent::Response { method: Method::Health, result: Ok(Response::Health(h)), .. }] if h.ok
    ));
    p
}

type Call = fn(&mut Client) -> Result<Id, ProtocolError>;

#[test]
fn every_method_round_trips_with_exact_frames() {
    let diag = Diagnostic {
        prop_path: Some(vec!["props".into(), "name".into()]),
        ..Diagnostic::warning("normalized", "lower-cased")
    };
    let cases: Vec<(ProviderKind, Call, &str, Request, Response, &str)> = vec![
        (
            ProviderKind::Resource,
            |c| c.create(PropsParams::new(json!({"name": "a"}))),
            r#"{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"name":"a"}}}"#,
            Request::Create(PropsParams::new(json!({"name": "a"}))),
            Response::Create(CreateResult {
                id: "r1".into(),
                state: json!({"v": 1}),
                sensitive_state: Some(json!({"k": "s"})),
                diagnostics: Some(vec![diag.clone()]),
                ..Default::default()
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"id":"r1","state":{"v":1},"sensitiveState":{"k":"s"},"diagnostics":[{"severity":"warning","summary":"normalized","detail":"lower-cased","propPath":["props","name"]}]}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.read(ReadParams {
                    id: "r1".into(),
                    props: json!({}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"id":"r1","props":{}}}"#,
            Request::ReadResource(ReadParams {
                id: "r1".into(),
                props: json!({}),
                ..Default::default()
            }),
            Response::ReadResource(ReadResult::Found(ReadFound {
                props: json!({"a": 1}),
                state: json!({}),
                ..Default::default()
            })),
            r#"{"jsonrpc":"2.0","id":1,"result":{"props":{"a":1},"state":{}}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.read(ReadParams {
                    id: "r9".into(),
                    props: json!({}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"id":"r9","props":{}}}"#,
            Request::ReadResource(ReadParams {
                id: "r9".into(),
                props: json!({}),
                ..Default::default()
            }),
            Response::ReadResource(ReadResult::Gone),
            r#"{"jsonrpc":"2.0","id":1,"result":{"exists":false}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.update(UpdateParams {
                    id: "r1".into(),
                    next_props: json!({"a": 2}),
                    current_props: json!({"a": 1}),
                    current_state: json!({}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"update","params":{"id":"r1","nextProps":{"a":2},"currentProps":{"a":1},"currentState":{}}}"#,
            Request::Update(UpdateParams {
                id: "r1".into(),
                next_props: json!({"a": 2}),
                current_props: json!({"a": 1}),
                current_state: json!({}),
                ..Default::default()
            }),
            Response::Update(UpdateResult {
                state: json!({"v": 2}),
                ..Default::default()
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"state":{"v":2}}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.delete(DeleteParams {
                    id: "r1".into(),
                    props: json!({}),
                    state: json!({}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"delete","params":{"id":"r1","props":{},"state":{}}}"#,
            Request::Delete(DeleteParams {
                id: "r1".into(),
                props: json!({}),
                state: json!({}),
                ..Default::default()
            }),
            Response::Delete(DoneResult::done()),
            r#"{"jsonrpc":"2.0","id":1,"result":{"done":true}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.modify_plan(ModifyPlanParams {
                    id: None,
                    plan_type: PlanType::Create,
                    next_props: json!({"a": 1}),
                    current_props: None,
                    current_state: None,
                    current_sensitive_state: None,
                    extra: Default::default(),
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"modifyPlan","params":{"id":null,"planType":"create","nextProps":{"a":1},"currentProps":null,"currentState":null,"currentSensitiveState":null}}"#,
            Request::ModifyPlan(ModifyPlanParams {
                id: None,
                plan_type: PlanType::Create,
                next_props: json!({"a": 1}),
                current_props: None,
                current_state: None,
                current_sensitive_state: None,
                extra: Default::default(),
            }),
            Response::ModifyPlan(ModifyPlanResult::NoChanges),
            r#"{"jsonrpc":"2.0","id":1,"result":{"noChanges":true}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.modify_plan(ModifyPlanParams {
                    id: Some("r1".into()),
                    plan_type: PlanType::Update,
                    next_props: json!({"a": " x "}),
                    current_props: Some(json!({"a": 1})),
                    current_state: Some(json!({})),
                    current_sensitive_state: None,
                    extra: Default::default(),
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"modifyPlan","params":{"id":"r1","planType":"update","nextProps":{"a":" x "},"currentProps":{"a":1},"currentState":{},"currentSensitiveState":null}}"#,
            Request::ModifyPlan(ModifyPlanParams {
                id: Some("r1".into()),
                plan_type: PlanType::Update,
                next_props: json!({"a": " x "}),
                current_props: Some(json!({"a": 1})),
                current_state: Some(json!({})),
                current_sensitive_state: None,
                extra: Default::default(),
            }),
            Response::ModifyPlan(ModifyPlanResult::Modified {
                modified_props: json!({"a": "x"}),
                diagnostics: Some(vec![Diagnostic::warning("trimmed", "a")]),
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"modifiedProps":{"a":"x"},"diagnostics":[{"severity":"warning","summary":"trimmed","detail":"a"}]}}"#,
        ),
        (
            ProviderKind::Resource,
            |c| {
                c.modify_plan(ModifyPlanParams {
                    id: Some("r1".into()),
                    plan_type: PlanType::Delete,
                    next_props: Value::Null,
                    current_props: Some(json!({})),
                    current_state: Some(json!({})),
                    current_sensitive_state: None,
                    extra: Default::default(),
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"modifyPlan","params":{"id":"r1","planType":"delete","nextProps":null,"currentProps":{},"currentState":{},"currentSensitiveState":null}}"#,
            Request::ModifyPlan(ModifyPlanParams {
                id: Some("r1".into()),
                plan_type: PlanType::Delete,
                next_props: Value::Null,
                current_props: Some(json!({})),
                current_state: Some(json!({})),
                current_sensitive_state: None,
                extra: Default::default(),
            }),
            Response::ModifyPlan(ModifyPlanResult::RequiresReplacement),
            r#"{"jsonrpc":"2.0","id":1,"result":{"requiresReplacement":true}}"#,
        ),
        (
            ProviderKind::DataSource,
            |c| c.read_data(PropsParams::new(json!({"q": 1}))),
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"props":{"q":1}}}"#,
            Request::ReadData(PropsParams::new(json!({"q": 1}))),
            Response::ReadData(DataResult {
                result: json!({"x": 1}),
                sensitive_result: Some(json!({"s": 2})),
                ..Default::default()
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"result":{"x":1},"sensitiveResult":{"s":2}}}"#,
        ),
        (
            ProviderKind::Ephemeral,
            |c| c.open(PropsParams::new(json!({}))),
            r#"{"jsonrpc":"2.0","id":1,"method":"open","params":{"props":{}}}"#,
            Request::Open(PropsParams::new(json!({}))),
            Response::Open(OpenResult {
                result: json!({"token": "t"}),
                renew_at: Some(1735891200000),
                private_data: Some(json!({"n": 1})),
                ..Default::default()
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"result":{"token":"t"},"renewAt":1735891200000,"privateData":{"n":1}}}"#,
        ),
        (
            ProviderKind::Ephemeral,
            |c| {
                c.renew(PrivateParams {
                    private_data: json!({"n": 1}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"renew","params":{"privateData":{"n":1}}}"#,
            Request::Renew(PrivateParams {
                private_data: json!({"n": 1}),
                ..Default::default()
            }),
            Response::Renew(RenewResult {
                private_data: Some(json!({"n": 2})),
                ..Default::default()
            }),
            r#"{"jsonrpc":"2.0","id":1,"result":{"privateData":{"n":2}}}"#,
        ),
        (
            ProviderKind::Ephemeral,
            |c| {
                c.close(PrivateParams {
                    private_data: json!({"n": 2}),
                    ..Default::default()
                })
            },
            r#"{"jsonrpc":"2.0","id":1,"method":"close","params":{"privateData":{"n":2}}}"#,
            Request::Close(PrivateParams {
                private_data: json!({"n": 2}),
                ..Default::default()
            }),
            Response::Close(DoneResult::done()),
            r#"{"jsonrpc":"2.0","id":1,"result":{"done":true}}"#,
        ),
        (
            ProviderKind::Action,
            |c| c.invoke(PropsParams::new(json!({"go": 1}))),
            r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"props":{"go":1}}}"#,
            Request::Invoke(PropsParams::new(json!({"go": 1}))),
            Response::Invoke(DoneResult::done()),
            r#"{"jsonrpc":"2.0","id":1,"result":{"done":true}}"#,
        ),
    ];
    for (kind, call, request_frame, request, response, response_frame) in cases {
        let mut p = pair(kind);
        let id = call(&mut p.client).expect("call allowed");
        assert_eq!(text(&p.deliver_to_server()), [request_frame]);
        assert_eq!(
            p.server_events(),
            [ServerEvent::Request {
                id: id.clone(),
                request
            }],
            "{request_frame}"
        );
        p.server
            .respond(id.clone(), Ok(response.clone()))
            .expect("answers the method");
        assert_eq!(text(&p.deliver_to_client()), [response_frame]);
        assert_eq!(
            p.client_events(),
            [ClientEvent::Response {
                id,
                method: response.method(),
                result: Ok(response),
                refused: None,
            }],
            "{response_frame}"
        );
    }
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    let text = r#"{"id":"r1","state":{},"diagnostics":[{"severity":"error","summary":"s","detail":"d","code":7}],"etag":"x"}"#;
    let r: CreateResult = serde_json::from_str(text).expect("decodes");
    assert_eq!(r.extra.get("etag"), Some(&json!("x")));
    assert_eq!(serde_json::to_string(&r).expect("encodes"), text);
}

#[test]
fn shutdown_both_forms() {
    // Notification form (the real Go host): no answer, client closed at once.
    let mut p = pair(ProviderKind::Resource);
    p.client.shutdown_notify().expect("ready");
    assert!(p.client.is_closed());
    assert_eq!(
        text(&p.deliver_to_server()),
        [r#"{"jsonrpc":"2.0","method":"shutdown"}"#]
    );
    assert_eq!(p.server_events(), [ServerEvent::Shutdown { id: None }]);
    assert!(p.server.poll_transmit().is_none());
    assert!(p.server.is_shut_down());
    assert!(matches!(
        p.client.create(PropsParams::default()),
        Err(ProtocolError::Unexpected {
            state: "shut down",
            ..
        })
    ));

    // Request form (the guide): answered `{}`.
    let mut p = pair(ProviderKind::Action);
    let id = p.client.shutdown_request().expect("ready");
    assert!(!p.client.is_closed());
    assert!(matches!(
        p.client.invoke(PropsParams::default()),
        Err(ProtocolError::Unexpected {
            state: "shutting down",
            ..
        })
    ));
    p.deliver_to_server();
    assert_eq!(
        p.server_events(),
        [ServerEvent::Shutdown {
            id: Some(id.clone())
        }]
    );
    assert_eq!(
        text(&p.deliver_to_client()),
        [r#"{"jsonrpc":"2.0","id":1,"result":{}}"#]
    );
    assert_eq!(
        p.client_events(),
        [ClientEvent::Response {
            id,
            method: Method::Shutdown,
            result: Ok(Response::Shutdown(json!({}))),
            refused: None,
        }]
    );
    assert!(p.client.is_closed());
    assert!(matches!(
        p.server
            .handle_frame(br#"{"jsonrpc":"2.0","id":5,"method":"health"}"#),
        Err(ProtocolError::Unexpected {
            state: "shut down",
            ..
        })
    ));
}

#[test]
fn client_state_and_kind_are_checked() {
    let mut c = Client::new(ProviderKind::Resource);
    let cases: Vec<(Call, &str)> = vec![
        (|c| c.create(PropsParams::default()), "call \"create\""),
        (|c| c.shutdown_request(), "call \"shutdown\""),
    ];
    for (call, got) in cases {
        assert_eq!(
            call(&mut c),
            Err(ProtocolError::Unexpected {
                state: "awaiting health",
                got: got.into()
            })
        );
    }
    c.health().expect("first");
    let wrong_kind: Vec<Call> = vec![
        |c| c.read_data(PropsParams::default()),
        |c| c.open(PropsParams::default()),
        |c| c.renew(PrivateParams::default()),
        |c| c.close(PrivateParams::default()),
        |c| c.invoke(PropsParams::default()),
    ];
    for call in wrong_kind {
        assert!(matches!(
            call(&mut c),
            Err(ProtocolError::Unexpected {
                state: "resource provider",
                ..
            })
        ));
    }
    let mut d = Client::new(ProviderKind::DataSource);
    d.health().expect("first");
    assert!(matches!(
        d.read(ReadParams::default()),
        Err(ProtocolError::Unexpected {
            state: "data source provider",
            ..
        })
    ));
    // Nothing but the health request was sent.
    assert_eq!(std::iter::from_fn(|| c.poll_transmit()).count(), 1);
}

#[test]
fn server_answers_unknown_methods_and_bad_params() {
    let cases: &[(ProviderKind, &str, &str)] = &[
        (
            ProviderKind::Resource,
            r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"props":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
        ),
        (
            ProviderKind::Action,
            r#"{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
        ),
        (
            ProviderKind::Resource,
            r#"{"jsonrpc":"2.0","id":1,"method":"frobnicate"}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
        ),
        (
            ProviderKind::Resource,
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"props":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":"missing field `id`"}}"#,
        ),
        (
            ProviderKind::Resource,
            r#"{"jsonrpc":"2.0","id":1,"method":"create"}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":"invalid type: null, expected struct PropsParams"}}"#,
        ),
        (
            ProviderKind::Resource,
            r#"{"jsonrpc":"2.0","id":1,"method":"modifyPlan","params":{"planType":"rename","nextProps":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":"unknown variant `rename`, expected one of `create`, `update`, `delete`"}}"#,
        ),
        // The guide's form of health, with empty params, is answered like the Go host's.
        (
            ProviderKind::DataSource,
            r#"{"jsonrpc":"2.0","method":"health","params":{},"id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#,
        ),
    ];
    for (kind, input, want) in cases {
        let mut s = Server::new(*kind);
        s.handle_frame(input.as_bytes()).expect(input);
        let out = s.poll_transmit().expect("answered");
        assert_eq!(std::str::from_utf8(&out).expect("utf8"), *want, "{input}");
        assert!(server_events(&mut s).is_empty());
    }
    // Unknown notifications are ignored.
    let mut s = Server::new(ProviderKind::Resource);
    s.handle_frame(br#"{"jsonrpc":"2.0","method":"$/ping"}"#)
        .expect("ignored");
    assert!(s.poll_transmit().is_none() && s.poll_event().is_none());
}

#[test]
fn server_checks_its_answers() {
    let mut p = pair(ProviderKind::Resource);
    let id = p.client.create(PropsParams::default()).expect("ready");
    p.deliver_to_server();
    assert!(matches!(
        p.server
            .respond(id.clone(), Ok(Response::Delete(DoneResult::done()))),
        Err(ProtocolError::BadPayload {
            what: "response",
            ..
        })
    ));
    assert!(matches!(
        p.server.progress(&id, InvokeProgress::default()),
        Err(ProtocolError::Unexpected { .. })
    ));
    p.server
        .respond(id.clone(), Err(internal_error()))
        .expect("errors answer anything");
    assert_eq!(
        p.server.respond(id, Err(internal_error())),
        Err(ProtocolError::NotAwaitingResponse { id: "1".into() })
    );
}

#[test]
fn out_of_order_answers_are_matched_by_id() {
    let mut p = pair(ProviderKind::Resource);
    let a = p
        .client
        .create(PropsParams::new(json!({"n": 1})))
        .expect("ready");
    let b = p
        .client
        .read(ReadParams {
            id: "r1".into(),
            ..Default::default()
        })
        .expect("ready");
    p.deliver_to_server();
    assert_eq!(p.server_events().len(), 2);
    p.server
        .respond(b.clone(), Ok(Response::ReadResource(ReadResult::Gone)))
        .expect("b");
    p.server
        .respond(
            a.clone(),
            Ok(Response::Create(CreateResult {
                id: "r1".into(),
                ..Default::default()
            })),
        )
        .expect("a");
    p.deliver_to_client();
    let got: Vec<(Id, Method)> = p
        .client_events()
        .into_iter()
        .map(|e| match e {
            ClientEvent::Response {
                id,
                method,
                result: Ok(_),
                refused: None,
            } => (id, method),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, [(b, Method::Read), (a, Method::Create)]);
    assert_eq!(p.client.pending().count(), 0);
}

#[test]
fn invoke_progress_flows_before_the_answer() {
    let mut p = pair(ProviderKind::Action);
    let id = p.client.invoke(PropsParams::new(json!({}))).expect("ready");
    p.deliver_to_server();
    let _ = p.server_events();
    for step in ["step 1", "step 2"] {
        p.server
            .progress(
                &id,
                InvokeProgress {
                    message: step.into(),
                    ..Default::default()
                },
            )
            .expect("invoke pending");
    }
    p.server
        .respond(id.clone(), Ok(Response::Invoke(DoneResult::done())))
        .expect("pending");
    assert_eq!(
        text(&p.deliver_to_client()),
        [
            r#"{"jsonrpc":"2.0","method":"invokeProgress","params":{"message":"step 1"}}"#,
            r#"{"jsonrpc":"2.0","method":"invokeProgress","params":{"message":"step 2"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"done":true}}"#,
        ]
    );
    let evs = p.client_events();
    assert!(matches!(
        &evs[..],
        [
            ClientEvent::Progress { invoke: Some(a), progress: p1 },
            ClientEvent::Progress { invoke: Some(b), .. },
            ClientEvent::Response { method: Method::Invoke, result: Ok(_), .. },
        ] if *a == id && *b == id && p1.message == "step 1"
    ));
    // Progress with no invoke pending is a protocol violation.
    assert!(matches!(
        p.client.handle_frame(
            br#"{"jsonrpc":"2.0","method":"invokeProgress","params":{"message":"x"}}"#
        ),
        Err(ProtocolError::Unexpected {
            state: "no invoke pending",
            ..
        })
    ));
}

#[test]
fn cancel_completes_locally_and_drops_the_late_answer() {
    let mut p = pair(ProviderKind::Resource);
    let id = p.client.create(PropsParams::new(json!({}))).expect("ready");
    p.deliver_to_server();
    assert!(p.client.cancel(&id));
    assert!(!p.client.cancel(&id));
    assert!(
        p.client.poll_transmit().is_none(),
        "no cancel message on the wire"
    );
    match &p.client_events()[..] {
        [
            ClientEvent::Response {
                id: got,
                method: Method::Create,
                result: Err(e),
                refused: None,
            },
        ] => {
            assert_eq!(got, &id);
            assert_eq!(e.code, ErrorCode::Int(REQUEST_CANCELLED));
        }
        other => panic!("{other:?}"),
    }
    let _ = p.server_events();
    p.server
        .respond(
            id,
            Ok(Response::Create(CreateResult {
                id: "late".into(),
                ..Default::default()
            })),
        )
        .expect("plugin still answers");
    assert_eq!(p.deliver_to_client().len(), 1);
    assert!(p.client_events().is_empty(), "late answer ignored");
}

#[test]
fn fail_pending_carries_reason_and_stderr() {
    let mut c = pair(ProviderKind::Resource).client;
    let a = c.create(PropsParams::default()).expect("ready");
    let b = c.delete(DeleteParams::default()).expect("ready");
    c.fail_pending(&Stopped::ended(
        crate::stopped::Exit::Exited(1),
        vec!["boom".into()],
    ));
    let evs = client_events(&mut c);
    assert_eq!(evs.len(), 2);
    for (ev, want) in evs.iter().zip([a, b]) {
        match ev {
            ClientEvent::Response {
                id, result: Err(e), ..
            } => {
                assert_eq!(id, &want);
                assert_eq!(e.code, ErrorCode::Int(INTERNAL_ERROR));
                assert_eq!(
                    e.data,
                    Some(
                        json!({"reason": "plugin exited with code 1", "exit": {"kind": "exited", "code": 1}, "stderr": ["boom"]})
                    )
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn with_stderr_enriches_bare_errors() {
    let tail = ["line 1".to_owned(), "line 2".to_owned()];
    let cases = [
        (internal_error(), json!({"stderr": ["line 1", "line 2"]})),
        (
            internal_error().with_data(json!({"why": "x"})),
            json!({"why": "x", "stderr": ["line 1", "line 2"]}),
        ),
        (
            internal_error().with_data(json!("text")),
            json!({"data": "text", "stderr": ["line 1", "line 2"]}),
        ),
    ];
    for (error, want) in cases {
        let got = with_stderr(error, &tail);
        assert_eq!(got.data, Some(want));
        assert_eq!(got.message, "Internal error");
    }
}

#[test]
fn bad_results_complete_the_request_and_are_reported() {
    let mut c = pair(ProviderKind::Resource).client;
    let id = c.create(PropsParams::default()).expect("ready");
    let _ = c.poll_transmit();
    assert!(matches!(
        c.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":{"state":{}}}"#),
        Err(ProtocolError::BadPayload { what: "result", .. })
    ));
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Response { id: got, result: Err(e), refused: Some(ProtocolError::BadPayload { what: "result", .. }), .. }]
            if *got == id && e.message.starts_with("invalid create result")
    ));
    // A plugin→host request is not part of the protocol: refused with -32601.
    assert!(matches!(
        c.handle_frame(br#"{"jsonrpc":"2.0","id":"p","method":"ask"}"#),
        Err(ProtocolError::Unexpected { .. })
    ));
    assert_eq!(
        c.poll_transmit().as_deref(),
        Some(
            &br#"{"jsonrpc":"2.0","id":"p","error":{"code":-32601,"message":"Method not found"}}"#
                [..]
        )
    );
}

#[test]
fn modify_plan_result_shapes_decode() {
    let cases = [
        (r#"{"noChanges":true}"#, Some(ModifyPlanResult::NoChanges)),
        (
            r#"{"requiresReplacement":true}"#,
            Some(ModifyPlanResult::RequiresReplacement),
        ),
        (
            r#"{"requiresReplacement":false}"#,
            Some(ModifyPlanResult::NoChanges),
        ),
        (
            r#"{"modifiedProps":{"a":1}}"#,
            Some(ModifyPlanResult::Modified {
                modified_props: json!({"a": 1}),
                diagnostics: None,
            }),
        ),
        (r#"{}"#, None),
        (r#"{"modifiedProps":{},"diagnostics":[1]}"#, None),
    ];
    for (text, want) in cases {
        assert_eq!(
            serde_json::from_str::<ModifyPlanResult>(text).ok(),
            want,
            "{text}"
        );
    }
    assert!(serde_json::from_str::<ReadResult>(r#"{"exists":"no"}"#).is_err());
}

#[test]
fn deadlines_use_the_time_passed_in() {
    let t0 = std::time::Instant::now();
    let mut p = pair(ProviderKind::Resource);
    p.client
        .set_deadline(Some(t0 + std::time::Duration::from_secs(5)));
    let id = p.client.create(PropsParams::default()).expect("ready");
    p.deliver_to_server();
    assert_eq!(
        p.client.poll_timeout(),
        Some(t0 + std::time::Duration::from_secs(5))
    );
    p.client
        .handle_timeout(t0 + std::time::Duration::from_secs(4));
    assert!(p.client_events().is_empty());
    p.client
        .handle_timeout(t0 + std::time::Duration::from_secs(5));
    assert!(matches!(
        &p.client_events()[..],
        [ClientEvent::Response { id: got, result: Err(e), .. }] if *got == id && e.message == "request timed out"
    ));
    // The late answer is ignored.
    let _ = p.server_events();
    p.server
        .respond(id, Err(internal_error()))
        .expect("pending");
    p.deliver_to_client();
    assert!(p.client_events().is_empty());
}

#[test]
fn fuzz_body_survives_the_seed_corpus() {
    let corpus: &[&[u8]] = &[
        b"",
        b"\n\n",
        br#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"exists":false}}
{"jsonrpc":"2.0","id":1,"result":{"exists":false}}"#,
        br#"{"jsonrpc":"2.0","id":2,"result":{"modifiedProps":1,"diagnostics":"x"}}"#,
        br#"{"jsonrpc":"2.0","method":"invokeProgress","params":{"message":7}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"props":{}}}
{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"props":{}}}
{"jsonrpc":"2.0","method":"shutdown"}
{"jsonrpc":"2.0","id":2,"method":"health"}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"modifyPlan","params":{"planType":"update","nextProps":null,"id":5}}"#,
        b"\xff\xfe{",
        br#"{"jsonrpc":"2.0","id":"s","method":"shutdown","params":[]}"#,
    ];
    for data in corpus {
        // Every prefix too: a frame cut anywhere must be refused, not panic.
        for end in 0..=data.len() {
            fuzz(&data[..end]);
        }
    }
}
