//! An example Arcaflow plugin (ATP v3, or v1 with `--v1`) with two steps:
//!
//! - `greet`, config `{"name": text, "defer": bool}`: output `success`
//!   `{"message": "Hello, <name>!"}`; an empty name gives the declared error output `error`
//!   `{"reason": ...}` (a normal work done); a config without a text name fails with an ATP
//!   error message. With `"defer": true` the run stays pending and finishes right after the
//!   plugin handled the next frame from the host (a work start, a signal or client done), so
//!   results come back out of order, deterministically.
//! - `wait`, any config: sends signal `ready` (data `{}`) at once, then finishes when signal
//!   `go` arrives, with output `success` `{"received": <the signal's data>}`.
//!
//! The same schema is announced under both versions; v1 has no signals, so `wait` never
//! finishes there.

use std::collections::BTreeMap;
use std::io::{self, Write};

use sandpipe_guest::atp::{Output, Plugin, Progress, Run, Value, Version, serve};
use sandpipe_guest::{Framed, GuestError};
use serde_json::json;

/// The plugin's steps.
#[derive(Debug, Default)]
pub struct Example {
    /// Deferred greets: run id → name.
    deferred: BTreeMap<String, String>,
}

impl Plugin for Example {
    fn start(&mut self, run: &mut Run<'_>, step_id: &str, config: Value) -> Progress {
        match step_id {
            "greet" => {
                let defer = member(&config, "defer") == Some(&Value::Bool(true));
                match member(&config, "name").and_then(Value::as_text) {
                    None => Progress::Failed("greet: config needs a text name".into()),
                    Some("") => Progress::Done(Output::new(
                        "error",
                        object(json!({"reason": "name must not be empty"})),
                    )),
                    Some(name) if defer => {
                        self.deferred.insert(run.id().to_owned(), name.to_owned());
                        Progress::Pending
                    }
                    Some(name) => Progress::Done(greeting(name)),
                }
            }
            _ => {
                run.signal("ready", object(json!({})));
                Progress::Pending
            }
        }
    }

    fn signal(&mut self, _run: &mut Run<'_>, signal_id: &str, data: Value) -> Progress {
        match signal_id {
            "go" => Progress::Done(Output::new(
                "success",
                Value::Map(vec![(Value::Text("received".into()), data)]),
            )),
            _ => Progress::Pending,
        }
    }

    fn poll(&mut self, run: &mut Run<'_>) -> Progress {
        match self.deferred.remove(run.id()) {
            Some(name) => Progress::Done(greeting(&name)),
            None => Progress::Pending,
        }
    }
}

fn greeting(name: &str) -> Output {
    Output::new(
        "success",
        object(json!({"message": format!("Hello, {name}!")})),
    )
}

fn member<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(members) = config else {
        return None;
    };
    members
        .iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .map(|(_, v)| v)
}

fn object(json: serde_json::Value) -> Value {
    Value::serialized(&json).expect("JSON converts to CBOR")
}

/// A step's schema: an input scope and outputs, Arcaflow style.
fn scope(id: &str, props: serde_json::Value) -> serde_json::Value {
    json!({"root": id, "objects": {id: {"id": id, "properties": props}}})
}

/// The schema announced in hello.
pub fn schema() -> Value {
    let text = json!({"type": {"type_id": "string"}, "required": true});
    let greet = json!({
        "id": "greet",
        "input": scope("GreetInput", json!({"name": text, "defer": {"type": {"type_id": "bool"}, "required": false}})),
        "outputs": {
            "success": {"schema": scope("Greeting", json!({"message": text}))},
            "error": {"error": true, "schema": scope("Failure", json!({"reason": text}))},
        },
    });
    let any = json!({"type": {"type_id": "any"}});
    let wait = json!({
        "id": "wait",
        "input": scope("WaitInput", json!({})),
        "outputs": {"success": {"schema": scope("Received", json!({"received": any}))}},
        // The Arcaflow engine refuses a signal without a data schema.
        "signal_handlers": {"go": {"id": "go", "data_schema": scope("Go", json!({}))}},
        "signal_emitters": {"ready": {"id": "ready", "data_schema": scope("Ready", json!({}))}},
    });
    object(json!({"steps": {"greet": greet, "wait": wait}}))
}

/// The whole plugin minus stdio: `--v1` speaks ATP v1, otherwise v3. `--atp` is accepted and
/// changes nothing: Arcaflow's container deployers append it to every plugin's command, as the
/// Python SDK expects.
pub fn main_with<R: sandpipe_guest::Input, W: Write>(
    io: &mut Framed<R, W>,
    args: &[String],
) -> Result<(), GuestError> {
    let version = match args {
        [] => Version::V3,
        [atp] if atp == "--atp" => Version::V3,
        [v1] if v1 == "--v1" => Version::V1,
        other => {
            return Err(GuestError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown arguments {other:?} (only --v1 or --atp)"),
            )));
        }
    };
    serve(io, &mut Example::default(), version, schema())
}
