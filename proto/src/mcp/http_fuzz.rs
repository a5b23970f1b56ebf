//! The fuzz body of the Streamable HTTP rules ([`classify`]) and the [`Router`], checked
//! against a model of which HTTP request waits for which answer.
//!
//! Each line of the input is one step; its first byte picks the step, its second the HTTP
//! request (one of four streams), the rest is the payload:
//!
//! ```text
//!  0  a POST: the payload is its body; byte 2's bits pick the heads (mirrored from the body,
//!     or one of them wrong or missing, a session or none); a request the rules let through
//!     goes into the router
//!  1  a frame from the server: the payload as it is
//!  2  the server answers the waiting request picked by byte 2 (a result, an error, a progress
//!     notification for it, or the answer twice)
//!  3  the stream is abandoned
//!  4  the server is gone: every waiting request is failed
//! ```
//!
//! It panics if [`classify`] lets through a message whose heads disagree with its body, or
//! refuses with anything but a 400 and a JSON-RPC error naming the request's id; if the router
//! gives the server a frame that is not JSON, reuses an id, routes an answer to a stream that
//! did not ask or with another id than the client's, routes one answer twice, cancels
//! something the stream did not wait for, or loses a waiting request in `fail_all`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::http::{Heads, Post, Routed, Router, classify};
use super::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION};

/// What the model knows of one request in the router: its stream and the client's id.
#[derive(Debug, Clone)]
struct Sent {
    stream: u64,
    id: Value,
}

/// Fuzz body; see the module docs.
pub fn fuzz(data: &[u8]) {
    let mut router = Router::default();
    let mut waiting: BTreeMap<u64, Sent> = BTreeMap::new();
    let mut used: Vec<u64> = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        let (op, stream, rest) = match line {
            [op, stream, rest @ ..] => (*op % 5, u64::from(*stream % 4), rest),
            _ => continue,
        };
        match op {
            0 => post(&mut router, &mut waiting, &mut used, stream, rest),
            1 => {
                let answers = serde_json::from_slice::<Value>(rest)
                    .ok()
                    .filter(|m| m.get("method").is_none())
                    .and_then(|m| m.get("id").and_then(Value::as_u64));
                check_routed(&mut waiting, router.outbound(rest), answers);
            }
            2 => answer(&mut router, &mut waiting, rest),
            3 => {
                let cancels = router.abandon(stream);
                let mine: Vec<u64> = waiting
                    .iter()
                    .filter(|(_, s)| s.stream == stream)
                    .map(|(n, _)| *n)
                    .collect();
                assert_eq!(cancels.len(), mine.len(), "a cancel per waiting request");
                for (frame, n) in cancels.iter().zip(&mine) {
                    let v: Value = serde_json::from_slice(frame).expect("a cancel is JSON");
                    assert_eq!(v["method"], super::CANCELLED);
                    assert_eq!(
                        v["params"]["requestId"],
                        json!(n),
                        "cancels what it waits for"
                    );
                    waiting.remove(n);
                }
            }
            _ => {
                let failed = router.fail_all(&json!({"code": -32603, "message": "gone"}));
                assert_eq!(
                    failed.len(),
                    waiting.len(),
                    "every waiting request is failed"
                );
                for (stream, message) in failed {
                    let matched = waiting
                        .iter()
                        .find(|(_, s)| s.stream == stream && s.id == message["id"])
                        .map(|(n, _)| *n);
                    let n = matched.expect("failed with the client's id, to its stream");
                    waiting.remove(&n);
                }
            }
        }
        assert_eq!(
            router.in_flight(),
            waiting.len(),
            "the router and the model agree"
        );
    }
}

/// Step 0: classify a POST whose heads byte 2 picks; let a request through to the router.
fn post(
    router: &mut Router,
    waiting: &mut BTreeMap<u64, Sent>,
    used: &mut Vec<u64>,
    stream: u64,
    rest: &[u8],
) {
    let (bits, body) = match rest {
        [bits, body @ ..] => (*bits, body),
        [] => (0, rest),
    };
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let method = parsed
        .as_ref()
        .and_then(|m| m["method"].as_str())
        .map(str::to_owned);
    let named = parsed.as_ref().and_then(|m| {
        let p = &m["params"];
        p["name"].as_str().or(p["uri"].as_str()).map(str::to_owned)
    });
    let version = parsed.as_ref().and_then(|m| {
        m["params"]["_meta"][META_PROTOCOL_VERSION]
            .as_str()
            .map(str::to_owned)
    });
    // Mirrored as a client would, unless a bit says otherwise.
    let heads = Heads {
        version: match bits & 3 {
            0 => version.as_deref(),
            1 => None,
            2 => Some("2025-11-25"),
            _ => Some("1999-01-01"),
        },
        method: if bits & 4 == 0 {
            method.as_deref()
        } else {
            Some("tools/list")
        },
        name: if bits & 8 == 0 {
            named.as_deref()
        } else {
            Some("other")
        },
        session: (bits & 16 != 0).then_some("s1"),
    };
    match classify(&heads, body) {
        Err(refusal) => {
            assert_eq!(refusal.status, 400, "every refusal is a 400");
            let v: Value = serde_json::from_slice(&refusal.body()).expect("the refusal is JSON");
            assert_eq!(v["jsonrpc"], "2.0");
            assert_eq!(v["error"]["code"], json!(refusal.code));
            let id = parsed
                .as_ref()
                .and_then(|m| m.get("id"))
                .filter(|i| i.is_string() || i.is_i64() || i.is_u64());
            if let Some(id) = id {
                assert_eq!(&v["id"], id, "a refusal answers the request's id");
            }
        }
        Ok((post, message)) => {
            let enveloped = message["params"]["_meta"]
                .get(META_PROTOCOL_VERSION)
                .is_some();
            match &post {
                Post::Stateless { method: m, .. } => {
                    assert!(enveloped, "stateless without the envelope");
                    assert_eq!(heads.version, Some(MODERN_VERSION));
                    assert_eq!(heads.method, Some(m.as_str()), "Mcp-Method disagrees");
                    assert!(
                        message["params"]["_meta"]
                            .get(META_CLIENT_CAPABILITIES)
                            .is_some()
                    );
                    if matches!(m.as_str(), "tools/call" | "prompts/get" | "resources/read")
                        && let Some(n) = named.as_deref()
                    {
                        assert_eq!(heads.name, Some(n), "Mcp-Name disagrees");
                    }
                }
                Post::Initialize => {
                    assert_eq!(message["method"], "initialize");
                    assert!(heads.session.is_none());
                }
                Post::InSession { session, .. } => {
                    assert_eq!(heads.session, Some(session.as_str()));
                }
            }
            let is_request =
                message.get("method").is_some() && message.get("id").is_some_and(|i| !i.is_null());
            let id = message.get("id").cloned();
            let frame = router.inbound(stream, message);
            let sent: Value = serde_json::from_slice(&frame).expect("the server gets JSON");
            if is_request {
                let n = sent["id"].as_u64().expect("a fresh numeric id");
                assert!(!used.contains(&n), "id {n} used twice");
                used.push(n);
                waiting.insert(
                    n,
                    Sent {
                        stream,
                        id: id.unwrap_or(Value::Null),
                    },
                );
            }
        }
    }
}

/// Step 2: the server answers (or reports progress on) a waiting request.
fn answer(router: &mut Router, waiting: &mut BTreeMap<u64, Sent>, rest: &[u8]) {
    let pick = rest.first().copied().unwrap_or(0);
    let Some((&n, _)) = waiting
        .iter()
        .nth(usize::from(pick >> 2) % waiting.len().max(1))
    else {
        return;
    };
    let frame = match pick & 3 {
        0 => json!({"jsonrpc": "2.0", "id": n, "result": {}}),
        1 => json!({"jsonrpc": "2.0", "id": n, "error": {"code": 1, "message": "no"}}),
        _ => json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": n, "progress": 1}}),
    };
    let bytes = serde_json::to_vec(&frame).expect("JSON");
    let routed = router.outbound(&bytes);
    check_routed(waiting, routed, (pick & 3 < 2).then_some(n));
    if pick & 3 == 3 {
        // The same answer again: nobody waits for it any more.
        let again = json!({"jsonrpc": "2.0", "id": n, "result": {}});
        let first = router.outbound(&serde_json::to_vec(&again).expect("JSON"));
        check_routed(waiting, first, Some(n));
        let second = router.outbound(&serde_json::to_vec(&again).expect("JSON"));
        assert_eq!(second, Routed::Dropped, "an answer routed twice");
    }
}

/// Check where a server frame went against the model, and take an answered request out.
/// `answers`: the router's id the frame answers, when it is an answer.
fn check_routed(waiting: &mut BTreeMap<u64, Sent>, routed: Routed, answers: Option<u64>) {
    let Routed::To {
        stream,
        message,
        done,
    } = routed
    else {
        return;
    };
    if done {
        let n = answers.expect("routed as an answer, but it answers nothing");
        let sent = waiting
            .remove(&n)
            .expect("an answer to a request nobody waits for");
        assert_eq!(sent.stream, stream, "an answer went to another stream");
        assert_eq!(message["id"], sent.id, "an answer without the client's id");
    } else {
        assert!(
            waiting.values().any(|s| s.stream == stream),
            "routed to stream {stream}, which waits for nothing: {message}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(op: u8, stream: u8, rest: &[u8]) -> Vec<u8> {
        let mut l = vec![op, stream];
        l.extend_from_slice(rest);
        l
    }

    fn modern(id: u64, method: &str) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"name": "add",
            "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {}}}})
        .to_string()
    }

    /// Inputs reaching every step: requests from several streams with the same ids, answers,
    /// progress, repeats, abandons and the server's end.
    fn corpus() -> Vec<Vec<u8>> {
        let call = modern(1, "tools/call");
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).to_string();
        let in_session = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        let mut out = Vec::new();
        let mut run: Vec<Vec<u8>> = Vec::new();
        for stream in 0..4u8 {
            run.push(line(0, stream, &[&[0u8][..], call.as_bytes()].concat()));
            run.push(line(
                0,
                stream,
                &[&[16u8][..], in_session.as_bytes()].concat(),
            ));
        }
        run.push(line(0, 1, &[&[0u8][..], init.as_bytes()].concat()));
        for pick in [0u8, 5, 10, 15, 2, 3] {
            run.push(line(2, 0, &[pick]));
        }
        run.push(line(1, 0, br#"{"jsonrpc":"2.0","id":99,"result":{}}"#));
        run.push(line(
            1,
            0,
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
        ));
        run.push(line(3, 2, b""));
        run.push(line(2, 0, &[1]));
        run.push(line(4, 0, b""));
        out.push(run.join(&b'\n'));
        // Each heads bit wrong once.
        for bits in [1u8, 2, 3, 4, 8, 16] {
            out.push(line(0, 0, &[&[bits][..], call.as_bytes()].concat()));
        }
        out.push(line(0, 0, b"\0[]"));
        out.push(line(
            0,
            0,
            b"\0{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}",
        ));
        out
    }

    #[test]
    fn the_corpus_runs_and_reaches_every_step() {
        for input in corpus() {
            fuzz(&input);
            // Cut anywhere, it still holds.
            for cut in (0..input.len()).step_by(7) {
                fuzz(&input[..cut]);
            }
        }
        fuzz(b"");
        fuzz(b"\x00");
        fuzz(b"\x02\x00\xff\n\x03\x03\n\x04\x04");
    }

    #[test]
    fn requests_with_the_same_id_from_four_streams_each_get_their_own_answer() {
        let mut router = Router::default();
        let mut fresh = Vec::new();
        for stream in 0..4 {
            let (_, m) = classify(
                &Heads {
                    version: Some(MODERN_VERSION),
                    method: Some("tools/call"),
                    name: Some("add"),
                    session: None,
                },
                modern(1, "tools/call").as_bytes(),
            )
            .expect("let through");
            let sent: Value = serde_json::from_slice(&router.inbound(stream, m)).expect("JSON");
            fresh.push(sent["id"].as_u64().expect("fresh"));
        }
        fresh.dedup();
        assert_eq!(fresh.len(), 4);
        for (stream, n) in fresh.iter().enumerate().rev() {
            let answer = json!({"jsonrpc": "2.0", "id": n, "result": {}}).to_string();
            assert_eq!(
                router.outbound(answer.as_bytes()),
                Routed::To {
                    stream: stream as u64,
                    message: json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
                    done: true
                }
            );
        }
    }
}
