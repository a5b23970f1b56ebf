//! ATP's messages and their CBOR encoding, shared by both machines.

use std::collections::BTreeSet;

pub use ciborium::Value;
use thiserror::Error;

use crate::frame::{BytesMut, CborSeq, FrameLimits, Framer};

/// The start item the host sends first (`null`, as the Go engine does).
pub const START_ITEM: [u8; 1] = [0xf6];

/// Message kind 1: work start (host → plugin).
pub const KIND_WORK_START: u64 = 1;
/// Message kind 2: work done (plugin → host).
pub const KIND_WORK_DONE: u64 = 2;
/// Message kind 3: signal (both ways).
pub const KIND_SIGNAL: u64 = 3;
/// Message kind 4: client done (host → plugin).
pub const KIND_CLIENT_DONE: u64 = 4;
/// Message kind 5: error (plugin → host).
pub const KIND_ERROR: u64 = 5;

/// Why a frame or a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AtpError {
    /// The frame is not exactly one well-formed CBOR item.
    #[error("invalid cbor: {reason}")]
    InvalidCbor {
        /// What the decoder said.
        reason: String,
    },
    /// A CBOR item that is not the message expected here.
    #[error("bad message: {reason}")]
    BadMessage {
        /// What is wrong with it.
        reason: String,
    },
    /// A hello of a protocol version other than 1 or 3.
    #[error("unsupported atp version {got} (supported: 1, 3)")]
    UnsupportedVersion {
        /// The version the plugin announced.
        got: i128,
    },
    /// A message or call names a run that is not in flight.
    #[error("unknown run {run_id:?}")]
    UnknownRun {
        /// The run id.
        run_id: String,
    },
    /// A work start reuses the id of a run in flight.
    #[error("run {run_id:?} is already in flight")]
    DuplicateRun {
        /// The run id.
        run_id: String,
    },
    /// A work start names a step the plugin's schema does not declare.
    #[error("unknown step {step_id:?}")]
    UnknownStep {
        /// The step id.
        step_id: String,
    },
    /// A message or call that the protocol does not allow in this state.
    #[error("unexpected {got} while {state}")]
    Unexpected {
        /// The machine's state.
        state: &'static str,
        /// What arrived or was called.
        got: String,
    },
    /// A feature the negotiated version lacks (signals, errors and client done in v1).
    #[error("{what} is not part of atp version {version}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// The negotiated version.
        version: u64,
    },
}

/// A protocol version this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// The original protocol: one run, acknowledged, no run ids.
    V1,
    /// What current SDKs speak: runs with ids, signals, errors, client done.
    V3,
}

impl Version {
    /// The number on the wire.
    pub fn number(self) -> u64 {
        match self {
            Version::V1 => 1,
            Version::V3 => 3,
        }
    }
}

/// The plugin's introduction.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    /// The version the plugin speaks; the client follows it.
    pub version: Version,
    /// The schema: a map with a `steps` member. v1 sends its members at the top level of the
    /// hello, beside `version`; they are gathered here so both versions look alike.
    pub schema: Value,
    /// Other top-level members of a v3 hello, in order (always empty for v1).
    pub extra: Vec<(Value, Value)>,
}

impl Hello {
    /// Encode as the version's hello item.
    pub fn encode(&self) -> Vec<u8> {
        let mut members = vec![(text("version"), Value::from(self.version.number()))];
        match self.version {
            Version::V3 => members.push((text("schema"), self.schema.clone())),
            Version::V1 => match &self.schema {
                Value::Map(m) => members.extend(m.iter().cloned()),
                other => members.push((text("steps"), other.clone())),
            },
        }
        members.extend(self.extra.iter().cloned());
        encode(&Value::Map(members))
    }

    /// Decode a hello item of version 1 or 3.
    pub fn decode(frame: &[u8]) -> Result<Self, AtpError> {
        let value = decode(frame)?;
        let Value::Map(members) = value else {
            return Err(bad("hello is not a map"));
        };
        let got = match get(&members, "version") {
            Some(Value::Integer(n)) => i128::from(*n),
            _ => return Err(bad("hello has no integer version")),
        };
        let rest = members.into_iter().filter(|(k, _)| !is_key(k, "version"));
        match got {
            1 => Ok(Hello {
                version: Version::V1,
                schema: Value::Map(rest.collect()),
                extra: Vec::new(),
            }),
            3 => {
                let (schema, extra): (Vec<_>, Vec<_>) =
                    rest.partition(|(k, _)| is_key(k, "schema"));
                let schema = schema.into_iter().next().map(|(_, v)| v);
                match schema {
                    Some(schema @ Value::Map(_)) => Ok(Hello {
                        version: Version::V3,
                        schema,
                        extra,
                    }),
                    _ => Err(bad("v3 hello has no schema map")),
                }
            }
            got => Err(AtpError::UnsupportedVersion { got }),
        }
    }

    /// The step ids the schema declares, sorted.
    pub fn step_ids(&self) -> BTreeSet<String> {
        step_ids(&self.schema)
    }
}

/// A step's result: which declared output, its data, and free-form logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The declared output's id (`success`, `error`, ...).
    pub output_id: String,
    /// The output's data.
    pub output_data: Value,
    /// Unstructured logs for debugging.
    pub debug_logs: String,
}

impl Output {
    /// An output with no debug logs.
    pub fn new(output_id: &str, output_data: Value) -> Self {
        Self {
            output_id: output_id.to_owned(),
            output_data,
            debug_logs: String::new(),
        }
    }
}

/// One v3 message after hello.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// 1, host → plugin: start a run of a step.
    WorkStart {
        /// The run.
        run_id: String,
        /// The step to run.
        step_id: String,
        /// Its input.
        config: Value,
    },
    /// 2, plugin → host: a run finished with one of its declared outputs.
    WorkDone {
        /// The run.
        run_id: String,
        /// The result.
        output: Output,
    },
    /// 3, both ways: a signal to or from a run.
    Signal {
        /// The run.
        run_id: String,
        /// The signal's id.
        signal_id: String,
        /// Its data.
        data: Value,
    },
    /// 4, host → plugin: the host will start nothing more.
    ClientDone,
    /// 5, plugin → host: a run (or the plugin) failed outside its declared outputs.
    Error {
        /// The run (`""` when the failure is not about one run).
        run_id: String,
        /// What went wrong.
        error: String,
        /// The run cannot continue.
        step_fatal: bool,
        /// The plugin cannot continue.
        server_fatal: bool,
    },
}

impl Message {
    /// Encode as a v3 `{"id", "run_id", "data"}` item.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, run_id, data) = match self {
            Message::WorkStart {
                run_id,
                step_id,
                config,
            } => (
                KIND_WORK_START,
                run_id.as_str(),
                vec![("id", text(step_id)), ("config", config.clone())],
            ),
            Message::WorkDone { run_id, output } => {
                (KIND_WORK_DONE, run_id.as_str(), output_members(output))
            }
            Message::Signal {
                run_id,
                signal_id,
                data,
            } => (
                KIND_SIGNAL,
                run_id.as_str(),
                vec![("signal_id", text(signal_id)), ("data", data.clone())],
            ),
            Message::ClientDone => (KIND_CLIENT_DONE, "", Vec::new()),
            Message::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } => (
                KIND_ERROR,
                run_id.as_str(),
                vec![
                    ("error", text(error)),
                    ("step_fatal", Value::Bool(*step_fatal)),
                    ("server_fatal", Value::Bool(*server_fatal)),
                ],
            ),
        };
        encode(&Value::Map(vec![
            (text("id"), Value::from(kind)),
            (text("run_id"), text(run_id)),
            (text("data"), map(data)),
        ]))
    }

    /// Decode a v3 message.
    pub fn decode(frame: &[u8]) -> Result<Self, AtpError> {
        let Value::Map(members) = decode(frame)? else {
            return Err(bad("message is not a map"));
        };
        let kind = match get(&members, "id") {
            Some(Value::Integer(n)) => i128::from(*n),
            _ => return Err(bad("message has no integer id")),
        };
        if kind == i128::from(KIND_CLIENT_DONE) {
            return Ok(Message::ClientDone);
        }
        let run_id = req_text(&members, "run_id", "message")?;
        let data = match get(&members, "data") {
            Some(Value::Map(d)) => d.as_slice(),
            _ => return Err(bad("message has no data map")),
        };
        match u64::try_from(kind) {
            Ok(KIND_WORK_START) => Ok(Message::WorkStart {
                run_id,
                step_id: req_text(data, "id", "work start")?,
                config: get(data, "config").cloned().unwrap_or(Value::Null),
            }),
            Ok(KIND_WORK_DONE) => Ok(Message::WorkDone {
                run_id,
                output: decode_output(data)?,
            }),
            Ok(KIND_SIGNAL) => Ok(Message::Signal {
                run_id,
                signal_id: req_text(data, "signal_id", "signal")?,
                data: get(data, "data").cloned().unwrap_or(Value::Null),
            }),
            Ok(KIND_ERROR) => Ok(Message::Error {
                run_id,
                error: opt_text(data, "error", "error")?.unwrap_or_default(),
                step_fatal: opt_bool(data, "step_fatal")?,
                server_fatal: opt_bool(data, "server_fatal")?,
            }),
            _ => Err(bad(&format!("unknown message id {kind}"))),
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Message::WorkStart { .. } => "work start",
            Message::WorkDone { .. } => "work done",
            Message::Signal { .. } => "signal",
            Message::ClientDone => "client done",
            Message::Error { .. } => "error",
        }
    }
}

/// v1's start work item `{"id", "config"}`.
pub fn encode_v1_start(step_id: &str, config: &Value) -> Vec<u8> {
    encode(&map(vec![
        ("id", text(step_id)),
        ("config", config.clone()),
    ]))
}

/// v1's acknowledgement `{"status": "started"}`.
pub fn encode_v1_ack() -> Vec<u8> {
    encode(&map(vec![("status", text("started"))]))
}

/// v1's output item `{"output_id", "output_data", "debug_logs"}`.
pub fn encode_v1_output(output: &Output) -> Vec<u8> {
    encode(&map(output_members(output)))
}

/// Decode one frame as exactly one CBOR item.
///
/// The frame is walked by the [`CborSeq`] framer first (depth at most
/// `FrameLimits::default().max_depth`, no length beyond the frame), so the decoder never
/// allocates for lengths the bytes do not hold and never recurses deeper than that.
pub fn decode(frame: &[u8]) -> Result<Value, AtpError> {
    let limits = FrameLimits {
        max_frame_bytes: frame.len(),
        ..FrameLimits::default()
    };
    let mut buf = BytesMut::from(frame);
    match CborSeq::new(limits).decode_eof(&mut buf) {
        Ok(Some(_)) if buf.is_empty() => {}
        Ok(Some(_)) => {
            return Err(AtpError::InvalidCbor {
                reason: format!("{} bytes after the item", buf.len()),
            });
        }
        Ok(None) => {
            return Err(AtpError::InvalidCbor {
                reason: "empty frame".into(),
            });
        }
        Err(e) => {
            return Err(AtpError::InvalidCbor {
                reason: e.to_string(),
            });
        }
    }
    ciborium::from_reader(frame).map_err(|e: ciborium::de::Error<std::io::Error>| {
        AtpError::InvalidCbor {
            reason: e.to_string(),
        }
    })
}

/// Encode one CBOR item.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("writing a Value into a Vec cannot fail");
    out
}

/// A one-line rendering of a frame in CBOR diagnostic notation (RFC 8949 §8), for transcript
/// notes and logs: `{"id": 1, "run_id": "r1", "data": {...}}`, `h'00ff'` for bytes.
pub fn diagnostic_frame(frame: &[u8]) -> String {
    match decode(frame) {
        Ok(v) => diagnostic(&v),
        Err(e) => format!("<{e}>"),
    }
}

/// A one-line rendering of `value` in CBOR diagnostic notation (RFC 8949 §8).
pub fn diagnostic(value: &Value) -> String {
    let mut out = String::new();
    diag(value, &mut out);
    out
}

fn diag(value: &Value, out: &mut String) {
    match value {
        Value::Integer(n) => out.push_str(&i128::from(*n).to_string()),
        Value::Bytes(b) => {
            out.push_str("h'");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out.push('\'');
        }
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => {
            out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" });
        }
        Value::Float(f) => out.push_str(&format!("{f:?}")),
        Value::Text(s) => {
            out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}")));
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
        Value::Tag(t, v) => {
            out.push_str(&format!("{t}("));
            diag(v, out);
            out.push(')');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                diag(item, out);
            }
            out.push(']');
        }
        Value::Map(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                diag(k, out);
                out.push_str(": ");
                diag(v, out);
            }
            out.push('}');
        }
        // `Value` is non-exhaustive.
        _ => out.push_str("undefined"),
    }
}

pub(super) fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

pub(super) fn map(members: Vec<(&str, Value)>) -> Value {
    Value::Map(members.into_iter().map(|(k, v)| (text(k), v)).collect())
}

pub(super) fn output_members(output: &Output) -> Vec<(&'static str, Value)> {
    vec![
        ("output_id", text(&output.output_id)),
        ("output_data", output.output_data.clone()),
        ("debug_logs", text(&output.debug_logs)),
    ]
}

pub(super) fn decode_output(members: &[(Value, Value)]) -> Result<Output, AtpError> {
    Ok(Output {
        output_id: req_text(members, "output_id", "output")?,
        output_data: get(members, "output_data").cloned().unwrap_or(Value::Null),
        debug_logs: opt_text(members, "debug_logs", "output")?.unwrap_or_default(),
    })
}

pub(super) fn step_ids(schema: &Value) -> BTreeSet<String> {
    let Value::Map(members) = schema else {
        return BTreeSet::new();
    };
    match get(members, "steps") {
        Some(Value::Map(steps)) => steps
            .iter()
            .filter_map(|(k, _)| k.as_text().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

pub(super) fn is_key(k: &Value, key: &str) -> bool {
    matches!(k, Value::Text(s) if s == key)
}

pub(super) fn get<'a>(members: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    members.iter().find(|(k, _)| is_key(k, key)).map(|(_, v)| v)
}

pub(super) fn req_text(
    members: &[(Value, Value)],
    key: &str,
    what: &str,
) -> Result<String, AtpError> {
    opt_text(members, key, what)?.ok_or_else(|| bad(&format!("{what} has no {key}")))
}

pub(super) fn opt_text(
    members: &[(Value, Value)],
    key: &str,
    what: &str,
) -> Result<Option<String>, AtpError> {
    match get(members, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Text(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(&format!("{what}: {key} is not text"))),
    }
}

pub(super) fn opt_bool(members: &[(Value, Value)], key: &str) -> Result<bool, AtpError> {
    match get(members, key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("error: {key} is not a bool"))),
    }
}

pub(super) fn bad(reason: &str) -> AtpError {
    AtpError::BadMessage {
        reason: reason.to_owned(),
    }
}
