//! MCP (Model Context Protocol) over stdio, client side: the host is the MCP client, the
//! plugin an MCP server. `initialize` and `notifications/initialized` on connect, then any
//! request (several may be in flight); shutdown as the spec has it: close the server's stdin,
//! then SIGTERM, then SIGKILL ([`McpClient::shutdown`]).
//!
//! ```text
//!  call(method, params) ──► Driver::request(Client::request) ──► server stdin
//!  Driver<Client>: Response / Initialized ──► the waiting call
//!     Request from the server (sampling, elicitation, roots) ──► the driver's handler
//!     (Unasked): -32601, this client serves none of them; ping is answered by the machine
//!  server gone / broke the protocol ──► Stopped ──► Client::fail_pending ──► every call:
//!                                       -32603 {"reason", "exit", "stderr"}
//! ```
//!
//! The rules live in `sandpipe_proto::mcp::Client`; this module moves bytes and events.

use std::time::Duration;

use sandpipe_proto::jsonrpc;
use sandpipe_proto::mcp::{self as proto, ClientEvent, Tool};
use serde_json::{Value, json};

use crate::driver::{Completion, Driver, Refused, Unasked};
use crate::error::{Exit, Stopped};
use crate::protocols::jsonrpc::RpcError;
use crate::session::{Session, SessionControl};

/// How many `tools/list` pages [`McpClient::list_tools`] follows before it stops: a server
/// that hands out cursors forever cannot keep the host listing.
pub const MAX_TOOL_PAGES: usize = 100;

/// A connected MCP server. Calls may run concurrently (`&self`).
#[derive(Debug)]
pub struct McpClient {
    driver: Driver<proto::Client>,
}

impl McpClient {
    /// Take over `session`, run the handshake as `client_info` (`{name, version}`) with no
    /// client capabilities, and return the server's `initialize` result.
    pub async fn connect(session: Session, client_info: Value) -> Result<(Self, Value), RpcError> {
        // The server's own requests get -32601: this client offers no sampling, elicitation
        // or roots.
        let driver = Driver::serving(session, proto::Client::new(), Unasked);
        let client = McpClient { driver };
        let init = client
            .wait(|m| m.initialize(client_info, json!({})))
            .await?;
        client
            .driver
            .act(proto::Client::initialized)
            .map_err(RpcError::Refused)?;
        Ok((client, init))
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Any request by method with JSON params; its result as JSON.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        self.wait(|m| m.request(method, params)).await
    }

    /// Every tool, following `nextCursor` up to [`MAX_TOOL_PAGES`] pages.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, RpcError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let page = self.wait(|m| m.list_tools(cursor.as_deref())).await?;
            let page: proto::ListToolsResult =
                serde_json::from_value(page).map_err(|e| RpcError::BadResult {
                    method: proto::TOOLS_LIST.into(),
                    reason: e.to_string(),
                })?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(RpcError::BadResult {
            method: proto::TOOLS_LIST.into(),
            reason: format!("more than {MAX_TOOL_PAGES} pages of tools"),
        })
    }

    /// `tools/call`: the tool's result as sent (`{content, structuredContent?, isError?}`).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, RpcError> {
        self.wait(|m| m.call_tool(name, arguments, None)).await
    }

    /// Shut the server down as the spec says: close its stdin, give it `grace` to exit, then
    /// SIGTERM (native), then kill.
    pub async fn shutdown(self, grace: Duration) -> Exit {
        self.driver.shutdown(grace).await
    }

    async fn wait(
        &self,
        make: impl FnOnce(&mut proto::Client) -> Result<jsonrpc::Id, jsonrpc::ProtocolError>,
    ) -> Result<Value, RpcError> {
        let pending = self.driver.request(make).map_err(refused)?;
        finish(pending.wait().await)
    }
}

/// A dropped client never leaves the server running (the task answering the server's requests
/// holds the driver until the server ends).
impl Drop for McpClient {
    fn drop(&mut self) {
        self.driver.control().kill();
    }
}

fn finish(c: Result<Completion<ClientEvent>, Stopped>) -> Result<Value, RpcError> {
    let c = c.map_err(stopped)?;
    let result = match c.event {
        ClientEvent::Initialized { result, .. } | ClientEvent::Response { result, .. } => result,
        _ => unreachable!("only responses complete requests"),
    };
    RpcError::from_answer(result, c.stopped)
}

fn stopped(s: Stopped) -> RpcError {
    RpcError::Failed {
        error: proto::stopped_error(&s),
        stopped: s,
    }
}

fn refused(r: Refused<jsonrpc::ProtocolError>) -> RpcError {
    match r {
        Refused::Stopped(s) => stopped(s),
        Refused::Machine(e) => RpcError::Refused(e),
    }
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).
use crate::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch, client_info,
};

/// `sandpipe call --protocol mcp`: the handshake, METHOD (`tools/call`, `tools/list`,
/// `resources/read`, …) with PARAMS, then the spec's shutdown. A tool's own failure
/// (`isError: true`) is the plugin's error, with its result as the answer.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let session = launch.start().await.map_err(CallError::Start)?;
    let (client, _init) = McpClient::connect(session, client_info())
        .await
        .map_err(|e| e.call_error("mcp"))?;
    let result = client.call(&request.method, request.params).await;
    let _ = client.shutdown(request.grace).await;
    match result {
        Ok(v) if request.method == proto::TOOLS_CALL && v.get("isError") == Some(&json!(true)) => {
            Err(CallError::Failed {
                lines: Vec::new(),
                failure: Failure::Plugin,
                answer: Some(v),
            })
        }
        Ok(v) => Ok(v),
        Err(e) => Err(e.call_error("mcp")),
    }
}

/// `sandpipe inspect --protocol mcp`: the `initialize` result and every tool.
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let session = launch.start().await?;
    let (client, init) = McpClient::connect(session, client_info())
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let tools = client.list_tools().await;
    let _ = client.shutdown(DESCRIBE_GRACE).await;
    tools
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::to_value(t).map_err(|e| e.to_string()))
        .map(|tools| json!({"initialize": init, "tools": tools}))
        .map_err(DescribeError::Failed)
}
