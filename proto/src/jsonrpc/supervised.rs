//! The supervisor's view of a JSON-RPC frame, shared by every JSON-RPC protocol's rules
//! ([`SupervisedProtocol`](crate::supervise::SupervisedProtocol)): which frames are requests,
//! handshake and answers, by their members alone, and the error answer to a request.

use serde_json::Value;

use super::{Dialect, ErrorObject, Id, Message};
use crate::supervise::{FromEngine, FromPlugin, key_of};

/// The two members the supervisor reads from a JSON-RPC frame. Params, results and errors
/// are skipped, not built into `Value`s: classification runs on every frame both ways.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    method: Option<Value>,
    /// `None` for a missing or `null` id.
    #[serde(default)]
    id: Option<Value>,
}

impl Head {
    fn of(frame: &[u8]) -> Option<Head> {
        serde_json::from_slice(frame).ok()
    }

    fn method(&self) -> Option<&str> {
        self.method.as_ref().and_then(Value::as_str)
    }
}

/// An engine frame of a JSON-RPC protocol: `handshake` names the methods that are handshake.
pub fn classify_engine(frame: &[u8], handshake: &[&str]) -> FromEngine {
    let Some(head) = Head::of(frame) else {
        return FromEngine::Other;
    };
    let id = head.id.as_ref().map(key_of);
    match (head.method(), id) {
        (Some(method), id) if handshake.contains(&method) => FromEngine::Handshake { awaits: id },
        (Some(method), Some(key)) => FromEngine::Request {
            key,
            method: Some(method.to_owned()),
        },
        (None, Some(key)) => FromEngine::Answer { key },
        (Some(_), None) | (None, None) => FromEngine::Other,
    }
}

/// A plugin frame of a JSON-RPC protocol: `handshake` names the plugin's handshake requests.
pub fn classify_plugin(frame: &[u8], handshake: &[&str]) -> FromPlugin {
    let Some(head) = Head::of(frame) else {
        return FromPlugin::Other;
    };
    match (head.method(), &head.id) {
        (Some(method), Some(id)) if handshake.contains(&method) => FromPlugin::HandshakeRequest {
            id: id.clone(),
            method: method.to_owned(),
        },
        (None, Some(id)) => FromPlugin::Answer { key: key_of(id) },
        _ => FromPlugin::Other,
    }
}

/// The error response to the request `key` (an id's JSON text) in `dialect`.
pub fn error_answer(key: &str, dialect: Dialect, error: ErrorObject) -> Vec<u8> {
    Message::response(id_of(key), Err(error)).encode(dialect)
}

/// The request id whose JSON text is `key` (`null` for one that is not a number or string).
pub fn id_of(key: &str) -> Id {
    serde_json::from_str::<Value>(key)
        .ok()
        .and_then(|v| match v {
            Value::Number(n) => n.as_i64().map(Id::Num),
            Value::String(s) => Some(Id::Str(s)),
            _ => None,
        })
        .unwrap_or(Id::Null)
}
