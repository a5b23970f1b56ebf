use serde_json::json;

use super::*;
use crate::jsonrpc::{ErrorCode, INTERNAL_ERROR, ProtocolError, REQUEST_CANCELLED};

/// A manager and a runner wired back to back.
type Pair = crate::testing::Pair<Client, Server>;

fn pair(form: CallForm) -> Pair {
    Pair::new(Client::with_call_form(form), Server::new())
}

impl Pair {
    /// initialize → result → initialized.
    fn ready(form: CallForm) -> Self {
        let mut p = pair(form);
        p.client
            .initialize(&InitializeParams::default())
            .expect("start");
        let Some(ServerEvent::Initialize { id, .. }) = p.server_receives().pop() else {
            panic!("no initialize")
        };
        p.server
            .respond_initialize(id, &InitializeResult::new("er", "1"))
            .expect("initializing");
        assert!(matches!(
            &p.client_receives()[..],
            [ClientEvent::Initialize { result: Ok(_), .. }]
        ));
        p.client.initialized().expect("initialized");
        assert_eq!(p.server_receives(), vec![ServerEvent::Initialized]);
        p
    }

    /// Make `call`, check the runner sees it unchanged, answer `answer`, return the reply.
    fn round_trip(&mut self, call: Call, answer: Result<Reply, FineCodeError>) -> ClientEvent {
        let id = self.client.call(call.clone()).expect("ready");
        let evs = self.server_receives();
        let [
            ServerEvent::Call {
                id: got,
                call: seen,
                form,
            },
        ] = &evs[..]
        else {
            panic!("{evs:?}")
        };
        assert_eq!((got, seen, *form), (&id, &call, self.client.call_form()));
        self.server.respond(id, answer).expect("in flight");
        let mut evs = self.client_receives();
        assert_eq!(evs.len(), 1, "{evs:?}");
        evs.remove(0)
    }
}

fn every_call() -> Vec<(Call, Reply)> {
    let mut metas = ActionMetas::new();
    metas.insert(
        "ext.Lint".into(),
        ActionMeta {
            canonical_source: "ext.actions.Lint".into(),
            runs_concurrently: true,
            extra: Default::default(),
        },
    );
    let mut schemas = PayloadSchemas::new();
    schemas.insert("lint".into(), Some(PayloadSchema::default()));
    schemas.insert("broken".into(), None);
    vec![
        (
            Call::UpdateConfig(UpdateConfigParams {
                working_dir: "/p".into(),
                project_name: "p".into(),
                project_def_path: "/p/finecode.toml".into(),
                config: json!({"actions": []}),
            }),
            Reply::UpdateConfig,
        ),
        (
            Call::GetInfo,
            Reply::GetInfo(RunnerInfo {
                log_file_path: Some("/tmp/er.log".into()),
                extra: Default::default(),
            }),
        ),
        (Call::ResolveActionMeta, Reply::ResolveActionMeta(metas)),
        (
            Call::RunAction(RunActionParams::new("lint", json!({"file": "a.py"}))),
            Reply::RunAction(RunActionResult::success(&json!({"json": {"n": 1}}))),
        ),
        (
            Call::RunHandlers(RunHandlersParams {
                action_name: "lint".into(),
                handler_names: vec!["h1".into(), "h2".into()],
                previous_result: Some(json!({"n": 0})),
                options: Some(RunOptions::default()),
            }),
            Reply::RunHandlers(RunHandlersResult {
                status: RunStatus::Success,
                result: json!({"n": 2}),
                result_by_format: Default::default(),
                return_code: 0,
            }),
        ),
        (
            Call::MergeResults(MergeResultsParams {
                action_name: "lint".into(),
                results: vec![json!({"n": 1}), json!({"n": 2})],
            }),
            Reply::MergeResults(json!({"n": 3})),
        ),
        (Call::GetPayloadSchemas, Reply::GetPayloadSchemas(schemas)),
        (
            Call::ReloadAction {
                action_name: "lint".into(),
            },
            Reply::ReloadAction,
        ),
        (
            Call::ResolveSource {
                source: "ext.Lint".into(),
            },
            Reply::ResolveSource("ext.actions.Lint".into()),
        ),
        (
            Call::ResolvePackagePath {
                package_name: "ext".into(),
            },
            Reply::ResolvePackagePath("/site/ext".into()),
        ),
    ]
}

#[test]
fn every_call_round_trips_in_both_forms() {
    for form in [CallForm::Direct, CallForm::ExecuteCommand] {
        let mut p = Pair::ready(form);
        for (call, reply) in every_call() {
            let method = call.method();
            match p.round_trip(call, Ok(reply.clone())) {
                ClientEvent::Reply {
                    method: m,
                    result: Ok(got),
                    ..
                } => assert_eq!((m, got), (method, reply), "{form:?}"),
                other => panic!("{form:?} {method}: {other:?}"),
            }
        }
        let id = p.client.shutdown().expect("ready");
        assert_eq!(
            p.server_receives(),
            vec![ServerEvent::Shutdown { id: id.clone() }]
        );
        p.server
            .respond_shutdown(id.clone())
            .expect("shutting down");
        assert_eq!(
            p.client_receives(),
            vec![ClientEvent::Shutdown { id, result: Ok(()) }]
        );
        assert_eq!(p.client.state(), ClientState::ShutDown);
        p.client.exit().expect("shut down");
        assert_eq!(p.server_receives(), vec![ServerEvent::Exit]);
        assert_eq!(
            (p.client.state(), p.server.state()),
            (ClientState::Closed, ServerState::Exited)
        );
    }
}

#[test]
fn wire_forms_match_the_seed_and_the_released_runner() {
    let params =
        RunActionParams::new("lint", json!({"f": 1})).with_options(RunOptions::streamed(7));
    let cases: &[(CallForm, Call, &str)] = &[
        (
            CallForm::Direct,
            Call::RunAction(params.clone()),
            r#"{"jsonrpc":"2.0","id":2,"method":"actions/run","params":{"actionName":"lint","params":{"f":1},"options":{"partialResultToken":7}}}"#,
        ),
        (
            CallForm::ExecuteCommand,
            Call::RunAction(params),
            r#"{"jsonrpc":"2.0","id":2,"method":"workspace/executeCommand","params":{"command":"actions/run","arguments":["lint",{"f":1},{"partialResultToken":7}]}}"#,
        ),
        (
            CallForm::ExecuteCommand,
            every_call()[0].0.clone(),
            r#"{"jsonrpc":"2.0","id":2,"method":"workspace/executeCommand","params":{"command":"finecodeRunner/updateConfig","arguments":["/p","p","/p/finecode.toml",{"actions":[]}]}}"#,
        ),
        (
            CallForm::ExecuteCommand,
            Call::GetPayloadSchemas,
            r#"{"jsonrpc":"2.0","id":2,"method":"workspace/executeCommand","params":{"command":"actions/getPayloadSchemas","arguments":[]}}"#,
        ),
        (
            CallForm::Direct,
            Call::ResolveActionMeta,
            r#"{"jsonrpc":"2.0","id":2,"method":"finecodeRunner/resolveActionMeta","params":{}}"#,
        ),
    ];
    for (form, call, want) in cases {
        let mut p = Pair::ready(*form);
        p.client.call(call.clone()).expect("ready");
        let got = p.client.poll_transmit().expect("a frame");
        assert_eq!(String::from_utf8_lossy(&got), *want);
    }
}

#[test]
fn run_results_use_the_spelling_of_the_form() {
    for (form, want) in [
        (
            CallForm::Direct,
            r#"{"jsonrpc":"2.0","id":2,"result":{"status":"success","result_by_format":"{\"json\":1}","return_code":0}}"#,
        ),
        (
            CallForm::ExecuteCommand,
            r#"{"jsonrpc":"2.0","id":2,"result":{"status":"success","resultByFormat":"{\"json\":1}","returnCode":0}}"#,
        ),
    ] {
        let mut p = Pair::ready(form);
        p.client
            .run_action(RunActionParams::new("a", json!({})))
            .expect("ready");
        let Some(ServerEvent::Call { id, .. }) = p.server_receives().pop() else {
            panic!()
        };
        let reply = Reply::RunAction(RunActionResult::success(&json!({"json": 1})));
        p.server.respond(id, Ok(reply)).expect("in flight");
        let frame = p.server.poll_transmit().expect("answer");
        assert_eq!(String::from_utf8_lossy(&frame), want);
        // Either spelling decodes, whatever the form.
        p.client.handle_frame(&frame).expect("valid");
        assert!(matches!(
            p.client.poll_event(),
            Some(ClientEvent::Reply {
                result: Ok(Reply::RunAction(_)),
                ..
            })
        ));
    }
}

#[test]
fn results_that_break_the_rules_are_bad_results() {
    let cases: &[(Method, Value, bool, &str)] = &[
        (
            Method::RunAction,
            json!({"status": "success", "result_by_format": "{}", "return_code": 0}),
            false,
            "empty result_by_format",
        ),
        (
            Method::RunAction,
            json!({"status": "streamed", "result_by_format": "{}", "return_code": 0}),
            false,
            "no partialResultToken",
        ),
        (
            Method::RunAction,
            json!({"status": "success", "result_by_format": "{not json", "return_code": 0}),
            false,
            "result_by_format:",
        ),
        (
            Method::RunAction,
            json!({"return_code": 0}),
            false,
            "status",
        ),
        (
            Method::RunHandlers,
            json!({"status": "streamed", "result": {}, "resultByFormat": {}}),
            false,
            "no partialResultToken",
        ),
        (Method::MergeResults, json!({}), false, "missing merged"),
        (
            Method::ResolveSource,
            json!({"canonicalSource": 3}),
            false,
            "canonicalSource",
        ),
        (Method::GetPayloadSchemas, json!([]), false, "map"),
    ];
    for (method, value, streaming, reason) in cases {
        match Reply::from_value(*method, value.clone(), *streaming) {
            Err(FineCodeError::BadResult {
                method: m,
                reason: r,
            }) => {
                assert_eq!(m, method.as_str());
                assert!(r.contains(reason), "{method}: {r:?} lacks {reason:?}");
            }
            other => panic!("{method} {value}: {other:?}"),
        }
    }
    // Allowed: an intermediate runHandlers segment with no formats; a stopped run.
    let ok: &[(Method, Value, bool)] = &[
        (
            Method::RunHandlers,
            json!({"status": "success", "result": {}, "resultByFormat": {}, "returnCode": 0}),
            false,
        ),
        (
            Method::RunAction,
            json!({"status": "stopped", "resultByFormat": "{\"json\":{}}", "returnCode": 1}),
            false,
        ),
        (
            Method::RunAction,
            json!({"status": "streamed", "result_by_format": "{}", "return_code": 0}),
            true,
        ),
        (
            Method::RunAction,
            json!({"status": "later", "result_by_format": "{\"json\":1}", "return_code": 0}),
            false,
        ),
    ];
    for (method, value, streaming) in ok {
        Reply::from_value(*method, value.clone(), *streaming).expect("valid");
    }
}

#[test]
fn command_level_failures_are_errors_not_results() {
    for method in [Method::RunAction, Method::RunHandlers, Method::MergeResults] {
        assert_eq!(
            Reply::from_value(method, json!({"error": "boom"}), false),
            Err(FineCodeError::Command {
                message: "boom".into()
            })
        );
    }
    let mut p = Pair::ready(CallForm::Direct);
    let ev = p.round_trip(
        Call::RunAction(RunActionParams::new("broken", json!({}))),
        Err(FineCodeError::command("it broke")),
    );
    assert!(matches!(
        ev,
        ClientEvent::Reply { result: Err(FineCodeError::Command { ref message }), .. } if message == "it broke"
    ));
    // An Rpc error stays one.
    let ev = p.round_trip(
        Call::ResolveSource { source: "x".into() },
        Err(ErrorObject::new(INTERNAL_ERROR, "cannot import x").into()),
    );
    assert!(matches!(
        ev,
        ClientEvent::Reply { result: Err(FineCodeError::Rpc(ref e)), .. } if e.message == "cannot import x"
    ));
}

#[test]
fn progress_is_matched_to_its_call_by_token() {
    let mut p = Pair::ready(CallForm::Direct);
    let params = RunActionParams::new("lint", json!({})).with_options(RunOptions::streamed("t1"));
    let id = p.client.run_action(params).expect("ready");
    // A second call may not reuse a token in flight.
    let dup = RunActionParams::new("lint", json!({})).with_options(RunOptions::streamed("t1"));
    assert!(matches!(
        p.client.run_action(dup),
        Err(ProtocolError::BadPayload {
            what: "partialResultToken",
            ..
        })
    ));
    let Some(ServerEvent::Call { id: got, .. }) = p.server_receives().pop() else {
        panic!()
    };
    assert_eq!(p.server.progress(&got, &json!({"messages": [1]})), Ok(true));
    assert_eq!(p.server.progress(&got, &json!({"messages": [2]})), Ok(true));
    p.server
        .respond(got, Ok(Reply::RunAction(RunActionResult::streamed())))
        .expect("in flight");
    let evs = p.client_receives();
    let values: Vec<Value> = evs
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Progress { id: pid, params } => {
                assert_eq!(pid, &id);
                assert_eq!(params.token, ProgressToken::from("t1"));
                Some(params.decode_value().expect("JSON string"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        values,
        vec![json!({"messages": [1]}), json!({"messages": [2]})]
    );
    assert!(matches!(
        evs.last(),
        Some(ClientEvent::Reply { result: Ok(Reply::RunAction(r)), .. }) if r.status == RunStatus::Streamed
    ));
    // The token is free again; progress for it now is a violation.
    assert!(matches!(
        p.client.handle_frame(
            br#"{"jsonrpc":"2.0","method":"$/progress","params":{"token":"t1","value":"{}"}}"#
        ),
        Err(ProtocolError::BadPayload {
            what: "$/progress",
            ..
        })
    ));
    // Without a token the server sends nothing.
    let Some(ServerEvent::Call { id, .. }) = ({
        p.client
            .run_action(RunActionParams::new("lint", json!({})))
            .expect("ready");
        p.server_receives().pop()
    }) else {
        panic!()
    };
    assert_eq!(p.server.progress(&id, &json!(1)), Ok(false));
    assert!(p.server.poll_transmit().is_none());
}

#[test]
fn cancel_completes_locally_tells_the_runner_and_drops_the_late_answer() {
    let mut p = Pair::ready(CallForm::Direct);
    let id = p
        .client
        .run_action(RunActionParams::new("slow", json!({})))
        .expect("ready");
    let Some(ServerEvent::Call { .. }) = p.server_receives().pop() else {
        panic!()
    };
    assert!(p.client.cancel(&id));
    assert!(!p.client.cancel(&id));
    match &std::iter::from_fn(|| p.client.poll_event()).collect::<Vec<_>>()[..] {
        [
            ClientEvent::Reply {
                id: got,
                result: Err(FineCodeError::Rpc(e)),
                ..
            },
        ] => {
            assert_eq!((got, &e.code), (&id, &ErrorCode::Int(REQUEST_CANCELLED)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.server_receives(),
        vec![ServerEvent::Cancel { id: id.clone() }]
    );
    assert!(p.server.is_cancelled(&id));
    p.server.respond_cancelled(id.clone()).expect("in flight");
    assert!(!p.server.is_cancelled(&id));
    assert_eq!(p.client_receives(), vec![]);
    // A cancel for a call already answered is ignored.
    p.server
        .handle_frame(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}"#)
        .expect("ignored");
    assert_eq!(p.server.poll_event(), None);
}

#[test]
fn runner_requests_reach_the_manager_and_back() {
    let mut p = Pair::ready(CallForm::Direct);
    let requests = [
        RunnerRequest::GetRawConfig(GetRawConfigParams {
            project_def_path: "/p/finecode.toml".into(),
        }),
        RunnerRequest::ApplyEdit(json!({"edit": {"changes": {}}})),
        RunnerRequest::RunActionInProject(RunActionInProjectParams {
            action_source: "ext.actions.Lint".into(),
            payload: json!({}),
            meta: RunMeta {
                orchestration_depth: Some(1),
                ..RunMeta::default()
            },
        }),
        RunnerRequest::RunActionInWorkspace(RunActionInWorkspaceParams {
            action_source: "ext.actions.Lint".into(),
            ..Default::default()
        }),
        RunnerRequest::Other {
            method: "window/workDoneProgress/create".into(),
            params: Some(json!({"token": 1})),
        },
    ];
    for request in requests {
        let id = p.server.request(&request).expect("running");
        let evs = p.client_receives();
        assert_eq!(
            evs,
            vec![ClientEvent::Request {
                id: id.clone(),
                request: request.clone()
            }]
        );
        p.client
            .respond(id.clone(), Ok(json!({"config": "{}"})))
            .expect("awaiting");
        match &p.server_receives()[..] {
            [
                ServerEvent::Response {
                    id: got,
                    method,
                    result: Ok(v),
                },
            ] => {
                assert_eq!(
                    (got, method.as_str(), v),
                    (&id, request.method(), &json!({"config": "{}"}))
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // Undecodable params are refused for the manager.
    p.client
        .handle_frame(br#"{"jsonrpc":"2.0","id":9,"method":"projects/getRawConfig","params":{}}"#)
        .expect("answered");
    assert_eq!(p.client.poll_event(), None);
    let answer = p.client.poll_transmit().expect("refusal");
    assert!(String::from_utf8_lossy(&answer).contains(r#""code":-32602"#));
    // An abandoned request completes locally and its late answer is dropped.
    let id = p
        .server
        .request(&RunnerRequest::ApplyEdit(json!({})))
        .expect("running");
    assert!(p.server.abandon(&id));
    assert!(matches!(
        p.server.poll_event(),
        Some(ServerEvent::Response { result: Err(ref e), .. }) if e.code == ErrorCode::Int(REQUEST_CANCELLED)
    ));
    let _ = p.client_receives();
    p.client
        .respond(id, Ok(json!({"applied": true})))
        .expect("awaiting");
    assert_eq!(p.server_receives(), vec![]);
}

#[test]
fn client_calls_in_the_wrong_state_are_unexpected() {
    type Step = fn(&mut Client) -> Result<(), ProtocolError>;
    let cases: &[(&str, Step, ClientState)] = &[
        (
            "call before initialize",
            |c| c.resolve_action_meta().map(drop),
            ClientState::Start,
        ),
        (
            "initialized before initialize",
            |c| c.initialized(),
            ClientState::Start,
        ),
        (
            "shutdown before initialize",
            |c| c.shutdown().map(drop),
            ClientState::Start,
        ),
        ("exit before shutdown", |c| c.exit(), ClientState::Start),
        (
            "notify before initialize",
            |c| c.notify("textDocument/didOpen", json!({})),
            ClientState::Start,
        ),
    ];
    for (name, step, state) in cases {
        let mut c = Client::new();
        assert!(
            matches!(step(&mut c), Err(ProtocolError::Unexpected { .. })),
            "{name}"
        );
        assert_eq!(c.state(), *state, "{name}");
    }
    let mut c = Client::new();
    c.initialize(&InitializeParams::default()).expect("start");
    for step in [
        (|c: &mut Client| c.initialize(&InitializeParams::default()).map(drop)) as Step,
        |c| c.get_payload_schemas().map(drop),
        |c| c.initialized(),
    ] {
        assert!(matches!(
            step(&mut c),
            Err(ProtocolError::Unexpected {
                state: "waiting for the initialize result",
                ..
            })
        ));
    }
    let mut p = Pair::ready(CallForm::Direct);
    p.client.shutdown().expect("ready");
    assert!(matches!(
        p.client.run_action(RunActionParams::new("a", json!({}))),
        Err(ProtocolError::Unexpected {
            state: "shutting down",
            ..
        })
    ));
    p.client.exit().expect("exit may follow shutdown at once");
    assert!(matches!(
        p.client.exit(),
        Err(ProtocolError::Unexpected {
            state: "closed",
            ..
        })
    ));
}

#[test]
fn failed_initialize_may_be_retried() {
    let mut p = pair(CallForm::Direct);
    p.client
        .initialize(&InitializeParams::default())
        .expect("start");
    p.client
        .handle_frame(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"no venv"}}"#)
        .expect("valid");
    assert!(matches!(
        p.client.poll_event(),
        Some(ClientEvent::Initialize { result: Err(_), .. })
    ));
    assert_eq!(p.client.state(), ClientState::Start);
    p.client
        .initialize(&InitializeParams::default())
        .expect("again");
}

#[test]
fn server_answers_what_it_cannot_accept() {
    let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"processId":1}}"#;
    let cases: &[(&str, &[&[u8]], &str, bool)] = &[
        (
            "call before initialize",
            &[br#"{"jsonrpc":"2.0","id":1,"method":"actions/run","params":{"actionName":"a"}}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"server not initialized"}}"#,
            true,
        ),
        (
            "unknown method",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"actions/frobnicate"}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"unknown method: actions/frobnicate"}}"#,
            false,
        ),
        (
            "unknown command",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"workspace/executeCommand","params":{"command":"x/y","arguments":[]}}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"unknown command: x/y"}}"#,
            false,
        ),
        (
            "bad direct params",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"actions/run","params":{"params":{}}}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: missing field `actionName`"}}"#,
            false,
        ),
        (
            "bad positional arguments",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"workspace/executeCommand","params":{"command":"actions/run","arguments":[1]}}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: argument 0 (actionName) is not a string: 1"}}"#,
            false,
        ),
        (
            "arguments not an array",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"workspace/executeCommand","params":{"command":"actions/run","arguments":{}}}"#],
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: arguments is not an array"}}"#,
            false,
        ),
        (
            "call after shutdown",
            &[init, br#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#, br#"{"jsonrpc":"2.0","id":2,"method":"actions/getPayloadSchemas"}"#],
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"server is shutting down"}}"#,
            true,
        ),
        (
            "unreadable body",
            &[b"{nope"],
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"invalid message"}}"#,
            true,
        ),
    ];
    for (name, frames, want, last_is_error) in cases {
        let mut er = Server::new();
        let mut last = Ok(());
        for f in *frames {
            last = er.handle_frame(f);
            while let Some(ServerEvent::Initialize { id, .. } | ServerEvent::Shutdown { id }) =
                er.poll_event()
            {
                if er.state() == ServerState::Initializing {
                    er.respond_initialize(id, &InitializeResult::default())
                        .expect("init");
                    er.poll_transmit();
                }
            }
        }
        assert_eq!(last.is_err(), *last_is_error, "{name}: {last:?}");
        let got = std::iter::from_fn(|| er.poll_transmit())
            .last()
            .expect("an answer");
        assert_eq!(String::from_utf8_lossy(&got), *want, "{name}");
    }
}

#[test]
fn server_checks_its_answers() {
    let mut p = Pair::ready(CallForm::Direct);
    p.client.get_payload_schemas().expect("ready");
    let Some(ServerEvent::Call { id, .. }) = p.server_receives().pop() else {
        panic!()
    };
    assert!(matches!(
        p.server.respond(id.clone(), Ok(Reply::UpdateConfig)),
        Err(ProtocolError::BadPayload { what: "reply", .. })
    ));
    p.server
        .respond(
            id.clone(),
            Ok(Reply::GetPayloadSchemas(PayloadSchemas::new())),
        )
        .expect("in flight");
    assert_eq!(
        p.server.respond(id.clone(), Ok(Reply::UpdateConfig)),
        Err(ProtocolError::NotAwaitingResponse { id: id.to_string() })
    );
    assert!(matches!(
        p.server.respond_shutdown(id),
        Err(ProtocolError::NotAwaitingResponse { .. })
    ));
}

#[test]
fn fail_pending_answers_every_call_with_reason_and_stderr() {
    let mut p = Pair::ready(CallForm::ExecuteCommand);
    let a = p
        .client
        .run_action(RunActionParams::new("a", json!({})))
        .expect("ready");
    let b = p.client.resolve_action_meta().expect("ready");
    let stderr = vec!["Traceback".to_owned(), "ImportError: x".to_owned()];
    p.client
        .fail_pending(&Stopped::by_host("runner exited with code 1", stderr));
    let evs: Vec<ClientEvent> = std::iter::from_fn(|| p.client.poll_event()).collect();
    let mut ids = Vec::new();
    for ev in evs {
        let ClientEvent::Reply {
            id,
            result: Err(FineCodeError::Rpc(e)),
            ..
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert_eq!(e.code, ErrorCode::Int(INTERNAL_ERROR));
        assert_eq!(e.message, "runner exited with code 1");
        assert_eq!(
            e.data,
            Some(
                json!({"reason": "runner exited with code 1", "exit": null, "stderr": ["Traceback", "ImportError: x"]})
            )
        );
        ids.push(id);
    }
    assert_eq!(ids, vec![a, b]);
    assert_eq!(p.client.state(), ClientState::Closed);
}

#[test]
fn method_names_round_trip() {
    for m in Method::ALL {
        assert_eq!(Method::from_name(m.as_str()), Some(m));
    }
    assert_eq!(Method::from_name("initialize"), None);
    let caps = InitializeResult::new("er", "1").capabilities;
    assert_eq!(
        caps["executeCommandProvider"]["commands"]
            .as_array()
            .map(Vec::len),
        Some(10)
    );
}

/// The golden transcripts' bodies, both directions: a seed corpus for [`fuzz`].
const CORPUS: &[&str] = &[
    include_str!("../../../tests/transcripts/finecode/lifecycle.transcript"),
    include_str!("../../../tests/transcripts/finecode/streamed.transcript"),
    include_str!("../../../tests/transcripts/finecode/runner-request.transcript"),
    include_str!("../../../tests/transcripts/finecode/cancel.transcript"),
    include_str!("../../../tests/transcripts/finecode/command-error.transcript"),
    include_str!("../../../tests/transcripts/finecode/execute-command.transcript"),
    include_str!("../../../tests/transcripts/finecode/multi-env.transcript"),
];

#[test]
fn fuzz_body_survives_the_corpus_and_its_truncations() {
    for text in CORPUS {
        let bodies: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("> ").or_else(|| l.strip_prefix("< ")))
            .collect();
        assert!(!bodies.is_empty());
        fuzz(bodies.join("\n").as_bytes());
        for body in bodies {
            for cut in (0..body.len()).step_by(11) {
                fuzz(&body.as_bytes()[..cut]);
            }
        }
    }
    fuzz(b"");
    fuzz(b"\xff\n[]\nnull\n{\"id\":{}}");
}
