//! MCP (Model Context Protocol) over stdio, client side: the host is the MCP client, the
//! plugin an MCP server. On connect, the official SDK's probe: `server/discover` at 2026-07-28,
//! and `initialize` with `notifications/initialized` when the server does not speak it (the
//! proto machine falls back by itself); then any request (several may be in flight);
//! shutdown as the spec has it: close the server's stdin, then SIGTERM, then SIGKILL
//! ([`McpClient::shutdown`]).
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
use sandpipe_proto::mcp::exports as tools;
use sandpipe_proto::mcp::{self as proto, ClientEvent, Tool};
use serde_json::{Value, json};

use crate::error::{Exit, Stopped};
use crate::exports::session::{Exports, ExportsServer};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, Refused, Unasked};
use crate::speak::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch, client_info,
};
use crate::speak::protocols::jsonrpc::RpcError;
use crate::{ExportedFunc, Plugin};

/// How many `tools/list` pages [`McpClient::list_tools`] follows before it stops: a server
/// that hands out cursors forever cannot keep the host listing.
pub const MAX_TOOL_PAGES: usize = 100;

/// How long the `server/discover` probe waits before taking the server for one of the
/// handshake revisions, as the official SDK's client does.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected MCP server. Calls may run concurrently (`&self`).
#[derive(Debug)]
pub struct McpClient {
    driver: Driver<proto::Client>,
    revision: proto::Revision,
}

impl McpClient {
    /// Take over `session`, connect as `client_info` (`{name, version}`) with no client
    /// capabilities (the probe, then the handshake if the server wants it), and return the
    /// server's `server/discover` or `initialize` result ([`McpClient::revision`] says which).
    pub async fn connect(session: Session, client_info: Value) -> Result<(Self, Value), RpcError> {
        // The server's own requests get -32601: this client offers no sampling, elicitation
        // or roots.
        let driver = Driver::serving(session, proto::Client::new(), Unasked);
        let deadline = crate::speak::driver::now() + PROBE_TIMEOUT;
        let init = finish(
            driver
                .request(|m| m.discover(client_info, json!({}), Some(deadline)))
                .map_err(refused)?
                .wait()
                .await,
        )?;
        let revision = driver
            .act(|m| {
                m.initialized()?;
                Ok(m.revision())
            })
            .map_err(RpcError::Refused)?
            .unwrap_or(proto::Revision::Handshake);
        Ok((McpClient { driver, revision }, init))
    }

    /// The revision the session speaks.
    pub fn revision(&self) -> proto::Revision {
        self.revision
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

/// `sandpipe call --protocol mcp`: the probe or the handshake, METHOD (`tools/call`,
/// `tools/list`, `resources/read`, …) with PARAMS, then the spec's shutdown. A tool's own
/// failure (`isError: true`) is the plugin's error, with its result as the answer. Under a tool
/// filter, a `tools/list` answer loses the hidden tools and a `tools/call` of one is answered
/// by the supervisor's own rules ([`proto::Supervised`]) without reaching the server, so
/// `call` refuses exactly what `run` refuses, in the session's revision.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let filter = launch.tools().clone();
    let session = launch.start().await.map_err(CallError::Start)?;
    let (client, _init) = McpClient::connect(session, client_info())
        .await
        .map_err(|e| e.call_error("mcp"))?;
    let result = match refused_call(&client, &filter, &request) {
        Some(answer) => RpcError::from_answer(answer, None),
        None => client.call(&request.method, request.params).await,
    };
    let _ = client.shutdown(request.grace).await;
    match result {
        Ok(v) if request.method == proto::TOOLS_CALL && v.get("isError") == Some(&json!(true)) => {
            Err(CallError::Failed {
                lines: Vec::new(),
                failure: Failure::Plugin,
                answer: Some(v),
            })
        }
        Ok(mut v) => {
            if request.method == proto::TOOLS_LIST {
                filter.filter_list(&mut v);
            }
            Ok(v)
        }
        Err(e) => Err(e.call_error("mcp")),
    }
}

/// The supervisor's answer to `request` when it calls a tool `filter` hides: the frame the
/// client would send goes through the same rules `run` applies to an engine's.
fn refused_call(
    client: &McpClient,
    filter: &proto::ToolFilter,
    request: &CallRequest,
) -> Option<Result<Value, jsonrpc::ErrorObject>> {
    if filter.is_open() || request.method != proto::TOOLS_CALL {
        return None;
    }
    let params = client
        .driver
        .inspect(|m| m.wire_params(request.params.clone()));
    let frame =
        jsonrpc::Message::request(0, proto::TOOLS_CALL, params).encode(jsonrpc::Dialect::JsonRpc2);
    let rules = proto::Supervised::new(filter.clone());
    let answer = sandpipe_proto::supervise::SupervisedProtocol::answer_engine(&rules, &frame)?;
    match jsonrpc::Message::decode(&answer, jsonrpc::Dialect::JsonRpc2) {
        Ok(jsonrpc::Message::Response { result, .. }) => Some(result),
        _ => None,
    }
}

/// `sandpipe inspect --protocol mcp`: the revision, the `server/discover` or `initialize`
/// result, and every tool a client would see (the filter's hidden ones left out).
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let launch_tools = launch.tools().clone();
    let session = launch.start().await?;
    let (client, init) = McpClient::connect(session, client_info())
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let filter = launch_tools;
    let tools = client.list_tools().await.map(|t| {
        t.into_iter()
            .filter(|t| filter.permits(&t.name))
            .collect::<Vec<_>>()
    });
    let revision = client.revision();
    let _ = client.shutdown(DESCRIBE_GRACE).await;
    let (key, version) = match revision {
        proto::Revision::Modern => ("discover", json!(proto::MODERN_VERSION)),
        proto::Revision::Handshake => ("initialize", init["protocolVersion"].clone()),
    };
    tools
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::to_value(t).map_err(|e| e.to_string()))
        .map(|tools| json!({"revision": version, key: init, "tools": tools}))
        .map_err(DescribeError::Failed)
}

// A component that exports functions, served as MCP tools: the line's `exports` in
// `protocols::PROTOCOLS`.

/// MCP spoken for a component's exports, each function a tool
/// ([`crate::exports::session`]): the server machine, and the functions as tools.
struct McpExports {
    server: proto::Server,
    tools: tools::Tools,
    info: Value,
}

/// MCP's server for `plugin`'s exports, named after its file.
pub(crate) fn serve_exports(plugin: &Plugin) -> Box<dyn ExportsServer> {
    let name = plugin
        .path()
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "component".into());
    Box::new(McpExports {
        server: proto::Server::new(),
        tools: tools::Tools::new(tool_sources(plugin.functions())),
        info: json!({"name": name, "version": env!("CARGO_PKG_VERSION")}),
    })
}

/// The functions that can be tools: those whose types the codec carries (a resource or a
/// stream cannot be called).
fn tool_sources(functions: &[ExportedFunc]) -> Vec<tools::ToolSource> {
    functions
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let (Ok(params), Ok(results)) = (&f.params, &f.results) else {
                tracing::info!("{}: not a tool ({})", f.name, f.signature);
                return None;
            };
            Some(tools::ToolSource {
                function: i,
                full_name: f.name.clone(),
                signature: f.signature.clone(),
                params: f.param_names.iter().cloned().zip(params.clone()).collect(),
                results: results.clone(),
            })
        })
        .collect()
}

impl McpExports {
    /// One `tools/call`: the tool result, or `-32602` for a tool it does not have.
    async fn call_tool(
        &self,
        params: Option<&Value>,
        exports: &mut Exports,
    ) -> Result<Result<Value, jsonrpc::ErrorObject>, Exit> {
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            let e =
                jsonrpc::ErrorObject::new(jsonrpc::INVALID_PARAMS, "tools/call needs a tool name");
            return Ok(Err(e));
        };
        let Some(tool) = self.tools.find(name) else {
            return Ok(Err(proto::unknown_tool(name)));
        };
        let args = match tool.arguments(params.and_then(|p| p.get("arguments"))) {
            Ok(a) => a,
            Err(e) => return Ok(Ok(tools::tool_error(&format!("invalid arguments: {e}")))),
        };
        let results = tool.source.results.len();
        Ok(Ok(
            match exports.call(tool.source.function, &args, results).await? {
                Ok(values) => tool.result(values),
                Err(e) => tools::tool_error(&e.to_string()),
            },
        ))
    }

    /// The frames the machine has queued.
    fn transmit(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.server.poll_transmit()).collect()
    }
}

#[async_trait::async_trait]
impl ExportsServer for McpExports {
    fn start(&mut self) -> Vec<Vec<u8>> {
        // MCP's server waits for the client's `initialize` or `server/discover`.
        self.transmit()
    }

    async fn handle(&mut self, frame: &[u8], exports: &mut Exports) -> Result<Vec<Vec<u8>>, Exit> {
        if let Err(e) = self.server.handle_frame(frame) {
            // The machine has queued the client's error answer, if the frame deserves one.
            tracing::warn!("mcp: a frame from the client: {e}");
        }
        while let Some(event) = self.server.poll_event() {
            let (id, answer) = match event {
                proto::ServerEvent::Initialize { id, .. } => {
                    let info = self.info.clone();
                    if let Err(e) = self
                        .server
                        .respond_initialize(id, json!({"tools": {}}), info)
                    {
                        tracing::warn!("mcp: could not answer initialize: {e}");
                    }
                    continue;
                }
                proto::ServerEvent::Discover { id, .. } => {
                    let info = self.info.clone();
                    if let Err(e) = self.server.respond_discover(id, json!({"tools": {}}), info) {
                        tracing::warn!("mcp: could not answer server/discover: {e}");
                    }
                    continue;
                }
                proto::ServerEvent::Request { id, method, .. } if method == proto::TOOLS_LIST => {
                    (id, Ok(self.tools.list(&proto::ToolFilter::default())))
                }
                proto::ServerEvent::Request { id, method, params }
                    if method == proto::TOOLS_CALL =>
                {
                    (id, self.call_tool(params.as_ref(), exports).await?)
                }
                proto::ServerEvent::Request { id, method, .. } => {
                    let e = jsonrpc::ErrorObject::new(
                        jsonrpc::METHOD_NOT_FOUND,
                        format!("method not found: {method}"),
                    );
                    (id, Err(e))
                }
                _ => continue,
            };
            if let Err(e) = self.server.respond(id, answer) {
                tracing::warn!("mcp: could not answer a request: {e}");
            }
        }
        Ok(self.transmit())
    }
}
