//! The 2026-07-28 revision on both machines in memory: the client's probe and its fallback to
//! `initialize`, the server's envelope rules, and the members its results must carry.

use serde_json::json;

use super::*;

fn frames(from: &mut impl FnMut() -> Option<Vec<u8>>) -> Vec<Value> {
    std::iter::from_fn(from)
        .map(|f| serde_json::from_slice(&f).expect("json"))
        .collect()
}

fn pump(client: &mut Client, server: &mut Server) {
    while let Some(f) = client.poll_transmit() {
        let _ = server.handle_frame(&f);
    }
}

fn answer(server: &mut Server, client: &mut Client) {
    while let Some(f) = server.poll_transmit() {
        client.handle_frame(&f).expect("valid frame");
    }
}

fn info() -> Value {
    json!({"name": "c", "version": "1"})
}

/// A client whose probe a 2026-07-28 server answered.
fn modern() -> (Client, Server) {
    let mut client = Client::new();
    let mut server = Server::new();
    let probe = client.discover(info(), json!({}), None).expect("fresh");
    pump(&mut client, &mut server);
    let Some(ServerEvent::Discover { id, params }) = server.poll_event() else {
        panic!("no discover")
    };
    assert_eq!(params["_meta"][META_PROTOCOL_VERSION], MODERN_VERSION);
    assert_eq!(params["_meta"][META_CLIENT_INFO], info());
    server
        .respond_discover(
            id,
            json!({"tools": {}}),
            json!({"name": "s", "version": "1"}),
        )
        .expect("pending");
    let sent = frames(&mut || server.poll_transmit());
    let result = &sent[0]["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        (&result["ttlMs"], &result["cacheScope"]),
        (&json!(0), &json!("private"))
    );
    assert!(
        result["supportedVersions"]
            .as_array()
            .expect("versions")
            .contains(&json!(MODERN_VERSION))
    );
    assert_eq!(result["_meta"][META_SERVER_INFO]["name"], "s");
    client
        .handle_frame(&serde_json::to_vec(&sent[0]).expect("json"))
        .expect("valid");
    let Some(ClientEvent::Initialized { id, result: Ok(r) }) = client.poll_event() else {
        panic!("not connected")
    };
    assert_eq!((id, &r["capabilities"]), (probe, &json!({"tools": {}})));
    assert_eq!(client.revision(), Some(Revision::Modern));
    assert_eq!(server.revision(), Some(Revision::Modern));
    // No handshake to end: nothing is sent.
    client.initialized().expect("a no-op");
    assert!(client.poll_transmit().is_none());
    (client, server)
}

#[test]
fn a_probe_answered_by_a_2026_server_makes_a_session_whose_requests_carry_the_envelope() {
    let (mut client, mut server) = modern();
    let call = client
        .call_tool("add", json!({"a": 1}), Some(json!("t")))
        .expect("ready");
    let list = client.list_tools(None).expect("ready");
    pump(&mut client, &mut server);
    let events: Vec<ServerEvent> = std::iter::from_fn(|| server.poll_event()).collect();
    let [
        ServerEvent::Request {
            id: c,
            params: Some(cp),
            ..
        },
        ServerEvent::Request {
            id: l,
            params: Some(lp),
            ..
        },
    ] = &events[..]
    else {
        panic!("{events:?}")
    };
    // The envelope joins the progress token, which keeps working.
    assert_eq!(cp["_meta"]["progressToken"], "t");
    assert_eq!(cp["_meta"][META_PROTOCOL_VERSION], MODERN_VERSION);
    assert_eq!(lp["_meta"][META_CLIENT_CAPABILITIES], json!({}));
    assert!(server.progress(c, 1.0, None, None).expect("open"));
    server
        .respond(c.clone(), Ok(json!({"content": [], "isError": false})))
        .expect("open");
    // A member the caller set is kept.
    server
        .respond(l.clone(), Ok(json!({"tools": [], "ttlMs": 5})))
        .expect("open");
    answer(&mut server, &mut client);
    let events: Vec<ClientEvent> = std::iter::from_fn(|| client.poll_event()).collect();
    assert!(matches!(&events[0], ClientEvent::Progress { id: Some(i), .. } if *i == call));
    let ClientEvent::Response { result: Ok(r), .. } = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(r["resultType"], "complete");
    assert!(r.get("ttlMs").is_none());
    let ClientEvent::Response {
        id, result: Ok(r), ..
    } = &events[2]
    else {
        panic!("{events:?}")
    };
    assert_eq!(*id, list);
    assert_eq!(
        (&r["resultType"], &r["ttlMs"], &r["cacheScope"]),
        (&json!("complete"), &json!(5), &json!("private"))
    );
    // The server asks through input_required results in this revision, never a request.
    assert!(server.request("roots/list", None).is_err());
}

#[test]
fn a_probe_refused_by_a_handshake_server_falls_back_to_initialize_under_the_probes_id() {
    for refusal in [
        json!({"error": {"code": -32601, "message": "method not found"}}),
        json!({"error": {"code": -32600, "message": "server not initialized"}}),
        json!({"error": {"code": -32022, "message": "no", "data": {"supported": ["2025-11-25"]}}}),
        json!({"result": {"supportedVersions": ["2025-11-25"], "capabilities": {}}}),
    ] {
        let mut client = Client::new();
        let probe = client
            .discover(info(), json!({"x": {}}), None)
            .expect("fresh");
        let sent = frames(&mut || client.poll_transmit());
        assert_eq!(sent[0]["method"], DISCOVER);
        let mut refusal_frame = refusal.clone();
        refusal_frame["jsonrpc"] = json!("2.0");
        refusal_frame["id"] = sent[0]["id"].clone();
        client
            .handle_frame(&serde_json::to_vec(&refusal_frame).expect("json"))
            .expect("valid");
        assert!(client.poll_event().is_none(), "{refusal}");
        let sent = frames(&mut || client.poll_transmit());
        assert_eq!(sent[0]["method"], INITIALIZE, "{refusal}");
        assert_eq!(sent[0]["params"]["capabilities"], json!({"x": {}}));
        assert_eq!(sent[0]["params"]["clientInfo"], info());
        // A real handshake server answers it.
        let mut server = Server::new();
        server
            .handle_frame(&serde_json::to_vec(&sent[0]).expect("json"))
            .expect("initialize");
        let Some(ServerEvent::Initialize { id, .. }) = server.poll_event() else {
            panic!("no initialize")
        };
        server
            .respond_initialize(id, json!({}), json!({"name": "s"}))
            .expect("pending");
        answer(&mut server, &mut client);
        let Some(ClientEvent::Initialized { id, result: Ok(r) }) = client.poll_event() else {
            panic!("not connected: {refusal}")
        };
        assert_eq!(
            (id, &r["protocolVersion"]),
            (probe.clone(), &json!(LATEST_VERSION))
        );
        assert_eq!(client.revision(), Some(Revision::Handshake));
        client.initialized().expect("initialized");
        client.list_tools(None).expect("ready");
        pump(&mut client, &mut server);
        let events: Vec<ServerEvent> = std::iter::from_fn(|| server.poll_event()).collect();
        let [
            ServerEvent::Initialized,
            ServerEvent::Request { params, .. },
        ] = &events[..]
        else {
            panic!("{events:?}")
        };
        // No envelope in a handshake session, and no resultType on its results.
        assert!(!has_envelope(params.as_ref()));
    }
}

#[test]
fn a_server_of_no_revision_this_client_speaks_fails_the_connection_and_a_stop_ends_the_probe() {
    let mut client = Client::new();
    client.discover(info(), json!({}), None).expect("fresh");
    client
        .handle_frame(
            br#"{"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"no","data":{"supported":["2027-01-01"],"requested":"2026-07-28"}}}"#,
        )
        .expect("valid");
    let Some(ClientEvent::Initialized { result: Err(e), .. }) = client.poll_event() else {
        panic!("connected")
    };
    assert!(e.message.contains("2027-01-01"), "{}", e.message);
    assert!(
        client
            .poll_transmit()
            .is_some_and(|f| !f.windows(10).any(|w| w == b"initialize"))
    );
    assert!(client.poll_transmit().is_none());

    let mut client = Client::new();
    let probe = client.discover(info(), json!({}), None).expect("fresh");
    let _ = client.poll_transmit();
    client.fail_pending(&Stopped::by_host("gone", Vec::new()));
    let Some(ClientEvent::Initialized { id, result: Err(_) }) = client.poll_event() else {
        panic!("the probe did not end")
    };
    assert_eq!(id, probe);
    assert!(
        client.poll_transmit().is_none(),
        "fell back to a server that is gone"
    );
}

#[test]
fn a_probe_unanswered_by_its_deadline_falls_back_and_the_late_answer_is_dropped() {
    let t0 = Instant::now();
    let deadline = t0 + std::time::Duration::from_secs(10);
    let mut client = Client::new();
    let probe = client
        .discover(info(), json!({}), Some(deadline))
        .expect("fresh");
    let _ = client.poll_transmit();
    assert_eq!(ClientMachine::poll_timeout(&client), Some(deadline));
    ClientMachine::handle_timeout(&mut client, deadline);
    let sent = frames(&mut || client.poll_transmit());
    assert_eq!(sent[0]["method"], INITIALIZE);
    client
        .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#)
        .expect("a late answer is not an error");
    assert!(client.poll_event().is_none());
    let answer = json!({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {"protocolVersion": LATEST_VERSION, "capabilities": {}}});
    client
        .handle_frame(&serde_json::to_vec(&answer).expect("json"))
        .expect("valid");
    let Some(ClientEvent::Initialized { id, result: Ok(_) }) = client.poll_event() else {
        panic!("not connected")
    };
    assert_eq!((id, client.revision()), (probe, Some(Revision::Handshake)));
}

#[test]
fn the_first_request_settles_the_servers_revision_and_the_other_eras_requests_are_refused() {
    let enveloped = |id: i64, version: &str| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {}}}}))
        .expect("json")
    };
    let error_of = |server: &mut Server| -> Value {
        let f = frames(&mut || server.poll_transmit());
        f[0]["error"].clone()
    };
    // Pinned: no discover, the first enveloped request is served.
    let mut server = Server::new();
    server
        .handle_frame(&enveloped(1, MODERN_VERSION))
        .expect("served");
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Request { .. })
    ));
    assert!(server.handle_frame(br#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#).is_err());
    let e = error_of(&mut server);
    assert_eq!(e["code"], UNSUPPORTED_PROTOCOL_VERSION);
    assert_eq!(e["data"]["supported"], json!([MODERN_VERSION]));
    assert!(
        server
            .handle_frame(br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
            .is_err()
    );
    assert_eq!(
        error_of(&mut server)["code"],
        crate::jsonrpc::INVALID_PARAMS
    );
    // A revision not spoken.
    let mut server = Server::new();
    assert!(server.handle_frame(&enveloped(1, "2027-01-01")).is_err());
    let e = error_of(&mut server);
    assert_eq!(
        (&e["code"], &e["data"]["requested"]),
        (&json!(UNSUPPORTED_PROTOCOL_VERSION), &json!("2027-01-01"))
    );
    // After the handshake, an enveloped request is refused.
    let mut server = Server::new();
    server.handle_frame(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#).expect("initialize");
    assert!(server.handle_frame(&enveloped(2, MODERN_VERSION)).is_err());
    assert_eq!(error_of(&mut server)["code"], INVALID_REQUEST);
    assert_eq!(server.revision(), Some(Revision::Handshake));
}
