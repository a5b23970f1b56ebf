//! The oracle messages: felts, `invoke` params, the oracle error, and the events each
//! machine reports.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use thiserror::Error;

use super::{DIALECT, FELT_MAX_DIGITS};
use crate::jsonrpc::{ErrorCode, ErrorObject, Id};
use crate::stopped::Stopped;

/// Why a string is not a felt.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FeltError {
    /// It does not start with `0x`.
    #[error("felt {got:?} does not start with 0x")]
    MissingPrefix {
        /// The text (at most 80 characters of it).
        got: String,
    },
    /// Nothing follows `0x`.
    #[error("felt has no digits after 0x")]
    NoDigits,
    /// A character that is not a lowercase hex digit.
    #[error("felt {got:?} has {bad:?} at {index}, expected a lowercase hex digit")]
    BadDigit {
        /// The text (at most 80 characters of it).
        got: String,
        /// The offending character.
        bad: char,
        /// Its byte offset.
        index: usize,
    },
    /// A leading zero (only `0x0` itself may start with 0).
    #[error("felt {got:?} has a leading zero")]
    LeadingZero {
        /// The text (at most 80 characters of it).
        got: String,
    },
    /// The value is not below the Stark prime.
    #[error(
        "felt of {digits} hex digits is not below the field prime (at most 63 digits, below 0x800000000000011 followed by 48 zeros plus one)"
    )]
    OutOfRange {
        /// How many hex digits it had.
        digits: usize,
    },
}

/// One Cairo felt252 in its canonical JSON form: lowercase hex with a `0x` prefix and no
/// leading zeros (`0x0` for zero), below the field prime.
///
/// The only ways to build one validate it, so every `Felt` encodes to a valid string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Felt(String);

impl Felt {
    /// Zero.
    pub fn zero() -> Self {
        Felt("0x0".to_owned())
    }

    /// Parse the canonical form; nothing else is accepted.
    pub fn parse(s: &str) -> Result<Self, FeltError> {
        let short = || s.chars().take(80).collect::<String>();
        let digits = s
            .strip_prefix("0x")
            .ok_or_else(|| FeltError::MissingPrefix { got: short() })?;
        if digits.is_empty() {
            return Err(FeltError::NoDigits);
        }
        if let Some((i, bad)) = digits
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(FeltError::BadDigit {
                got: short(),
                bad,
                index: i + 2,
            });
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(FeltError::LeadingZero { got: short() });
        }
        // Same length and only lowercase hex digits: string order is numeric order.
        if digits.len() > FELT_MAX_DIGITS.len()
            || (digits.len() == FELT_MAX_DIGITS.len() && digits > FELT_MAX_DIGITS)
        {
            return Err(FeltError::OutOfRange {
                digits: digits.len(),
            });
        }
        Ok(Felt(s.to_owned()))
    }

    /// The canonical text, `0x…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value if it fits in 128 bits.
    pub fn to_u128(&self) -> Option<u128> {
        u128::from_str_radix(&self.0[2..], 16).ok()
    }

    /// The value as 32 big-endian bytes.
    pub fn to_be_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        // A valid felt has at most 63 hex digits: fill from the right, two digits a byte.
        let digits = &self.0.as_bytes()[2..];
        for (i, d) in digits.iter().rev().enumerate() {
            let v = match d {
                b'0'..=b'9' => d - b'0',
                _ => d - b'a' + 10,
            };
            out[31 - i / 2] |= if i % 2 == 0 { v } else { v << 4 };
        }
        out
    }

    /// The felt with this big-endian value, if it is below the field prime.
    pub fn from_be_bytes(bytes: &[u8; 32]) -> Result<Self, FeltError> {
        let mut text = String::with_capacity(66);
        text.push_str("0x");
        for b in bytes {
            text.push_str(&format!("{b:02x}"));
        }
        let trimmed = text[2..].trim_start_matches('0');
        let canonical = if trimmed.is_empty() {
            "0x0".to_owned()
        } else {
            format!("0x{trimmed}")
        };
        Felt::parse(&canonical)
    }
}

impl From<u128> for Felt {
    fn from(n: u128) -> Self {
        Felt(format!("{n:#x}"))
    }
}

impl std::str::FromStr for Felt {
    type Err = FeltError;
    fn from_str(s: &str) -> Result<Self, FeltError> {
        Felt::parse(s)
    }
}

impl fmt::Display for Felt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Felt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Felt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Felt::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Parse a JSON array of felts, naming the first bad element.
pub fn felts_from_value(v: &Value) -> Result<Vec<Felt>, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array of felts, got {}", kind(v)));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Felt::parse(s).map_err(|e| format!("element {i}: {e}")),
            other => Err(format!(
                "element {i}: expected a string, got {}",
                kind(other)
            )),
        })
        .collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The params of an `invoke` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvokeParams {
    /// Which oracle function to call.
    pub selector: String,
    /// Its arguments, as serialized by Cairo Serde.
    pub calldata: Vec<Felt>,
}

impl InvokeParams {
    pub(super) fn from_value(params: Option<Value>) -> Result<Self, String> {
        let Some(Value::Object(mut obj)) = params else {
            return Err("params must be an object with selector and calldata".to_owned());
        };
        let selector = match obj.remove("selector") {
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(format!("selector: expected a string, got {}", kind(&other)));
            }
            None => return Err("missing selector".to_owned()),
        };
        let calldata = match obj.remove("calldata") {
            Some(v) => felts_from_value(&v).map_err(|e| format!("calldata: {e}"))?,
            None => return Err("missing calldata".to_owned()),
        };
        Ok(InvokeParams { selector, calldata })
    }
}

/// Who produced an [`OracleError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorOrigin {
    /// The plugin answered the invoke with a JSON-RPC error.
    Plugin,
    /// The plugin answered with a result that is not an array of valid felts.
    BadResult,
    /// The host gave up: the process failed
    /// ([`OracleClient::fail_pending`](super::OracleClient::fail_pending)) or was shut down.
    Host,
}

/// A failed invoke, as the Cairo program sees it: a value, not a crash.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("oracle error {code}: {message}")]
pub struct OracleError {
    /// Who produced it.
    pub origin: ErrorOrigin,
    /// The JSON-RPC code (the plugin's, or `-32603` for host-made errors).
    pub code: ErrorCode,
    /// The message.
    pub message: String,
    /// JSON-RPC `data`; for host-made errors `{"reason", "exit", "stderr"}`
    /// ([`stopped_error`]).
    pub data: Option<Value>,
    /// Why the plugin will never answer, when that is what this error says ([`stopped_error`]).
    pub stopped: Option<Stopped>,
}

impl OracleError {
    pub(super) fn from_plugin(e: ErrorObject) -> Self {
        OracleError {
            origin: ErrorOrigin::Plugin,
            code: e.code,
            message: e.message,
            data: e.data,
            stopped: None,
        }
    }

    pub(super) fn local(origin: ErrorOrigin, message: String, data: Value) -> Self {
        OracleError {
            origin,
            code: DIALECT.internal_error(),
            message,
            data: Some(data),
            stopped: None,
        }
    }

    /// The JSON-RPC error object (for logs or for forwarding).
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject {
            code: self.code.clone(),
            message: self.message.clone(),
            data: self.data.clone(),
        }
    }
}

/// The answer to an invoke the plugin will never answer: a host-made [`OracleError`]
/// (`-32603`), message `oracle failed: REASON`, data [`Stopped::to_json`].
pub fn stopped_error(stopped: &Stopped) -> OracleError {
    OracleError {
        stopped: Some(stopped.clone()),
        ..OracleError::local(
            ErrorOrigin::Host,
            format!("oracle failed: {}", stopped.reason),
            stopped.to_json(),
        )
    }
}

/// What happened on the host side.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "events are built once and moved a few times; boxing would burden every match"
)]
pub enum ClientEvent {
    /// The plugin sent `ready`; the ack is queued and invokes may follow.
    Ready,
    /// An invoke completed.
    Invoked {
        /// The request id.
        id: Id,
        /// The selector it called.
        selector: String,
        /// The felts, or the oracle error the Cairo program receives.
        result: Result<Vec<Felt>, OracleError>,
    },
}

/// What happened on the plugin side.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// The host acknowledged `ready`.
    Ready,
    /// Answer with [`OracleServer::respond`](super::OracleServer::respond) before anything else
    /// arrives.
    Invoke {
        /// The request id.
        id: Id,
        /// Which function.
        selector: String,
        /// Its arguments.
        calldata: Vec<Felt>,
    },
    /// The host asked the plugin to exit.
    Shutdown,
    /// The host answered `ready` with an error: the plugin must terminate.
    Rejected {
        /// The host's error.
        error: ErrorObject,
    },
}
