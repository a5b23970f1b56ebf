//! MCP's names, revisions and messages: what the client and the server machines exchange.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jsonrpc::{ErrorObject, Id};

/// The newest revision spoken, and what a client asks for.
pub const LATEST_VERSION: &str = "2025-11-25";

/// Every revision spoken through the `initialize` handshake, newest first.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// The stateless revision: no `initialize`, no session; every request carries its revision,
/// client info and capabilities in `params._meta` ([`META_PROTOCOL_VERSION`] and the two
/// beside it), and `server/discover` tells a client what the server speaks.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The request a 2026-07-28 client probes a server with.
pub const DISCOVER: &str = "server/discover";
/// A 2026-07-28 request that stays open: its events are notifications tagged with its id under
/// `_meta["io.modelcontextprotocol/subscriptionId"]`.
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// The `params._meta` key naming a 2026-07-28 request's revision.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `params._meta` key holding a 2026-07-28 request's client info.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The `params._meta` key holding a 2026-07-28 request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The result `_meta` key holding a 2026-07-28 server's info.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The JSON-RPC error a 2026-07-28 server answers a revision it does not speak with; its
/// `data.supported` lists the ones it does.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Which of the two eras a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Revision {
    /// 2025-11-25 or 2025-06-18: the `initialize` handshake, then a session.
    Handshake,
    /// 2026-07-28: stateless requests, each with its `_meta` envelope; results carry
    /// `resultType`.
    Modern,
}

/// The request that starts a session.
pub const INITIALIZE: &str = "initialize";
/// The notification that ends the handshake.
pub const INITIALIZED: &str = "notifications/initialized";
/// `tools/list`.
pub const TOOLS_LIST: &str = "tools/list";
/// `tools/call`.
pub const TOOLS_CALL: &str = "tools/call";
/// Either side's liveness check, answered `{}`.
pub const PING: &str = "ping";
/// A request the sender gave up on.
pub const CANCELLED: &str = "notifications/cancelled";
/// Progress of a request made with `_meta.progressToken`.
pub const PROGRESS: &str = "notifications/progress";

/// A listed tool: its name and input schema typed, the rest (`title`, `outputSchema`,
/// `annotations`, …) kept as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The name `tools/call` takes.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema of its arguments.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// Every other member.
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

/// One page of `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListToolsResult {
    /// The tools.
    pub tools: Vec<Tool>,
    /// The cursor of the next page.
    #[serde(
        rename = "nextCursor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_cursor: Option<String>,
}

/// A progress notification, as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The request's `_meta.progressToken` (a string or a number).
    pub token: Value,
    /// How far (increases with each notification).
    pub progress: f64,
    /// Out of how much, if known.
    pub total: Option<f64>,
    /// A line for a person.
    pub message: Option<String>,
}

/// Where the client's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientState {
    /// Nothing sent yet (or `initialize` failed).
    Start,
    /// `initialize` sent, not answered.
    Initializing,
    /// `initialize` answered; send `notifications/initialized` next.
    Initialized,
    /// Requests may be made.
    Ready,
    /// The server is gone ([`Client::fail_pending`]).
    Closed,
}

impl ClientState {
    pub(super) fn name(self) -> &'static str {
        match self {
            ClientState::Start => "not initialized",
            ClientState::Initializing => "waiting for the initialize result",
            ClientState::Initialized => "initialized but not yet notified",
            ClientState::Ready => "ready",
            ClientState::Closed => "closed",
        }
    }
}

/// What the client learns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// `initialize` was answered: the server's result (its `protocolVersion` one the client
    /// speaks), or the error.
    Initialized {
        /// The request's id.
        id: Id,
        /// `{protocolVersion, capabilities, serverInfo, instructions?}` as sent.
        result: Result<Value, ErrorObject>,
    },
    /// A request completed.
    Response {
        /// Its id.
        id: Id,
        /// Its method.
        method: String,
        /// The result as sent, or the error.
        result: Result<Value, ErrorObject>,
    },
    /// Progress of a request in flight.
    Progress {
        /// The request the token belongs to, when it is one of ours.
        id: Option<Id>,
        /// The notification.
        progress: Progress,
    },
    /// The server asks something (sampling, elicitation, roots, …): answer with
    /// [`Client::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Its params, as sent.
        params: Option<Value>,
    },
    /// Any other notification (logging, list changed, resource updated, …).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
}

/// Where the server's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerState {
    /// Waiting for `initialize`.
    Start,
    /// `initialize` received, not yet answered.
    Initializing,
    /// Serving.
    Running,
}

/// What the server is asked or told.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// `initialize`: answer with [`Server::respond_initialize`].
    Initialize {
        /// The request's id.
        id: Id,
        /// Its params, as sent.
        params: Value,
    },
    /// `notifications/initialized`.
    Initialized,
    /// `server/discover` (2026-07-28): answer with [`Server::respond_discover`].
    Discover {
        /// The request's id.
        id: Id,
        /// Its params, as sent (the envelope under `_meta`).
        params: Value,
    },
    /// A request (`tools/call`, `resources/read`, …): answer with [`Server::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Its params, as sent.
        params: Option<Value>,
    },
    /// `notifications/cancelled` for a request not yet answered: do not answer it.
    Cancelled {
        /// The request.
        id: Id,
    },
    /// Any other notification.
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// The client answered one of the server's requests (sampling, elicitation, roots).
    Response {
        /// The request's id.
        id: Id,
        /// Its method.
        method: String,
        /// The answer.
        result: Result<Value, ErrorObject>,
    },
}
