//! MCP's fuzz body.

use serde_json::json;

use super::*;

/// Fuzz body: feed each line of `data` to a client (ready, with a tool call in flight that
/// asked for progress), to a server that answers everything it is asked, and to the
/// supervisor's rules with a filter. Panics only if a machine panics, emits a frame that is
/// not a JSON-RPC 2.0 message, or the filter lets a hidden tool through.
pub fn fuzz(data: &[u8]) {
    let mut client = Client::new();
    let _ = client.initialize(json!({"name": "fuzz", "version": "0"}), json!({}));
    let _ = client.handle_frame(
        br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#,
    );
    let _ = client.initialized();
    let _ = client.call_tool("t", json!({}), Some(json!(1)));
    let _ = client.list_tools(None);
    // A client in a 2026-07-28 session, and one still probing (a stray answer may fall it back).
    let mut modern = Client::new();
    let _ = modern.discover(json!({"name": "fuzz"}), json!({}), None);
    let _ = modern.handle_frame(
        br#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#,
    );
    let _ = modern.call_tool("t", json!({}), Some(json!(1)));
    let mut probing = Client::new();
    let _ = probing.discover(json!({"name": "fuzz"}), json!({}), None);
    let mut server = Server::new();
    let rules = Supervised::new(ToolFilter {
        allow: Vec::new(),
        deny: vec!["hidden".into()],
    });
    for line in data.split(|b| *b == b'\n') {
        let _ = client.handle_frame(line);
        let _ = modern.handle_frame(line);
        let _ = probing.handle_frame(line);
        while modern.poll_event().is_some() || probing.poll_event().is_some() {}
        let _ = server.handle_frame(line);
        let _ = rules.classify_engine(line);
        let _ = rules.classify_plugin(line);
        if let Some(answer) = rules.answer_engine(line) {
            assert!(Message::decode(&answer, Dialect::JsonRpc2).is_ok());
        }
        if let Some(rewritten) = rules.rewrite_answer(Some(TOOLS_LIST), line) {
            let v: Value = serde_json::from_slice(&rewritten).expect("the rewrite is JSON");
            let hidden = v["result"]["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["name"] == "hidden");
            assert!(!hidden, "a hidden tool was listed");
        }
        while let Some(ev) = server.poll_event() {
            let _ = match ev {
                ServerEvent::Initialize { id, .. } => {
                    server.respond_initialize(id, json!({}), json!({"name": "s"}))
                }
                ServerEvent::Request { id, .. } => {
                    let _ = server.progress(&id, 1.0, Some(2.0), Some("half"));
                    let _ = server.request("roots/list", None);
                    server.respond(id, Ok(json!({})))
                }
                _ => Ok(()),
            };
        }
        while let Some(ev) = client.poll_event() {
            if let ClientEvent::Request { id, .. } = ev {
                let _ = client.respond(id, Ok(json!({})));
            }
        }
        let _ = client.cancel(&Id::Num(1), Some("fuzz"));
    }
    client.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
    while client.poll_event().is_some() {}
    modern.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
    probing.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
    for frame in std::iter::from_fn(|| client.poll_transmit())
        .chain(std::iter::from_fn(|| modern.poll_transmit()))
        .chain(std::iter::from_fn(|| probing.poll_transmit()))
        .chain(std::iter::from_fn(|| server.poll_transmit()))
    {
        assert!(
            Message::decode(&frame, Dialect::JsonRpc2).is_ok(),
            "emitted an invalid frame: {}",
            String::from_utf8_lossy(&frame)
        );
    }
}
