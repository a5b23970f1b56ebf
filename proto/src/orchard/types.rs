//! The Orchard messages: the provider schema, error codes and types, the methods, and the
//! events each machine reports.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use super::PROTOCOL_VERSION;
use crate::jsonrpc::{ErrorCode, ErrorObject, Id, ProtocolError};
use crate::stopped::Stopped;

/// The well-known error codes. Providers may send others; Orchard treats those as generic
/// failures.
pub mod codes {
    /// The request is malformed or cannot be decoded.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// The provider does not recognize the method.
    pub const UNKNOWN_METHOD: &str = "unknown_method";
    /// `execute` named an action that is not in the schema.
    pub const UNKNOWN_ACTION: &str = "unknown_action";
    /// Action attributes failed the provider's validation.
    pub const VALIDATION_FAILED: &str = "validation_failed";
    /// `configure` failed.
    pub const CONFIGURE_FAILED: &str = "configure_failed";
    /// `execute` failed while running the action.
    pub const EXECUTE_FAILED: &str = "execute_failed";
    /// A provider-side bug or unexpected condition.
    pub const INTERNAL_ERROR: &str = "internal_error";
}

/// What a provider declares about itself: the answer to `describe` and the output of
/// `<binary> schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderSchema {
    /// The provider's name.
    pub name: String,
    /// The protocol version; must be [`PROTOCOL_VERSION`].
    pub protocol: String,
    /// The actions `execute` accepts, by name (sorted, like Go's map encoding). Read from
    /// an object keyed by name or from a list of objects with a `name` member; written as an
    /// object.
    #[serde(default, deserialize_with = "actions_map_or_list")]
    pub actions: BTreeMap<String, ActionSchema>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ProviderSchema {
    /// A schema for protocol [`PROTOCOL_VERSION`] with no actions.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            protocol: PROTOCOL_VERSION.to_owned(),
            actions: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// Add an action.
    pub fn with_action(mut self, name: impl Into<String>, action: ActionSchema) -> Self {
        self.actions.insert(name.into(), action);
        self
    }

    /// [`ProtocolError::BadPayload`] unless `protocol` is [`PROTOCOL_VERSION`].
    pub fn check_protocol(&self) -> Result<(), ProtocolError> {
        if self.protocol == PROTOCOL_VERSION {
            return Ok(());
        }
        Err(ProtocolError::BadPayload {
            what: "schema.protocol",
            reason: format!("expected {PROTOCOL_VERSION:?}, got {:?}", self.protocol),
        })
    }
}

fn actions_map_or_list<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ActionSchema>, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Actions {
        Map(BTreeMap<String, ActionSchema>),
        List(Vec<Map<String, Value>>),
    }
    match Actions::deserialize(d)? {
        Actions::Map(m) => Ok(m),
        Actions::List(list) => {
            let mut out = BTreeMap::new();
            for mut item in list {
                let Some(Value::String(name)) = item.remove("name") else {
                    return Err(D::Error::custom("an action in the list has no string name"));
                };
                let action =
                    serde_json::from_value(Value::Object(item)).map_err(D::Error::custom)?;
                if out.insert(name.clone(), action).is_some() {
                    return Err(D::Error::custom(format!("action {name:?} is listed twice")));
                }
            }
            Ok(out)
        }
    }
}

/// One action of a [`ProviderSchema`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionSchema {
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its attributes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, AttributeSchema>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ActionSchema {
    /// An action with a description and no attributes.
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            description: Some(description.into()),
            ..Self::default()
        }
    }

    /// Add an attribute.
    pub fn with_attribute(mut self, name: impl Into<String>, attr: AttributeSchema) -> Self {
        self.attributes.insert(name.into(), attr);
        self
    }
}

/// One attribute of an [`ActionSchema`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributeSchema {
    /// Its type, as the provider names it (`"string"`, `"list(number)"`, …).
    #[serde(rename = "type")]
    pub ty: String,
    /// Whether `execute` must carry it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AttributeSchema {
    /// An attribute of type `ty`.
    pub fn new(ty: impl Into<String>, required: bool) -> Self {
        Self {
            ty: ty.into(),
            required,
            description: None,
            extra: Map::new(),
        }
    }
}

/// An Orchard error object `{code, message, detail?}`, as a provider reports it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{code}: {message}")]
pub struct ProviderError {
    /// A well-known code from [`codes`] or a provider-specific one.
    pub code: String,
    /// A short human-readable message.
    pub message: String,
    /// A longer detail string.
    pub detail: Option<String>,
}

impl ProviderError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            detail: None,
        }
    }

    /// Attach a detail string.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// `validation_failed`.
    pub fn validation_failed(message: impl Into<String>) -> Self {
        Self::new(codes::VALIDATION_FAILED, message)
    }

    /// `configure_failed`.
    pub fn configure_failed(message: impl Into<String>) -> Self {
        Self::new(codes::CONFIGURE_FAILED, message)
    }

    /// `execute_failed`.
    pub fn execute_failed(message: impl Into<String>) -> Self {
        Self::new(codes::EXECUTE_FAILED, message)
    }

    /// `internal_error`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }
}

impl From<ProviderError> for ErrorObject {
    fn from(e: ProviderError) -> Self {
        ErrorObject {
            code: ErrorCode::Str(e.code),
            message: e.message,
            data: e.detail.map(Value::String),
        }
    }
}

impl From<ErrorObject> for ProviderError {
    /// Lenient: an integer code becomes its decimal text, a non-string detail its JSON text.
    fn from(e: ErrorObject) -> Self {
        ProviderError {
            code: match e.code {
                ErrorCode::Str(s) => s,
                ErrorCode::Int(n) => n.to_string(),
            },
            message: e.message,
            detail: e.data.map(|d| match d {
                Value::String(s) => s,
                other => other.to_string(),
            }),
        }
    }
}

/// The four methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `describe`.
    Describe,
    /// `configure`.
    Configure,
    /// `execute`.
    Execute,
    /// `shutdown`.
    Shutdown,
}

impl Method {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Describe => "describe",
            Method::Configure => "configure",
            Method::Execute => "execute",
            Method::Shutdown => "shutdown",
        }
    }

    /// The method named `name`, if it is one of the four.
    pub fn from_name(name: &str) -> Option<Method> {
        match name {
            "describe" => Some(Method::Describe),
            "configure" => Some(Method::Configure),
            "execute" => Some(Method::Execute),
            "shutdown" => Some(Method::Shutdown),
            _ => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to a call the provider will never answer: `execute_failed` for an `execute`,
/// `internal_error` otherwise (and when the method is not known), the reason as message and
/// the stderr tail, joined with newlines, as detail.
pub fn stopped_error(method: Option<Method>, stopped: &Stopped) -> ProviderError {
    let code = match method {
        Some(Method::Execute) => codes::EXECUTE_FAILED,
        _ => codes::INTERNAL_ERROR,
    };
    ProviderError::new(code, stopped.reason.clone()).with_detail(stopped.stderr_tail.join("\n"))
}

/// Why a call did not produce its result.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CallError {
    /// The provider answered with an error object (or
    /// [`Client::fail_pending`](super::Client::fail_pending) made one).
    #[error("provider error {0}")]
    Provider(ProviderError),
    /// No answer before the deadline (see
    /// [`Client::handle_timeout`](super::Client::handle_timeout)).
    #[error("{method} not answered within {timeout:?}")]
    TimedOut {
        /// The method.
        method: Method,
        /// The time allowed.
        timeout: Duration,
    },
    /// The answer does not fit the protocol; [`Client::handle_frame`](super::Client::handle_frame)
    /// returned the same error.
    #[error("{0}")]
    Protocol(ProtocolError),
}

/// A completed call, in the order the answers arrived.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// `describe` finished; on success the schema's protocol is [`PROTOCOL_VERSION`].
    Described {
        /// The request id.
        id: Id,
        /// The schema.
        result: Result<ProviderSchema, CallError>,
    },
    /// `configure` finished.
    Configured {
        /// The request id.
        id: Id,
        /// `Ok` when the provider accepted the config.
        result: Result<(), CallError>,
    },
    /// An `execute` finished.
    Executed {
        /// The request id.
        id: Id,
        /// The action that was executed.
        action: String,
        /// The `outputs` member of the result.
        result: Result<Value, CallError>,
    },
    /// `shutdown` finished; the client is closed.
    ShutDown {
        /// The request id.
        id: Id,
        /// `Ok` when the provider acknowledged it.
        result: Result<(), CallError>,
    },
}

/// A request the provider must answer (with the matching `respond_*` call).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Answer with [`Server::respond_describe`](super::Server::respond_describe).
    Describe {
        /// The request id.
        id: Id,
    },
    /// Answer with [`Server::respond_configure`](super::Server::respond_configure).
    Configure {
        /// The request id.
        id: Id,
        /// `params.config` (`{}` when absent).
        config: Value,
    },
    /// Answer with [`Server::respond_execute`](super::Server::respond_execute).
    Execute {
        /// The request id.
        id: Id,
        /// `params.action`.
        action: String,
        /// `params.attrs` (`{}` when absent).
        attrs: Value,
    },
    /// Answer with [`Server::respond_shutdown`](super::Server::respond_shutdown), then stop.
    Shutdown {
        /// The request id.
        id: Id,
    },
}
