//! JSON-RPC messages in both dialects: ids, errors, the envelope and its codec.

use std::fmt;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::frame::escape_snippet;
use crate::stopped::Stopped;

/// Which envelope rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// JSON-RPC 2.0.
    JsonRpc2,
    /// Orchard: JSON-RPC-like, without `jsonrpc`, with string error codes.
    Orchard,
}

impl Dialect {
    /// The dialect's code for an internal error: `-32603` or `"internal_error"`.
    pub fn internal_error(self) -> ErrorCode {
        match self {
            Dialect::JsonRpc2 => ErrorCode::Int(INTERNAL_ERROR),
            Dialect::Orchard => ErrorCode::Str("internal_error".into()),
        }
    }

    /// The dialect's code for a cancelled request: `-32800` (LSP's RequestCancelled) or
    /// `"cancelled"`.
    pub fn cancelled(self) -> ErrorCode {
        match self {
            Dialect::JsonRpc2 => ErrorCode::Int(REQUEST_CANCELLED),
            Dialect::Orchard => ErrorCode::Str("cancelled".into()),
        }
    }

    /// The dialect's code for an unknown method.
    pub fn method_not_found(self) -> ErrorCode {
        match self {
            Dialect::JsonRpc2 => ErrorCode::Int(METHOD_NOT_FOUND),
            Dialect::Orchard => ErrorCode::Str("unknown_method".into()),
        }
    }

    /// The dialect's code for bad parameters.
    pub fn invalid_params(self) -> ErrorCode {
        match self {
            Dialect::JsonRpc2 => ErrorCode::Int(INVALID_PARAMS),
            Dialect::Orchard => ErrorCode::Str("invalid_request".into()),
        }
    }
}

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error.
pub const INTERNAL_ERROR: i64 = -32603;
/// The request was cancelled (LSP).
pub const REQUEST_CANCELLED: i64 = -32800;

/// A request id. `Null` only appears on error responses to requests whose id could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// An integer id.
    Num(i64),
    /// A string id.
    Str(String),
    /// `null`.
    Null,
}

impl Id {
    fn to_value(&self) -> Value {
        match self {
            Id::Num(n) => Value::from(*n),
            Id::Str(s) => Value::from(s.as_str()),
            Id::Null => Value::Null,
        }
    }

    fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => n.as_i64().map(Id::Num),
            Value::String(s) => Some(Id::Str(s.clone())),
            Value::Null => Some(Id::Null),
            _ => None,
        }
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Self {
        Id::Num(n)
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::Str(s.to_owned())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

/// An error code: an integer (JSON-RPC) or a string (Orchard).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// JSON-RPC integer code.
    Int(i64),
    /// Orchard string code.
    Str(String),
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Int(n) => write!(f, "{n}"),
            ErrorCode::Str(s) => f.write_str(s),
        }
    }
}

impl From<i64> for ErrorCode {
    fn from(n: i64) -> Self {
        ErrorCode::Int(n)
    }
}

impl From<&str> for ErrorCode {
    fn from(s: &str) -> Self {
        ErrorCode::Str(s.to_owned())
    }
}

/// A protocol-level error reported by the other side (data, not a failure of the transport).
#[derive(Debug, Clone, PartialEq, Error)]
#[error("error {code}: {message}")]
pub struct ErrorObject {
    /// The code.
    pub code: ErrorCode,
    /// A short message.
    pub message: String,
    /// JSON-RPC `data`; for Orchard, the `detail` string.
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with no data.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            data: None,
        }
    }

    /// Attach data (Orchard: a detail string).
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A call that expects a response.
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Parameters; `None` when the member was absent.
        params: Option<Value>,
    },
    /// A call without a response.
    Notification {
        /// The method.
        method: String,
        /// Parameters; `None` when the member was absent.
        params: Option<Value>,
    },
    /// The answer to a request.
    Response {
        /// The request's id.
        id: Id,
        /// `result` or `error`.
        result: Result<Value, ErrorObject>,
    },
}

/// Why a frame is not a message of the protocol, or not acceptable now.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The frame is not JSON.
    #[error("message is not JSON ({reason}): \"{snippet}\"")]
    NotJson {
        /// serde_json's reason.
        reason: String,
        /// The escaped bytes.
        snippet: String,
    },
    /// The frame is JSON but not a valid message.
    #[error("invalid message ({reason}): \"{snippet}\"")]
    Invalid {
        /// What is wrong.
        reason: &'static str,
        /// The escaped bytes.
        snippet: String,
    },
    /// `jsonrpc` is present but not `"2.0"`.
    #[error("unsupported jsonrpc version {got:?}")]
    WrongVersion {
        /// What was sent.
        got: String,
    },
    /// A response to no pending request.
    #[error("response to unknown request id {id}")]
    UnknownResponseId {
        /// The id.
        id: String,
    },
    /// A request id that is already pending.
    #[error("request id {id} is already in use")]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// A response for a request that was never received, or answered twice.
    #[error("no incoming request {id} to respond to")]
    NotAwaitingResponse {
        /// The id.
        id: String,
    },
    /// The protocol's state machine did not expect this message now.
    #[error("unexpected {got} while {state}")]
    Unexpected {
        /// The machine's state.
        state: &'static str,
        /// What arrived.
        got: String,
    },
    /// A message with the right shape but wrong contents for the protocol.
    #[error("bad {what}: {reason}")]
    BadPayload {
        /// The message or field.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

impl ProtocolError {
    pub(crate) fn invalid(reason: &'static str, frame: &[u8]) -> Self {
        ProtocolError::Invalid {
            reason,
            snippet: escape_snippet(frame, 200),
        }
    }
}

/// The answer to a request the plugin will never answer, in `dialect`'s form: the dialect's
/// internal error, the reason as message, and as data `{"reason", "exit", "stderr"}`
/// ([`Stopped::to_json`]); Orchard's data is the stderr tail joined with newlines (its
/// `detail`).
pub fn stopped_error(dialect: Dialect, stopped: &Stopped) -> ErrorObject {
    let data = match dialect {
        Dialect::Orchard => Value::from(stopped.stderr_tail.join("\n")),
        Dialect::JsonRpc2 => stopped.to_json(),
    };
    ErrorObject::new(dialect.internal_error(), stopped.reason.clone()).with_data(data)
}

/// Bare JSON-RPC 2.0 under the supervisor (`crate::supervise`): every request is budgeted;
/// there is no handshake.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::jsonrpc::classify_engine(frame, &[])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        let error = stopped_error(Dialect::JsonRpc2, stopped);
        crate::jsonrpc::error_answer(key, Dialect::JsonRpc2, error)
    }
}

impl Message {
    /// A request.
    pub fn request(id: impl Into<Id>, method: impl Into<String>, params: Option<Value>) -> Self {
        Message::Request {
            id: id.into(),
            method: method.into(),
            params,
        }
    }

    /// A notification.
    pub fn notification(method: impl Into<String>, params: Option<Value>) -> Self {
        Message::Notification {
            method: method.into(),
            params,
        }
    }

    /// A response.
    pub fn response(id: impl Into<Id>, result: Result<Value, ErrorObject>) -> Self {
        Message::Response {
            id: id.into(),
            result,
        }
    }

    /// Parse one frame.
    pub fn decode(frame: &[u8], dialect: Dialect) -> Result<Message, ProtocolError> {
        let value: Value = serde_json::from_slice(frame).map_err(|e| ProtocolError::NotJson {
            reason: e.to_string(),
            snippet: escape_snippet(frame, 200),
        })?;
        Self::from_value(value, dialect, frame)
    }

    fn from_value(value: Value, dialect: Dialect, frame: &[u8]) -> Result<Message, ProtocolError> {
        let Value::Object(mut obj) = value else {
            return Err(ProtocolError::invalid("not an object", frame));
        };
        if dialect == Dialect::JsonRpc2 {
            match obj.remove("jsonrpc") {
                None => {}
                Some(Value::String(v)) if v == "2.0" => {}
                Some(other) => {
                    return Err(ProtocolError::WrongVersion {
                        got: other.to_string(),
                    });
                }
            }
        }
        let id = match obj.remove("id") {
            None => None,
            Some(v) => Some(
                Id::from_value(&v)
                    .ok_or_else(|| ProtocolError::invalid("id is not a number or string", frame))?,
            ),
        };
        let params = obj.remove("params");
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else {
                return Err(ProtocolError::invalid("method is not a string", frame));
            };
            return match id {
                None => Ok(Message::Notification { method, params }),
                Some(Id::Null) => Err(ProtocolError::invalid("request id is null", frame)),
                Some(id) => Ok(Message::Request { id, method, params }),
            };
        }
        let id = id.ok_or_else(|| ProtocolError::invalid("no method and no id", frame))?;
        let result = obj.remove("result");
        let error = obj.remove("error");
        let result = match (result, error) {
            (Some(r), None) => Ok(r),
            (None, Some(e)) => Err(parse_error_object(e, dialect, frame)?),
            (Some(_), Some(_)) => {
                return Err(ProtocolError::invalid("both result and error", frame));
            }
            (None, None) => {
                return Err(ProtocolError::invalid(
                    "neither method, result nor error",
                    frame,
                ));
            }
        };
        Ok(Message::Response { id, result })
    }

    /// Serialize to one line of JSON (no newline).
    pub fn encode(&self, dialect: Dialect) -> Vec<u8> {
        let mut obj = Map::new();
        if dialect == Dialect::JsonRpc2 {
            obj.insert("jsonrpc".into(), Value::from("2.0"));
        }
        match self {
            Message::Request { id, method, params } => {
                obj.insert("id".into(), id.to_value());
                obj.insert("method".into(), Value::from(method.as_str()));
                if let Some(p) = params {
                    obj.insert("params".into(), p.clone());
                }
            }
            Message::Notification { method, params } => {
                obj.insert("method".into(), Value::from(method.as_str()));
                if let Some(p) = params {
                    obj.insert("params".into(), p.clone());
                }
            }
            Message::Response { id, result } => {
                obj.insert("id".into(), id.to_value());
                match result {
                    Ok(r) => {
                        obj.insert("result".into(), r.clone());
                    }
                    Err(e) => {
                        obj.insert("error".into(), error_object_value(e, dialect));
                    }
                }
            }
        }
        // A map of JSON values always serializes.
        serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
    }

    /// A short description for error messages: `request "invoke" (id 3)`.
    pub fn describe(&self) -> String {
        match self {
            Message::Request { id, method, .. } => format!("request {method:?} (id {id})"),
            Message::Notification { method, .. } => format!("notification {method:?}"),
            Message::Response { id, result: Ok(_) } => format!("response (id {id})"),
            Message::Response { id, result: Err(e) } => format!("error response (id {id}): {e}"),
        }
    }
}

fn parse_error_object(
    e: Value,
    dialect: Dialect,
    frame: &[u8],
) -> Result<ErrorObject, ProtocolError> {
    let Value::Object(mut e) = e else {
        return Err(ProtocolError::invalid("error is not an object", frame));
    };
    let code = match e.remove("code") {
        Some(Value::Number(n)) => ErrorCode::Int(
            n.as_i64()
                .ok_or_else(|| ProtocolError::invalid("error code is not an integer", frame))?,
        ),
        Some(Value::String(s)) => ErrorCode::Str(s),
        _ => return Err(ProtocolError::invalid("error has no code", frame)),
    };
    let message = match e.remove("message") {
        Some(Value::String(s)) => s,
        None => String::new(),
        Some(_) => {
            return Err(ProtocolError::invalid(
                "error message is not a string",
                frame,
            ));
        }
    };
    let data = match dialect {
        Dialect::JsonRpc2 => e.remove("data"),
        Dialect::Orchard => e.remove("detail"),
    };
    Ok(ErrorObject {
        code,
        message,
        data,
    })
}

fn error_object_value(e: &ErrorObject, dialect: Dialect) -> Value {
    let mut obj = Map::new();
    obj.insert(
        "code".into(),
        match &e.code {
            ErrorCode::Int(n) => Value::from(*n),
            ErrorCode::Str(s) => Value::from(s.as_str()),
        },
    );
    obj.insert("message".into(), Value::from(e.message.as_str()));
    if let Some(d) = &e.data {
        let key = match dialect {
            Dialect::JsonRpc2 => "data",
            Dialect::Orchard => "detail",
        };
        obj.insert(key.into(), d.clone());
    }
    Value::Object(obj)
}
