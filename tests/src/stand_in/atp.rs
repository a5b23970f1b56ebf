//! The engine side of ATP for the stand-in sessions: what `peers_python.rs` (the SDK plugin
//! natively, behind `sandpipe run`) and `arcaflow_unchanged.rs` (the same plugin as a
//! component) both send and read.

use sandpipe_proto::atp::{Hello, Message, Value};

use super::Session;

/// A CBOR text string.
pub fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

/// A CBOR map with text keys.
pub fn map(members: &[(&str, Value)]) -> Value {
    Value::Map(members.iter().map(|(k, v)| (text(k), v.clone())).collect())
}

/// The engine's `work_start` for `step` as run `run`.
pub fn work_start(run: &str, step: &str, config: Value) -> Vec<u8> {
    Message::WorkStart {
        run_id: run.into(),
        step_id: step.into(),
        config,
    }
    .encode()
}

/// The start item (`null`), then the plugin's hello.
pub fn hello(s: &mut Session) -> Hello {
    s.send(&[0xf6]);
    let hello = s.await_frame("hello", |f| Hello::decode(f).is_ok());
    Hello::decode(&hello).expect("hello")
}
