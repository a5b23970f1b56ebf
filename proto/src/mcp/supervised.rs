//! MCP under the supervisor (`crate::supervise`): which frames are handshake and requests, the
//! answers sandpipe gives itself (a request the server will never answer, a tool the filter
//! hides), and the tool filter.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{CANCELLED, INITIALIZE, INITIALIZED, TOOLS_CALL, TOOLS_LIST};
use crate::jsonrpc::{Dialect, ErrorObject, INVALID_PARAMS, Message};
use crate::stopped::Stopped;
use crate::supervise::{FromEngine, FromPlugin, SupervisedProtocol};

/// The answer to a request the server will never answer: `-32603`, the reason as message,
/// `data: {"reason", "exit", "stderr"}` ([`jsonrpc::stopped_error`](crate::jsonrpc::stopped_error)).
pub fn stopped_error(stopped: &Stopped) -> ErrorObject {
    crate::jsonrpc::stopped_error(Dialect::JsonRpc2, stopped)
}

/// The result a `tools/call` the server will never answer gets (see the module docs for why a
/// result and not an error): one text item with the reason and the stderr tail, `isError: true`,
/// and [`Stopped::to_json`] under `_meta.sandpipe`.
pub fn stopped_tool_result(stopped: &Stopped) -> Value {
    json!({
        "content": [{"type": "text", "text": stopped.message_with_tail()}],
        "isError": true,
        "_meta": {"sandpipe": stopped.to_json()},
    })
}

/// The `-32602` a `tools/call` of a tool the filter hides gets.
pub fn unknown_tool(name: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("unknown tool: {name}"))
}

/// Which tools an engine may see and call: every tool, unless `allow` names some (then only
/// those), minus those `deny` names. Names match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// When not empty, only these.
    pub allow: Vec<String>,
    /// Never these.
    pub deny: Vec<String>,
}

impl ToolFilter {
    /// Whether the filter lets `name` through.
    pub fn permits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|a| a == name))
            && !self.deny.iter().any(|d| d == name)
    }

    /// True when it hides nothing.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// A `tools/list` result with the hidden tools removed; `None` when nothing was removed
    /// (or the result is not a tool list), so the server's bytes pass on unchanged.
    pub fn filter_list(&self, result: &mut Value) -> bool {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return false;
        };
        let before = tools.len();
        tools.retain(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| self.permits(n))
        });
        tools.len() != before
    }
}

/// MCP under the supervisor (`crate::supervise`): `initialize` and `notifications/initialized`
/// are the handshake replayed to a fresh instance; every other request is budgeted (a
/// cancelled one is no longer pending); `filter` hides tools.
#[derive(Debug, Clone, Default)]
pub struct Supervised {
    /// The tools the engine may see and call.
    pub filter: ToolFilter,
}

/// The members of an engine frame the filter and the cancellation need.
#[derive(Deserialize)]
struct EngineHead {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<EngineParams>,
}

#[derive(Deserialize)]
struct EngineParams {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

impl SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> FromEngine {
        let class = crate::supervise::classify_jsonrpc_engine(frame, &[INITIALIZE, INITIALIZED]);
        if class == FromEngine::Other
            && let Ok(head) = serde_json::from_slice::<EngineHead>(frame)
            && head.method.as_deref() == Some(CANCELLED)
            && let Some(id) = head.params.and_then(|p| p.request_id)
        {
            return FromEngine::Cancelled {
                key: crate::supervise::key_of(&id),
            };
        }
        class
    }
    fn classify_plugin(&self, frame: &[u8]) -> FromPlugin {
        crate::supervise::classify_jsonrpc_plugin(frame, &[])
    }
    fn engine_speaks_first(&self) -> bool {
        true
    }
    fn stopped_answer(&self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        if method == Some(TOOLS_CALL) {
            let id = crate::supervise::id_of(key);
            return Message::response(id, Ok(stopped_tool_result(stopped)))
                .encode(Dialect::JsonRpc2);
        }
        crate::supervise::jsonrpc_error_answer(key, Dialect::JsonRpc2, stopped_error(stopped))
    }
    fn answer_engine(&self, frame: &[u8]) -> Option<Vec<u8>> {
        if self.filter.is_open() {
            return None;
        }
        let head: EngineHead = serde_json::from_slice(frame).ok()?;
        let id = head.id?;
        if head.method.as_deref() != Some(TOOLS_CALL) {
            return None;
        }
        // A call without a string name is the server's to refuse.
        let name = head.params?.name?;
        let name = name.as_str()?;
        if self.filter.permits(name) {
            return None;
        }
        let id = crate::supervise::id_of(&crate::supervise::key_of(&id));
        Some(Message::response(id, Err(unknown_tool(name))).encode(Dialect::JsonRpc2))
    }
    fn refused_name(&self, frame: &[u8]) -> Option<String> {
        let head: EngineHead = serde_json::from_slice(frame).ok()?;
        Some(head.params?.name?.as_str()?.to_owned())
    }
    fn rewrite_answer(&self, method: Option<&str>, frame: &[u8]) -> Option<Vec<u8>> {
        if self.filter.is_open() || method != Some(TOOLS_LIST) {
            return None;
        }
        let mut v: Value = serde_json::from_slice(frame).ok()?;
        if !self.filter.filter_list(v.get_mut("result")?) {
            return None;
        }
        serde_json::to_vec(&v).ok()
    }
}
