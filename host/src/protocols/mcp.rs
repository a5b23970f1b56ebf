//! MCP (Model Context Protocol) over stdio, client side: the host is the MCP client, the
//! plugin an MCP server. `initialize` and `notifications/initialized` on connect, then any
//! request (several may be in flight); shutdown as the spec has it: close the server's stdin,
//! then SIGTERM, then SIGKILL ([`McpClient::shutdown`]).
//!
//! ```text
//!  call(method, params) ──► Driver::request(Client::request) ──► server stdin
//!  Driver<Client>: Response / Initialized ──► the waiting call
//!     Request from the server (sampling, elicitation, roots) ──► answered -32601 by a task:
//!     this client serves none of them; ping is answered by the machine
//!  server gone / broke the protocol ──► Stopped ──► Client::fail_pending ──► every call:
//!                                       -32603 {"reason", "exit", "stderr"}
//! ```
//!
//! The rules live in `sandpipe_proto::mcp::Client`; this module moves bytes and events.

use std::sync::Arc;
use std::time::Duration;

use sandpipe_proto::jsonrpc::{self, ErrorObject, METHOD_NOT_FOUND};
use sandpipe_proto::mcp::{self as proto, ClientEvent, Tool};
use serde_json::{Value, json};

use crate::driver::{Completion, Driver, Refused};
use crate::error::{Exit, Stopped};
use crate::rpc::RpcError;
use crate::session::{Session, SessionControl};

/// How many `tools/list` pages [`McpClient::list_tools`] follows before it stops: a server
/// that hands out cursors forever cannot keep the host listing.
pub const MAX_TOOL_PAGES: usize = 100;

/// A connected MCP server. Calls may run concurrently (`&self`).
#[derive(Debug)]
pub struct McpClient {
    driver: Arc<Driver<proto::Client>>,
}

impl McpClient {
    /// Take over `session`, run the handshake as `client_info` (`{name, version}`) with no
    /// client capabilities, and return the server's `initialize` result.
    pub async fn connect(session: Session, client_info: Value) -> Result<(Self, Value), RpcError> {
        let driver = Arc::new(Driver::new(session, proto::Client::new()));
        // The server's own requests get -32601: this client offers no sampling, elicitation
        // or roots. The task ends with the server.
        let server = driver.clone();
        tokio::spawn(async move {
            while let Some(c) = server.next_event().await {
                if let ClientEvent::Request { id, method, .. } = c.event {
                    let error = ErrorObject::new(
                        METHOD_NOT_FOUND,
                        format!("this client does not serve {method}"),
                    );
                    let _ = server.act(|m| m.respond(id, Err(error)));
                }
            }
        });
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

/// A component's exported functions served as MCP tools (`run --protocol mcp X.wasm` for a
/// component without `wasi:cli/run`): sandpipe is the MCP server, and each `tools/call` is one
/// call of the export on a [`WasmOracle`](crate::wasm_oracle::WasmOracle), with its per-call
/// fuel, deadline and memory cap, and its poisoning or restart after a stop. Names, schemas and
/// the JSON mapping are `sandpipe_proto::mcp::exports`'s.
///
/// ```text
///  tools/list ──► Tools::list(filter)               (functions whose types cannot be called,
///                                                     a resource or a stream, are left out)
///  tools/call {name, arguments} ──► Tools::find ──► ExportTool::arguments ──► WasmOracle::call
///     unknown or filtered name: -32602 "unknown tool: NAME"
///     arguments that do not fit: isError "invalid arguments: …" (the guest is not entered)
///     a stop (trap, fuel, deadline, memory): isError with the reason and stderr tail, as
///       `stopped_tool_result` gives a stdio server's; poisoned afterwards unless restarting
/// ```
#[derive(Debug)]
pub struct ExportTools {
    oracle: crate::wasm_oracle::WasmOracle,
    tools: proto::exports::Tools,
    filter: proto::ToolFilter,
    server_info: Value,
}

impl ExportTools {
    /// Offer `oracle`'s functions as tools, those `filter` permits; `name` is the server's
    /// `serverInfo.name`.
    pub fn new(
        oracle: crate::wasm_oracle::WasmOracle,
        filter: proto::ToolFilter,
        name: &str,
    ) -> Self {
        let sources = oracle
            .functions()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let (Ok(params), Ok(results)) = (&f.params, &f.results) else {
                    tracing::info!("{}: not a tool ({})", f.name, f.signature);
                    return None;
                };
                Some(proto::exports::ToolSource {
                    function: i,
                    full_name: f.name.clone(),
                    signature: f.signature.clone(),
                    params: f.param_names.iter().cloned().zip(params.clone()).collect(),
                    results: results.clone(),
                })
            })
            .collect();
        ExportTools {
            oracle,
            tools: proto::exports::Tools::new(sources),
            filter,
            server_info: json!({"name": name, "version": env!("CARGO_PKG_VERSION")}),
        }
    }

    /// The `tools/list` result.
    pub fn list(&self) -> Value {
        self.tools.list(&self.filter)
    }

    /// Answer a `tools/call` with these params: a tool result (an `isError` one when the tool
    /// failed), or `-32602` for a tool it does not have. A failed call is also returned as its
    /// [`InvokeError`](crate::wasm_oracle::InvokeError), for the caller's log.
    pub async fn call(
        &mut self,
        params: Option<&Value>,
    ) -> (
        Result<Value, ErrorObject>,
        Option<(String, crate::wasm_oracle::InvokeError)>,
    ) {
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            let e = ErrorObject::new(jsonrpc::INVALID_PARAMS, "tools/call needs a tool name");
            return (Err(e), None);
        };
        let tool = match self.tools.find(name) {
            Some(t) if self.filter.permits(&t.name) => t.clone(),
            _ => return (Err(proto::unknown_tool(name)), None),
        };
        let args = match tool.arguments(params.and_then(|p| p.get("arguments"))) {
            Ok(a) => a,
            Err(e) => {
                let text = format!("invalid arguments: {e}");
                return (Ok(proto::exports::tool_error(&text)), None);
            }
        };
        match self.oracle.call(tool.source.function, &args).await {
            Ok(values) => (Ok(tool.result(values)), None),
            Err(error) => {
                let result = match &error {
                    crate::wasm_oracle::InvokeError::Stopped {
                        exit, stderr_tail, ..
                    } => proto::stopped_tool_result(&Stopped::ended(
                        exit.clone(),
                        stderr_tail.clone(),
                    )),
                    other => proto::exports::tool_error(&other.to_string()),
                };
                (Ok(result), Some((tool.name, error)))
            }
        }
    }

    /// Drop the instance, letting its output drain.
    pub async fn close(self) {
        self.oracle.close().await;
    }
}

/// Serve MCP to a client (frames in `from_engine`, frames out to `to_engine`) with `tools`
/// behind it: `initialize` (capabilities: tools), `ping`, `tools/list`, `tools/call`; any other
/// request gets `-32601`. Calls run one at a time, in order; a `notifications/cancelled` for a
/// call is too late by the time it is read. Ends when the client's input ends (MCP's shutdown).
/// `on_incident` hears of each call that failed.
pub async fn serve_exports(
    tools: &mut ExportTools,
    mut from_engine: tokio::sync::mpsc::Receiver<Vec<u8>>,
    to_engine: tokio::sync::mpsc::Sender<Vec<u8>>,
    mut on_incident: impl FnMut(&crate::protocols::oracle::InvokeIncident),
) -> crate::protocols::oracle::ServeReport {
    use proto::ServerEvent;
    let mut server = proto::Server::new();
    let mut report = crate::protocols::oracle::ServeReport {
        invokes: 0,
        failed: 0,
        shut_down: false,
    };
    'frames: loop {
        while let Some(frame) = server.poll_transmit() {
            if to_engine.send(frame).await.is_err() {
                break 'frames;
            }
        }
        let Some(frame) = from_engine.recv().await else {
            break;
        };
        if let Err(e) = server.handle_frame(&frame) {
            // The machine has queued the client's error answer, if the frame deserves one.
            tracing::warn!("mcp: a frame from the client: {e}");
        }
        while let Some(event) = server.poll_event() {
            let (id, answer) = match event {
                ServerEvent::Initialize { id, .. } => {
                    let info = tools.server_info.clone();
                    if let Err(e) = server.respond_initialize(id, json!({"tools": {}}), info) {
                        tracing::warn!("mcp: could not answer initialize: {e}");
                    }
                    continue;
                }
                ServerEvent::Request { id, method, .. } if method == proto::TOOLS_LIST => {
                    (id, Ok(tools.list()))
                }
                ServerEvent::Request { id, method, params } if method == proto::TOOLS_CALL => {
                    report.invokes += 1;
                    let (answer, failed) = tools.call(params.as_ref()).await;
                    if let Some((tool, error)) = failed {
                        report.failed += 1;
                        on_incident(&crate::protocols::oracle::InvokeIncident {
                            request: id.to_string(),
                            selector: tool,
                            error,
                        });
                    }
                    (id, answer)
                }
                ServerEvent::Request { id, method, .. } => {
                    let e =
                        ErrorObject::new(METHOD_NOT_FOUND, format!("method not found: {method}"));
                    (id, Err(e))
                }
                _ => continue,
            };
            if let Err(e) = server.respond(id, answer) {
                tracing::warn!("mcp: could not answer a request: {e}");
            }
        }
    }
    report
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
