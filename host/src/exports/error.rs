//! The error of a call into a component's exported functions, shared by the library API
//! ([`WasmOracle`](super::oracle::WasmOracle)) and the servers of [`session`](super::session)
//! alike.

use sandpipe_proto::component::{CodecError, SelectorError};
use serde_json::{Value as Json, json};
use thiserror::Error;

use crate::error::Stopped;

/// Why an invoke gave no felts. Its `Display` is the message the engine gets.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum InvokeError {
    /// The selector names no function, or several.
    #[error("{0}")]
    Selector(#[from] SelectorError),
    /// The calldata does not fit the function's parameters, a type is unsupported, or the
    /// results could not be encoded. The guest was not entered (or, for results, returned).
    #[error("{0}")]
    Codec(#[from] CodecError),
    /// The call stopped the instance: the one [`Stopped`] every plugin's stop is described
    /// by (its reason the exit's own words, its `exit` set, the guest's last stderr lines).
    /// Its message is Scarb's: the reason, then the stderr tail.
    #[error("{}", stopped.message_with_tail())]
    Stopped {
        /// How it stopped, and the stderr tail.
        stopped: Stopped,
        /// Whether the next call gets a fresh instance.
        restarting: bool,
    },
    /// An earlier call stopped the instance and [`AfterTrap::Poison`](super::oracle::AfterTrap::Poison) is in force.
    #[error("the oracle instance is poisoned by an earlier failure: {cause}")]
    Poisoned {
        /// The earlier failure's message.
        cause: String,
    },
    /// A fresh instance could not be started.
    #[error("restarting the oracle: {message}")]
    Restart {
        /// Why.
        message: String,
    },
}

impl InvokeError {
    /// JSON-RPC `data` for the engine: `{"reason", "exit", "stderr"}` for a stop.
    pub fn data(&self) -> Json {
        match self {
            InvokeError::Stopped { stopped, .. } => stopped.to_json(),
            other => json!({ "reason": other.to_string() }),
        }
    }
}
