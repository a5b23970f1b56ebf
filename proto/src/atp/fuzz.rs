//! The ATP fuzz body.

use super::types::text;
use super::{
    AtpClient, AtpServer, Hello, Message, ServerEvent, Value, Version, decode, diagnostic_frame,
    encode,
};
use crate::stopped::Stopped;

/// Fuzz body (for a cargo-fuzz target and the unit tests): split `data` into frames at each
/// `0xff 0xfe` pair; for each version, feed every frame to a fresh server and to a client that
/// already has hello and one run in flight, answering work starts and draining both machines
/// as it goes; then end both sessions. Also decode `data` whole as hello, message and
/// diagnostic text. Refusals are expected; a panic is a bug.
pub fn fuzz(data: &[u8]) {
    let frames: Vec<&[u8]> = split_frames(data);
    let schema = Value::Map(vec![(
        text("steps"),
        Value::Map(vec![(text("s"), Value::Map(Vec::new()))]),
    )]);
    for version in [Version::V1, Version::V3] {
        let mut server = AtpServer::new(version, schema.clone());
        let mut client = AtpClient::new();
        let _ = client.handle_frame(&server_hello(version, &schema));
        let _ = client.start("r", "s", Value::Null);
        for frame in &frames {
            let _ = server.handle_frame(frame);
            let _ = client.handle_frame(frame);
            while let Some(ServerEvent::WorkStart { run_id, .. }) = server.poll_event() {
                let _ = server.signal(&run_id, "x", Value::Null);
                let _ = server.work_done(&run_id, "success", Value::Null, "");
            }
            let _ = client.signal("r", "x", Value::Null);
            while server.poll_transmit().is_some() {}
            while client.poll_event().is_some() {}
        }
        let _ = client.client_done();
        client.fail_pending(&Stopped::by_host("gone", vec!["tail".into()]));
        let _ = server.error("r", "e", true, true);
    }
    let _ = diagnostic_frame(data);
    for frame in frames.iter().copied().chain([data]) {
        fuzz_round_trips(frame);
    }
}

/// What decodes re-encodes canonically: the encoding of a decoded item, hello or message
/// decodes again, and encoding that gives the same bytes. (Bytes, not values, are compared:
/// a NaN in a config is not equal to itself.)
fn fuzz_round_trips(frame: &[u8]) {
    if let Ok(value) = decode(frame) {
        let wire = encode(&value);
        let again = decode(&wire).expect("an encoded item decodes");
        assert_eq!(encode(&again), wire, "item encoding is not a fixed point");
    }
    if let Ok(hello) = Hello::decode(frame) {
        let wire = hello.encode();
        let again = Hello::decode(&wire).expect("an encoded hello decodes");
        assert_eq!(again.version, hello.version);
        assert_eq!(again.encode(), wire, "hello encoding is not a fixed point");
    }
    if let Ok(msg) = Message::decode(frame) {
        let wire = msg.encode();
        let again = Message::decode(&wire).expect("an encoded message decodes");
        assert_eq!(again.name(), msg.name());
        assert_eq!(
            again.encode(),
            wire,
            "message encoding is not a fixed point"
        );
    }
}

fn server_hello(version: Version, schema: &Value) -> Vec<u8> {
    Hello {
        version,
        schema: schema.clone(),
        extra: Vec::new(),
    }
    .encode()
}

fn split_frames(data: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        if data[i] == 0xff && data[i + 1] == 0xfe {
            frames.push(&data[start..i]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    frames.push(&data[start..]);
    frames
}
