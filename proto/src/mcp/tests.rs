//! Both MCP machines in memory, and MCP's supervision rules on the supervisor's machine with a
//! virtual clock.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::jsonrpc::INVALID_PARAMS;
use crate::stopped::Exit;
use crate::supervise::{Action, Budgets, Ended, InstanceId, Supervisor};

fn pump_to_server(from: &mut Client, to: &mut Server) {
    while let Some(f) = from.poll_transmit() {
        let _ = to.handle_frame(&f);
    }
}

fn pump_to_client(from: &mut Server, to: &mut Client) {
    while let Some(f) = from.poll_transmit() {
        to.handle_frame(&f).expect("valid frame");
    }
}

fn server_events(s: &mut Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn client_events(c: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// A client and a server past the handshake.
fn ready() -> (Client, Server) {
    let mut client = Client::new();
    let mut server = Server::new();
    client
        .initialize(json!({"name": "c", "version": "1"}), json!({}))
        .expect("fresh");
    pump_to_server(&mut client, &mut server);
    let Some(ServerEvent::Initialize { id, .. }) = server.poll_event() else {
        panic!("no initialize")
    };
    server
        .respond_initialize(
            id,
            json!({"tools": {}}),
            json!({"name": "s", "version": "1"}),
        )
        .expect("pending");
    pump_to_client(&mut server, &mut client);
    assert!(matches!(
        client.poll_event(),
        Some(ClientEvent::Initialized { result: Ok(_), .. })
    ));
    client.initialized().expect("initialized");
    pump_to_server(&mut client, &mut server);
    assert_eq!(server.poll_event(), Some(ServerEvent::Initialized));
    (client, server)
}

#[test]
fn the_server_answers_the_revision_asked_for_when_it_speaks_it_else_its_latest() {
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2024-11-05", LATEST_VERSION),
    ] {
        let mut server = Server::new();
        let frame = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":asked,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}});
        server
            .handle_frame(frame.to_string().as_bytes())
            .expect("initialize");
        let Some(ServerEvent::Initialize { id, .. }) = server.poll_event() else {
            panic!()
        };
        server
            .respond_initialize(id, json!({}), json!({"name": "s"}))
            .expect("pending");
        let answer: Value =
            serde_json::from_slice(&server.poll_transmit().expect("answer")).expect("JSON");
        assert_eq!(
            answer["result"]["protocolVersion"], answered,
            "asked {asked}"
        );
    }
}

#[test]
fn a_client_refuses_a_revision_it_does_not_speak_and_calls_nothing_before_the_handshake() {
    let mut client = Client::new();
    assert!(matches!(
        client.list_tools(None),
        Err(ProtocolError::Unexpected { .. })
    ));
    client
        .initialize(json!({"name": "c"}), json!({}))
        .expect("fresh");
    client
        .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2024-11-05","capabilities":{}}}"#)
        .expect("an answer");
    match client.poll_event() {
        Some(ClientEvent::Initialized { result: Err(e), .. }) => {
            assert!(e.message.contains("2024-11-05"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.state(), ClientState::Start);
}

#[test]
fn progress_reaches_the_call_that_asked_for_it_and_ping_is_answered_by_either_side() {
    let (mut client, mut server) = ready();
    let call = client
        .call_tool("slow", json!({}), Some(json!("tok")))
        .expect("ready");
    let ping = client.request(PING, None).expect("ping");
    pump_to_server(&mut client, &mut server);
    let Some(ServerEvent::Request { id, .. }) = server.poll_event() else {
        panic!()
    };
    assert!(
        server_events(&mut server).is_empty(),
        "ping is not an event"
    );
    assert!(
        server
            .progress(&id, 1.0, Some(2.0), Some("half"))
            .expect("open")
    );
    server.request(PING, None).expect("running");
    server
        .respond(id, Ok(json!({"content": []})))
        .expect("open");
    pump_to_client(&mut server, &mut client);
    let evs = client_events(&mut client);
    assert_eq!(
        evs[0],
        ClientEvent::Response {
            id: ping,
            method: PING.into(),
            result: Ok(json!({}))
        }
    );
    assert_eq!(
        evs[1],
        ClientEvent::Progress {
            id: Some(call.clone()),
            progress: Progress {
                token: json!("tok"),
                progress: 1.0,
                total: Some(2.0),
                message: Some("half".into())
            }
        }
    );
    assert!(matches!(&evs[2], ClientEvent::Response { id, result: Ok(_), .. } if *id == call));
    assert_eq!(evs.len(), 3);
    // The client answered the server's ping by itself.
    pump_to_server(&mut client, &mut server);
    assert!(matches!(
        &server_events(&mut server)[..],
        [ServerEvent::Response { result: Ok(_), .. }]
    ));
}

#[test]
fn the_servers_requests_reach_the_client_untouched_and_go_back_answered() {
    let (mut client, mut server) = ready();
    let params = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5});
    for method in ["sampling/createMessage", "elicitation/create", "roots/list"] {
        let asked = server
            .request(method, Some(params.clone()))
            .expect("running");
        pump_to_client(&mut server, &mut client);
        let Some(ClientEvent::Request {
            id,
            method: got,
            params: p,
        }) = client.poll_event()
        else {
            panic!()
        };
        assert_eq!((got.as_str(), p), (method, Some(params.clone())));
        client.respond(id, Ok(json!({"ok": method}))).expect("open");
        pump_to_server(&mut client, &mut server);
        assert_eq!(
            server.poll_event(),
            Some(ServerEvent::Response {
                id: asked,
                method: method.into(),
                result: Ok(json!({"ok": method}))
            })
        );
    }
}

#[test]
fn a_cancelled_request_completes_locally_and_the_server_does_not_answer_it() {
    let (mut client, mut server) = ready();
    let call = client.call_tool("slow", json!({}), None).expect("ready");
    pump_to_server(&mut client, &mut server);
    let Some(ServerEvent::Request { id, .. }) = server.poll_event() else {
        panic!()
    };
    assert!(client.cancel(&call, Some("user")));
    match &client_events(&mut client)[..] {
        [ClientEvent::Response { result: Err(e), .. }] => {
            assert_eq!(e.code, crate::jsonrpc::ErrorCode::Int(-32800))
        }
        other => panic!("{other:?}"),
    }
    pump_to_server(&mut client, &mut server);
    assert_eq!(
        server.poll_event(),
        Some(ServerEvent::Cancelled { id: id.clone() })
    );
    assert!(matches!(
        server.respond(id, Ok(json!({}))),
        Err(ProtocolError::NotAwaitingResponse { .. })
    ));
}

#[test]
fn a_stop_fails_every_request_with_the_json_rpc_internal_error() {
    let (mut client, _server) = ready();
    client.list_tools(None).expect("ready");
    client.call_tool("t", json!({}), None).expect("ready");
    client.fail_pending(&Stopped::ended(
        Exit::OutOfFuel { limit: 9 },
        vec!["x".into()],
    ));
    let evs = client_events(&mut client);
    assert_eq!(evs.len(), 2);
    for e in evs {
        let ClientEvent::Response { result: Err(e), .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(e.code, crate::jsonrpc::ErrorCode::Int(INTERNAL_ERROR));
        assert_eq!(e.data.expect("data")["stderr"], json!(["x"]));
    }
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_to_null() {
    let mut server = Server::new();
    assert!(server.handle_frame(b"this is not json").is_err());
    let answer: Value =
        serde_json::from_slice(&server.poll_transmit().expect("answer")).expect("JSON");
    assert_eq!(answer["id"], Value::Null);
    assert_eq!(answer["error"]["code"], -32700);
}

// --- under the supervisor -----------------------------------------------------------------

fn filtered(allow: &[&str], deny: &[&str]) -> Supervised {
    Supervised::new(ToolFilter {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
    })
}

fn drain(sup: &mut Supervisor) -> Vec<Action> {
    std::iter::from_fn(|| sup.poll_action()).collect()
}

fn to_engine(actions: &[Action]) -> Vec<Value> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToEngine(f) => Some(serde_json::from_slice(f).expect("JSON")),
            _ => None,
        })
        .collect()
}

fn to_plugin(actions: &[Action]) -> Vec<Value> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToPlugin { frame, .. } => Some(serde_json::from_slice(frame).expect("JSON")),
            _ => None,
        })
        .collect()
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e","version":"1"}}}"#;
const INIT_ANSWER: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#;
const INITIALIZED_NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A supervisor past the handshake with instance 0.
fn supervised(rules: Supervised, budgets: Budgets, t0: Instant) -> Supervisor {
    let mut sup = Supervisor::new(Box::new(rules), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(INIT.into(), t0);
    sup.handle_plugin_frame(i0, INIT_ANSWER.as_bytes(), t0);
    sup.handle_engine_frame(INITIALIZED_NOTE.into(), t0);
    drain(&mut sup);
    sup
}

#[test]
fn the_filter_hides_tools_from_the_list_and_answers_their_calls_itself() {
    let t0 = Instant::now();
    let mut sup = supervised(filtered(&[], &["rm"]), Budgets::default(), t0);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec(),
        t0,
    );
    drain(&mut sup);
    let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"ls","inputSchema":{"type":"object"}},{"name":"rm","inputSchema":{"type":"object"}}]}}"#;
    sup.handle_plugin_frame(i0, list.as_bytes(), t0);
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0]["result"]["tools"],
        json!([{"name":"ls","inputSchema":{"type":"object"}}])
    );
    // A call of the hidden tool never reaches the plugin.
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm","arguments":{}}}"#
            .to_vec(),
        t0,
    );
    let actions = drain(&mut sup);
    assert!(to_plugin(&actions).is_empty());
    let seen = to_engine(&actions);
    assert_eq!(seen[0]["id"], 2);
    assert_eq!(seen[0]["error"]["code"], INVALID_PARAMS);
    assert_eq!(seen[0]["error"]["message"], "unknown tool: rm");
    // An allowed one does.
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ls","arguments":{}}}"#
            .to_vec(),
        t0,
    );
    assert_eq!(to_plugin(&drain(&mut sup)).len(), 1);
    // An allow list hides everything else.
    let allow = filtered(&["ls"], &[]);
    assert!(
        allow
            .answer_engine(
                br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"cat"}}"#
            )
            .is_some()
    );
    assert!(
        allow
            .answer_engine(
                br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ls"}}"#
            )
            .is_none()
    );
    // No filter: the server's bytes pass unchanged.
    assert_eq!(
        Supervised::default().rewrite_answer(Some(TOOLS_LIST), list.as_bytes()),
        None
    );
}

#[test]
fn a_tools_call_over_its_timeout_is_cancelled_and_answered_at_once_and_a_deaf_server_replaced() {
    let t0 = Instant::now();
    // No `restart`: the replacement is the timeout's, so the session goes on all the same.
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        ..Budgets::default()
    };
    let mut sup = supervised(Supervised::default(), budgets, t0);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sleep","arguments":{}}}"#.to_vec(),
        t0,
    );
    let t_list = t0 + Duration::from_millis(1);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#.to_vec(),
        t_list,
    );
    drain(&mut sup);
    let t1 = t0 + Duration::from_secs(1);
    sup.handle_timeout(t1);
    let actions = drain(&mut sup);
    // The server is told, the engine answered at once, and the server probed.
    let sent = to_plugin(&actions);
    assert_eq!(sent[0]["method"], CANCELLED);
    assert_eq!(sent[0]["params"]["requestId"], 5);
    assert_eq!(sent[1]["method"], PING);
    let seen = to_engine(&actions);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["id"], 5);
    assert_eq!(seen[0]["result"]["isError"], true);
    assert!(
        seen[0]["result"].get("resultType").is_none(),
        "2025 has none"
    );
    let text = seen[0]["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("request 5 timed out after 1s"), "{text}");
    // Engine frames wait while the probe is out.
    assert!(!sup.accepts_engine_frames());
    // Deaf for the whole grace: stopped.
    let t2 = t1 + Duration::from_secs(2);
    assert_eq!(sup.poll_timeout(), Some(t2));
    sup.handle_timeout(t2);
    assert_eq!(drain(&mut sup), vec![Action::Kill { instance: i0 }]);
    let ended = Ended {
        exit: Exit::Killed { signal: Some(9) },
        stderr_tail: vec!["sleeping".into()],
        framing_error: None,
    };
    sup.handle_plugin_stopped(i0, ended, t2);
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["id"], 6);
    assert_eq!(seen[0]["error"]["code"], INTERNAL_ERROR);
    let message = seen[0]["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("after request 5 was cancelled"),
        "{message}"
    );
    assert!(!sup.is_done());
    // The next call starts a fresh instance: initialize, its answer swallowed, initialized,
    // then the call.
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#.to_vec(),
        t2,
    );
    let actions = drain(&mut sup);
    let i1 = InstanceId(1);
    assert!(actions.contains(&Action::Start {
        instance: i1,
        cause: crate::supervise::Cause::Restart
    }));
    assert_eq!(to_plugin(&actions)[0]["method"], "initialize");
    sup.handle_plugin_frame(i1, INIT_ANSWER.as_bytes(), t2);
    let actions = drain(&mut sup);
    assert!(
        to_engine(&actions).is_empty(),
        "the fresh initialize answer is swallowed"
    );
    let sent = to_plugin(&actions);
    assert_eq!(sent[0]["method"], INITIALIZED);
    assert_eq!(sent[1]["id"], 7);
}

#[test]
fn a_server_that_heeds_the_cancellation_keeps_serving_and_its_late_answer_is_dropped() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        ..Budgets::default()
    };
    let mut sup = supervised(Supervised::default(), budgets, t0);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sleep","arguments":{}}}"#.to_vec(),
        t0,
    );
    drain(&mut sup);
    let t1 = t0 + Duration::from_secs(1);
    sup.handle_timeout(t1);
    let sent = to_plugin(&drain(&mut sup));
    let probe = sent[1]["id"].clone();
    // It answers the call late, then the probe.
    sup.handle_plugin_frame(
        i0,
        br#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#,
        t1,
    );
    let pong = json!({"jsonrpc": "2.0", "id": probe, "result": {}}).to_string();
    sup.handle_plugin_frame(i0, pong.as_bytes(), t1);
    assert!(
        to_engine(&drain(&mut sup)).is_empty(),
        "neither reaches the engine"
    );
    assert!(sup.accepts_engine_frames());
    assert_eq!(sup.poll_timeout(), None);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#.to_vec(),
        t1,
    );
    let actions = drain(&mut sup);
    assert_eq!(to_plugin(&actions)[0]["id"], 8);
    assert!(!actions.iter().any(|a| matches!(a, Action::Start { .. })));
    assert_eq!(sup.report().restarts, 0);
}

/// The 2026-07-28 envelope of a request from the Python SDK.
const ENVELOPE: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp","version":"0.1.0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

fn modern(id: u64, method: &str, params: &str) -> Vec<u8> {
    let sep = if params.is_empty() { "" } else { "," };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}{sep}{ENVELOPE}}}}}"#
    )
    .into_bytes()
}

#[test]
fn a_pinned_2026_client_s_first_request_waits_for_a_discover_probe_and_start_up_is_not_billed() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        start_timeout: Some(Duration::from_secs(60)),
        ..Budgets::default()
    };
    let mut sup = Supervisor::new(Box::new(Supervised::default()), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(modern(1, TOOLS_LIST, ""), t0);
    let sent = to_plugin(&drain(&mut sup));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], DISCOVER);
    assert_eq!(
        sent[0]["params"]["_meta"][META_PROTOCOL_VERSION],
        MODERN_VERSION
    );
    // Only the start timeout runs while the server starts.
    assert_eq!(sup.poll_timeout(), Some(t0 + Duration::from_secs(60)));
    // It takes five seconds to start, far over the request timeout.
    let up = t0 + Duration::from_secs(5);
    let discovered = json!({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {
        "capabilities": {}, "supportedVersions": [MODERN_VERSION], "resultType": "complete"}});
    sup.handle_plugin_frame(i0, discovered.to_string().as_bytes(), up);
    let actions = drain(&mut sup);
    assert!(
        to_engine(&actions).is_empty(),
        "the probe's answer is swallowed"
    );
    assert_eq!(to_plugin(&actions)[0]["id"], 1);
    // The request's clock starts now.
    assert_eq!(sup.poll_timeout(), Some(up + Duration::from_secs(1)));
}

#[test]
fn a_server_that_never_answers_its_handshake_is_stopped_by_the_start_timeout() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        start_timeout: Some(Duration::from_secs(30)),
        ..Budgets::default()
    };
    let mut sup = Supervisor::new(Box::new(Supervised::default()), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(modern(1, DISCOVER, ""), t0);
    assert_eq!(to_plugin(&drain(&mut sup))[0]["method"], DISCOVER);
    let due = t0 + Duration::from_secs(30);
    assert_eq!(sup.poll_timeout(), Some(due));
    sup.handle_timeout(due);
    assert_eq!(drain(&mut sup), vec![Action::Kill { instance: i0 }]);
    let ended = Ended {
        exit: Exit::Killed { signal: Some(9) },
        stderr_tail: vec![],
        framing_error: None,
    };
    sup.handle_plugin_stopped(i0, ended, due);
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(seen[0]["id"], 1);
    assert_eq!(
        seen[0]["error"]["message"],
        "the plugin did not answer its handshake within 30s (start timeout)"
    );
}

#[test]
fn answers_of_its_own_in_a_2026_session_carry_result_type_and_a_hidden_tool_looks_unknown() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        ..Budgets::default()
    };
    let mut sup = Supervisor::new(Box::new(filtered(&[], &["rm"])), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(modern(1, DISCOVER, ""), t0);
    drain(&mut sup);
    let discovered = br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{},"supportedVersions":["2026-07-28"],"resultType":"complete"}}"#;
    sup.handle_plugin_frame(i0, discovered, t0);
    drain(&mut sup);
    // The first round of a call, and a retry round carrying input responses, alike.
    for params in [
        r#""name":"rm","arguments":{}"#,
        r#""name":"rm","arguments":{},"inputResponses":{"k":{"action":"accept"}},"requestState":"s""#,
    ] {
        sup.handle_engine_frame(modern(2, TOOLS_CALL, params), t0);
        let actions = drain(&mut sup);
        assert!(to_plugin(&actions).is_empty());
        let seen = to_engine(&actions);
        assert_eq!(
            seen[0]["result"],
            json!({"content": [{"type": "text", "text": "Unknown tool: rm"}], "isError": true,
                "resultType": "complete"})
        );
    }
    // The list keeps the revision's members.
    sup.handle_engine_frame(modern(3, TOOLS_LIST, ""), t0);
    drain(&mut sup);
    let list = r#"{"jsonrpc":"2.0","id":3,"result":{"cacheScope":"private","resultType":"complete","tools":[{"name":"ls","inputSchema":{}},{"name":"rm","inputSchema":{}}],"ttlMs":0}}"#;
    sup.handle_plugin_frame(i0, list.as_bytes(), t0);
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(
        seen[0]["result"],
        json!({"cacheScope": "private", "resultType": "complete",
            "tools": [{"name": "ls", "inputSchema": {}}], "ttlMs": 0})
    );
    // A call over its timeout: the answer is a complete result.
    sup.handle_engine_frame(modern(4, TOOLS_CALL, r#""name":"ls","arguments":{}"#), t0);
    drain(&mut sup);
    let t1 = t0 + Duration::from_secs(1);
    sup.handle_timeout(t1);
    let actions = drain(&mut sup);
    let seen = to_engine(&actions);
    assert_eq!(seen[0]["id"], 4);
    assert_eq!(seen[0]["result"]["resultType"], "complete");
    assert_eq!(seen[0]["result"]["isError"], true);
    // The probe is a discover with the session's envelope.
    let sent = to_plugin(&actions);
    assert_eq!(sent[1]["method"], DISCOVER);
    assert_eq!(sent[1]["params"]["_meta"][META_CLIENT_INFO]["name"], "mcp");
}

#[test]
fn a_subscription_is_not_timed_and_a_restart_ends_it_with_an_error() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        restart: true,
        ..Budgets::default()
    };
    let mut sup = Supervisor::new(Box::new(Supervised::default()), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(modern(1, DISCOVER, ""), t0);
    drain(&mut sup);
    sup.handle_plugin_frame(i0, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, t0);
    drain(&mut sup);
    let listen = r#"{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}"#;
    sup.handle_engine_frame(listen.into(), t0);
    assert_eq!(to_plugin(&drain(&mut sup))[0]["id"], "listen-1");
    assert_eq!(sup.poll_timeout(), None, "nothing timed");
    // Its events pass through.
    let event = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}"#;
    sup.handle_plugin_frame(i0, event.as_bytes(), t0 + Duration::from_secs(100));
    assert_eq!(
        to_engine(&drain(&mut sup))[0]["method"],
        "notifications/tools/list_changed"
    );
    // The server dies: the subscription ends with the error, and the next listen gets a
    // fresh instance.
    let ended = Ended {
        exit: Exit::Exited(1),
        stderr_tail: vec![],
        framing_error: None,
    };
    sup.handle_plugin_stopped(i0, ended, t0 + Duration::from_secs(100));
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(seen[0]["id"], "listen-1");
    assert_eq!(seen[0]["error"]["code"], INTERNAL_ERROR);
    assert!(!sup.is_done());
}

#[test]
fn a_retry_whose_request_state_was_sealed_by_a_stopped_instance_is_answered_not_forwarded() {
    let t0 = Instant::now();
    let budgets = Budgets {
        restart: true,
        ..Budgets::default()
    };
    let mut sup = Supervisor::new(Box::new(Supervised::default()), budgets);
    drain(&mut sup);
    let i0 = InstanceId(0);
    sup.handle_engine_frame(modern(1, DISCOVER, ""), t0);
    drain(&mut sup);
    sup.handle_plugin_frame(i0, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, t0);
    drain(&mut sup);
    sup.handle_engine_frame(
        modern(2, TOOLS_CALL, r#""name":"greet","arguments":{}"#),
        t0,
    );
    drain(&mut sup);
    let asks = r#"{"jsonrpc":"2.0","id":2,"result":{"inputRequests":{"k":{"method":"elicitation/create","params":{}}},"requestState":"sealed-by-0","resultType":"input_required"}}"#;
    sup.handle_plugin_frame(i0, asks.as_bytes(), t0);
    assert_eq!(
        to_engine(&drain(&mut sup))[0]["result"]["resultType"],
        "input_required"
    );
    // The retry reaches the same instance while it lives.
    let retry = |id| {
        modern(
            id,
            TOOLS_CALL,
            r#""name":"greet","arguments":{},"inputResponses":{"k":{"action":"accept"}},"requestState":"sealed-by-0""#,
        )
    };
    sup.handle_engine_frame(retry(3), t0);
    assert_eq!(to_plugin(&drain(&mut sup))[0]["id"], 3);
    sup.handle_plugin_frame(
        i0,
        br#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"resultType":"complete"}}"#,
        t0,
    );
    drain(&mut sup);
    // It dies; a retry with its state is answered by the supervisor.
    let ended = Ended {
        exit: Exit::Exited(1),
        stderr_tail: vec![],
        framing_error: None,
    };
    sup.handle_plugin_stopped(i0, ended, t0);
    drain(&mut sup);
    sup.handle_engine_frame(retry(4), t0);
    let actions = drain(&mut sup);
    let i1 = InstanceId(1);
    // The fresh instance is restored (discover replayed) before the retry is looked at.
    assert_eq!(to_plugin(&actions)[0]["method"], DISCOVER);
    sup.handle_plugin_frame(i1, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, t0);
    let actions = drain(&mut sup);
    assert!(to_plugin(&actions).is_empty(), "{actions:?}");
    let seen = to_engine(&actions);
    assert_eq!(seen[0]["id"], 4);
    assert_eq!(seen[0]["result"]["isError"], true);
    assert_eq!(seen[0]["result"]["resultType"], "complete");
    let text = seen[0]["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.contains("requestState"), "{text}");
}

#[test]
fn a_server_that_dies_before_answering_initialize_gets_it_the_stopped_answer() {
    let t0 = Instant::now();
    let i0 = InstanceId(0);
    let ended = || Ended {
        exit: Exit::Exited(3),
        stderr_tail: vec!["cannot start: missing config".into()],
        framing_error: None,
    };
    // Died with initialize forwarded to it, --restart or not: the stopped answer, and the
    // session ends (the engine's handshake failed; there is nothing to restore).
    for restart in [false, true] {
        let budgets = Budgets {
            restart,
            ..Budgets::default()
        };
        let mut sup = Supervisor::new(Box::new(Supervised::default()), budgets);
        drain(&mut sup);
        sup.handle_engine_frame(INIT.into(), t0);
        drain(&mut sup);
        sup.handle_plugin_stopped(i0, ended(), t0);
        let seen = to_engine(&drain(&mut sup));
        assert_eq!(seen.len(), 1, "restart {restart}");
        assert_eq!(seen[0]["id"], 0);
        assert_eq!(seen[0]["error"]["code"], INTERNAL_ERROR);
        assert_eq!(
            seen[0]["error"]["data"]["stderr"],
            json!(["cannot start: missing config"])
        );
        assert!(sup.is_done());
        assert_eq!(sup.report().exit, Exit::Exited(3));
    }
    // Died before the engine's initialize reached it: the session waits for it (the engine
    // speaks first in MCP), answers it, and ends.
    let mut sup = Supervisor::new(Box::new(Supervised::default()), Budgets::default());
    drain(&mut sup);
    sup.handle_plugin_stopped(i0, ended(), t0);
    drain(&mut sup);
    assert!(!sup.is_done());
    assert!(sup.accepts_engine_frames());
    sup.handle_engine_frame(INIT.into(), t0);
    let actions = drain(&mut sup);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Start { .. })),
        "no restart: {actions:?}"
    );
    let seen = to_engine(&actions);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["id"], 0);
    assert_eq!(
        seen[0]["error"]["message"],
        "plugin exited with status 3 before answering"
    );
    assert_eq!(
        seen[0]["error"]["data"]["stderr"],
        json!(["cannot start: missing config"])
    );
    assert!(sup.is_done());
    // An engine that closes instead ends the session too.
    let mut sup = Supervisor::new(Box::new(Supervised::default()), Budgets::default());
    drain(&mut sup);
    sup.handle_plugin_stopped(i0, ended(), t0);
    sup.handle_engine_closed(t0);
    drain(&mut sup);
    assert!(sup.is_done());
}

#[test]
fn a_server_that_dies_mid_call_without_restart_ends_the_session_once_the_call_is_answered() {
    let t0 = Instant::now();
    let i0 = InstanceId(0);
    // A client pinned to 2026-07-28: no handshake of its own, so nothing to replay. The call
    // the crash cut off is answered, and the session ends then: the engine has had an answer
    // to everything it sent, so nothing is left to wait for (a client of `serve` starts a
    // fresh instance with its next request).
    let mut sup = Supervisor::new(Box::new(Supervised::default()), Budgets::default());
    drain(&mut sup);
    sup.handle_engine_frame(
        modern(1, TOOLS_CALL, r#""name":"crash","arguments":{}"#),
        t0,
    );
    let discover = to_plugin(&drain(&mut sup));
    assert_eq!(discover[0]["method"], DISCOVER, "{discover:?}");
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        discover[0]["id"]
    );
    sup.handle_plugin_frame(i0, answer.as_bytes(), t0);
    let forwarded = to_plugin(&drain(&mut sup));
    assert_eq!(forwarded[0]["method"], TOOLS_CALL, "{forwarded:?}");
    let ended = Ended {
        exit: Exit::Killed { signal: Some(9) },
        stderr_tail: vec![],
        framing_error: None,
    };
    sup.handle_plugin_stopped(i0, ended, t0);
    let seen = to_engine(&drain(&mut sup));
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["id"], 1);
    assert_eq!(seen[0]["result"]["isError"], true, "{seen:?}");
    assert!(sup.is_done());
    assert!(sup.report().stopped);
}

#[test]
fn a_cancelled_request_is_no_longer_timed() {
    let t0 = Instant::now();
    let budgets = Budgets {
        request_timeout: Some(Duration::from_secs(1)),
        ..Budgets::default()
    };
    let mut sup = supervised(Supervised::default(), budgets, t0);
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"sleep"}}"#.to_vec(),
        t0,
    );
    assert!(sup.poll_timeout().is_some());
    sup.handle_engine_frame(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}"#
            .to_vec(),
        t0,
    );
    let actions = drain(&mut sup);
    assert_eq!(to_plugin(&actions).len(), 2, "the cancel is forwarded");
    assert_eq!(sup.poll_timeout(), None);
}

/// Frames of a session both ways: a seed corpus for [`fuzz`].
const CORPUS: &[&str] = &[
    INIT,
    INIT_ANSWER,
    INITIALIZED_NOTE,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"x"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"hidden","inputSchema":{}},{"name":"t","inputSchema":{}}],"nextCursor":"y"}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hidden","arguments":{},"_meta":{"progressToken":1}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5,"total":1,"message":"m"}}"#,
    r#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"messages":[]}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"r"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"unknown tool: x"}}"#,
    r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"t"}],"isError":true}}"#,
];

#[test]
fn fuzz_body_survives_the_corpus_and_its_truncations() {
    fuzz(CORPUS.join("\n").as_bytes());
    for frame in CORPUS {
        for cut in (0..frame.len()).step_by(7) {
            fuzz(&frame.as_bytes()[..cut]);
        }
    }
    fuzz(b"");
    fuzz(b"\xff\n[]\nnull\n{\"id\":{}}");
}

#[test]
fn a_narrowed_filter_hides_more_and_never_shows_more() {
    let f = |allow: &[&str], deny: &[&str]| ToolFilter {
        allow: allow.iter().map(|s| (*s).to_owned()).collect(),
        deny: deny.iter().map(|s| (*s).to_owned()).collect(),
    };
    let tools = ["add", "greet", "rm", "sleep"];
    let cases = [
        (f(&[], &[]), f(&[], &["rm"])),
        (f(&["add", "greet"], &[]), f(&["greet", "rm"], &[])),
        (f(&["add"], &[]), f(&["rm"], &[])),
        (f(&[], &["sleep"]), f(&["add", "sleep"], &["greet"])),
        (f(&["add", "rm"], &["rm"]), f(&[], &[])),
    ];
    for (endpoint, principal) in cases {
        let n = endpoint.narrowed(&principal);
        for t in tools {
            assert_eq!(
                n.permits(t),
                endpoint.permits(t) && principal.permits(t),
                "{t}: {endpoint:?} narrowed by {principal:?} is {n:?}"
            );
        }
    }
}
