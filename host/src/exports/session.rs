//! A component that exports functions, as a session: the transport behind
//! `run|call|inspect --protocol oracle X.wasm` and `run --protocol mcp tools.wasm`.
//!
//! Such a component has no `wasi:cli/run` and no stdio to speak a protocol on, so sandpipe
//! speaks it for the component, in process, the way [`Session::memory`] presents a closure:
//!
//! ```text
//!   Supervisor / OracleClient / McpClient
//!     Session::send ─► framer ─► pipe ─► ExportServer::handle ─► protocol machine (proto):
//!     Session::recv ◄─ framer ◄─ pipe ◄─┘   oracle: OracleServer (ready, invoke, shutdown)
//!                                           mcp:    mcp::Server + mcp::exports::Tools
//!                                             └─ each invoke / tools/call ─► ExportInstance::call
//!                                                (sandbox: fuel per call, deadline per call,
//!                                                memory cap; the guest's stdin empty)
//!   SessionControl: memory_in_use = the store's linear memory (the instance's meter, live)
//!                   begin_request = counted (fuel is re-armed by every call anyway)
//!                   kill          = the task and the instance dropped (Exit::Killed)
//!                   wait          = Exit::Exited(0) at stdin EOF or the oracle's shutdown;
//!                                   the stop's Exit (trap, fuel, deadline, memory) when a call
//!                                   stopped the instance, its stderr tail drained first
//! ```
//!
//! Decisions, written down:
//! - **A stop ends the instance, and only that.** A call stopped by a trap, its fuel, its
//!   deadline or the memory cap is not answered: the instance is closed (its stderr drained
//!   into the session's tail) and the session ends with that [`Exit`]. What the next call
//!   meets (a fresh instance with `--restart`, or Scarb's poisoning by default) is the
//!   supervisor's decision ([`sandpipe_proto::supervise::Budgets::poison`]), and the failed
//!   call's answer is the protocol's stopped answer, as for every plugin.
//! - **The deadline is per call, and enforced inside the instance** (epochs and an outer
//!   timer, as [`WasmOracle`](crate::exports::oracle::WasmOracle) does): `Policy::deadline` is
//!   each call's limit here, not the session's. The supervisor moves `--request-timeout` into
//!   it ([`Supervisor::new`](crate::speak::supervise::Supervisor::new)), so a runaway call ends as
//!   `DeadlineExceeded` with the guest's stderr tail, never as a kill from outside.
//! - **What the component's machine answers itself is data**: an unknown or ambiguous selector,
//!   calldata that does not fit (oracle: `-32603` with the codec's message, as the Rust oracle
//!   SDK answers a plugin error), an unknown tool (`-32602`), arguments that do not fit (an
//!   `isError` tool result). None of them stops the instance.
//! - **Tool filters are not here**: `--allow-tool`/`--deny-tool` are the supervisor's MCP rules
//!   (`sandpipe_proto::mcp::Supervised`), the same for a component as for a stdio server.

use std::sync::Arc;
use std::time::Duration;

use sandpipe_proto::jsonrpc::{self, ErrorObject, Id, METHOD_NOT_FOUND};
use sandpipe_proto::mcp::{self, exports as tools};
use sandpipe_proto::oracle::wasm::{DEFAULT_MAX_RESULT_FELTS, Selectors, Value, encode_results};
use sandpipe_proto::oracle::{OracleServer, ServerEvent as OracleEvent};
use serde_json::{Value as Json, json};

use crate::error::{Exit, HostError};
use crate::exports::oracle::{InvokeError, prepare};
use crate::run::memory_plugin::InProcess;
use crate::run::sandbox::exports::{CallFailure, ExportInstance, ExportsRunner};
use crate::run::session::{Session, SessionOptions};
use crate::speak::protocols::Protocol;
use crate::{ExportedFunc, Host, Plugin, Policy};

impl Host {
    /// Start `plugin` for a session speaking `protocol`. A component that exports functions
    /// (see [`Plugin::exports_functions`]) is served in process, each function an oracle
    /// selector or an MCP tool (see [`crate::exports::session`]), from a fresh instance made now
    /// (one that cannot start is an error here), with `policy.deadline` as each call's limit;
    /// any other plugin starts as [`Host::start`] starts it.
    pub async fn start_speaking(
        &self,
        plugin: &Plugin,
        policy: &Policy,
        options: &SessionOptions,
        protocol: Protocol,
    ) -> Result<Session, HostError> {
        if !plugin.exports_functions() {
            return self.start(plugin, policy, options).await;
        }
        let runner = exports_runner(self, plugin, policy)?;
        let label = crate::run::sandbox::argv0_for(plugin.path());
        let speaks = match protocol {
            Protocol::Oracle => Speaks::Oracle(OracleServer::new()),
            Protocol::Mcp => Speaks::Mcp(McpTools::new(plugin)),
            other => {
                return Err(HostError::Instantiate {
                    message: format!(
                        "{} exports functions: sandpipe serves them as the oracle or mcp \
                         protocol, not {}",
                        plugin.path().display(),
                        other.name()
                    ),
                });
            }
        };
        let instance = runner
            .instantiate(policy, &label, options.stderr, options.stderr_tail_lines)
            .await?;
        let stderr = instance.stderr();
        let meter = instance.meter();
        let server = ExportServer {
            functions: plugin.functions().into(),
            selectors: Selectors::new(plugin.functions().iter().map(|f| f.name.clone())),
            instance: Some(instance),
            timeout: policy.deadline,
            speaks,
        };
        Ok(Session::in_process(server, options, stderr, meter))
    }
}

/// What it takes to instantiate `plugin`'s exports under `policy`: a component (not a core
/// module, not a native program) whose imports the policy allows.
pub(crate) fn exports_runner(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
) -> Result<ExportsRunner, HostError> {
    let compiled = plugin
        .compiled
        .as_ref()
        .ok_or_else(|| HostError::Instantiate {
            message: format!(
                "{} is not a wasm component; a wasm: oracle must be one",
                plugin.path().display()
            ),
        })?;
    crate::run::sandbox::Sandbox::check_imports(compiled, policy)?;
    host.sandbox
        .exports_runner(compiled)
        .ok_or_else(|| HostError::Instantiate {
            message: format!(
                "{} is a core module; a wasm: oracle must be a component",
                plugin.path().display()
            ),
        })
}

/// The protocol the in-process server speaks.
enum Speaks {
    Oracle(OracleServer),
    Mcp(McpTools),
}

/// MCP's side: the machine, and the functions as tools.
struct McpTools {
    server: mcp::Server,
    tools: tools::Tools,
    info: Json,
}

impl McpTools {
    fn new(plugin: &Plugin) -> Self {
        let name = plugin
            .path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "component".into());
        McpTools {
            server: mcp::Server::new(),
            tools: tools::Tools::new(tool_sources(plugin.functions())),
            info: json!({"name": name, "version": env!("CARGO_PKG_VERSION")}),
        }
    }
}

/// The functions that can be tools: those whose types the codec carries (a resource or a
/// stream cannot be called).
pub(crate) fn tool_sources(functions: &[ExportedFunc]) -> Vec<tools::ToolSource> {
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

/// The component's side of the session: see the module docs.
struct ExportServer {
    functions: Arc<[ExportedFunc]>,
    selectors: Selectors,
    /// `None` once closed.
    instance: Option<ExportInstance>,
    /// Each call's wall-clock limit.
    timeout: Option<Duration>,
    speaks: Speaks,
}

impl ExportServer {
    /// Call function `index`: its values, a result the codec cannot carry (`Ok(Err)`: the
    /// instance is fine), or the stop (the instance is closed, its stderr drained).
    async fn call(
        &mut self,
        index: usize,
        args: &[Value],
        results: usize,
    ) -> Result<Result<Vec<Value>, InvokeError>, Exit> {
        let Some(instance) = self.instance.as_mut() else {
            return Err(Exit::Killed { signal: None });
        };
        match instance.call(index, args, results, self.timeout).await {
            Ok(values) => Ok(Ok(values)),
            Err(CallFailure::Results(e)) => Ok(Err(e.into())),
            Err(CallFailure::Stopped(exit)) => {
                let instance = self.instance.take().expect("checked above");
                Err(instance.close_stopped(exit).await.0)
            }
        }
    }

    /// One oracle invoke: the felts, or the plugin's own error answer.
    async fn invoke(
        &mut self,
        selector: &str,
        calldata: &[sandpipe_proto::oracle::Felt],
    ) -> Result<Result<Vec<sandpipe_proto::oracle::Felt>, ErrorObject>, Exit> {
        let answer = match prepare(&self.functions, &self.selectors, selector, calldata) {
            Ok((index, args, results)) => match self.call(index, &args, results.len()).await? {
                Ok(values) => {
                    encode_results(&values, DEFAULT_MAX_RESULT_FELTS).map_err(InvokeError::from)
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        Ok(answer.map_err(|e| plugin_error(&e)))
    }

    /// One `tools/call`: the tool result, or `-32602` for a tool it does not have.
    async fn call_tool(
        &mut self,
        params: Option<&Json>,
    ) -> Result<Result<Json, ErrorObject>, Exit> {
        let Speaks::Mcp(mcp) = &self.speaks else {
            return Ok(Err(ErrorObject::new(
                METHOD_NOT_FOUND,
                "not an MCP session",
            )));
        };
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Json::as_str) else {
            let e = ErrorObject::new(jsonrpc::INVALID_PARAMS, "tools/call needs a tool name");
            return Ok(Err(e));
        };
        let Some(tool) = mcp.tools.find(name).cloned() else {
            return Ok(Err(mcp::unknown_tool(name)));
        };
        let args = match tool.arguments(params.and_then(|p| p.get("arguments"))) {
            Ok(a) => a,
            Err(e) => return Ok(Ok(tools::tool_error(&format!("invalid arguments: {e}")))),
        };
        let results = tool.source.results.len();
        Ok(Ok(
            match self.call(tool.source.function, &args, results).await? {
                Ok(values) => tool.result(values),
                Err(e) => tools::tool_error(&e.to_string()),
            },
        ))
    }

    async fn handle_oracle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Exit> {
        let Speaks::Oracle(server) = &mut self.speaks else {
            return Ok(Vec::new());
        };
        if let Err(e) = server.handle_frame(frame) {
            // As the Rust oracle SDK does with a line it cannot use: log it, serve the next.
            tracing::warn!("oracle: ignoring a frame from the engine: {e}");
        }
        while let Some(event) = next_oracle_event(&mut self.speaks) {
            let OracleEvent::Invoke {
                id,
                selector,
                calldata,
            } = event
            else {
                continue;
            };
            let answer = self.invoke(&selector, &calldata).await?;
            if let Speaks::Oracle(server) = &mut self.speaks
                && let Err(e) = server.respond(id, answer)
            {
                tracing::warn!("oracle: could not answer an invoke: {e}");
            }
        }
        Ok(self.transmit())
    }

    async fn handle_mcp(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Exit> {
        let Speaks::Mcp(mcp) = &mut self.speaks else {
            return Ok(Vec::new());
        };
        if let Err(e) = mcp.server.handle_frame(frame) {
            // The machine has queued the client's error answer, if the frame deserves one.
            tracing::warn!("mcp: a frame from the client: {e}");
        }
        while let Some(event) = next_mcp_event(&mut self.speaks) {
            let (id, answer): (Id, Result<Json, ErrorObject>) = match event {
                mcp::ServerEvent::Initialize { id, .. } => {
                    if let Speaks::Mcp(mcp) = &mut self.speaks {
                        let info = mcp.info.clone();
                        if let Err(e) =
                            mcp.server
                                .respond_initialize(id, json!({"tools": {}}), info)
                        {
                            tracing::warn!("mcp: could not answer initialize: {e}");
                        }
                    }
                    continue;
                }
                mcp::ServerEvent::Discover { id, .. } => {
                    if let Speaks::Mcp(mcp) = &mut self.speaks {
                        let info = mcp.info.clone();
                        if let Err(e) = mcp.server.respond_discover(id, json!({"tools": {}}), info)
                        {
                            tracing::warn!("mcp: could not answer server/discover: {e}");
                        }
                    }
                    continue;
                }
                mcp::ServerEvent::Request { id, method, .. } if method == mcp::TOOLS_LIST => {
                    let Speaks::Mcp(mcp) = &self.speaks else {
                        continue;
                    };
                    (id, Ok(mcp.tools.list(&mcp::ToolFilter::default())))
                }
                mcp::ServerEvent::Request { id, method, params } if method == mcp::TOOLS_CALL => {
                    (id, self.call_tool(params.as_ref()).await?)
                }
                mcp::ServerEvent::Request { id, method, .. } => {
                    let e =
                        ErrorObject::new(METHOD_NOT_FOUND, format!("method not found: {method}"));
                    (id, Err(e))
                }
                _ => continue,
            };
            if let Speaks::Mcp(mcp) = &mut self.speaks
                && let Err(e) = mcp.server.respond(id, answer)
            {
                tracing::warn!("mcp: could not answer a request: {e}");
            }
        }
        Ok(self.transmit())
    }

    /// The frames the machine has queued.
    fn transmit(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            let next = match &mut self.speaks {
                Speaks::Oracle(server) => server.poll_transmit(),
                Speaks::Mcp(mcp) => mcp.server.poll_transmit(),
            };
            match next {
                Some(frame) => frames.push(frame),
                None => return frames,
            }
        }
    }
}

fn next_oracle_event(speaks: &mut Speaks) -> Option<OracleEvent> {
    match speaks {
        Speaks::Oracle(server) => server.poll_event(),
        Speaks::Mcp(_) => None,
    }
}

fn next_mcp_event(speaks: &mut Speaks) -> Option<mcp::ServerEvent> {
    match speaks {
        Speaks::Mcp(mcp) => mcp.server.poll_event(),
        Speaks::Oracle(_) => None,
    }
}

/// The answer the component gives for an invoke it cannot make (a selector or codec error):
/// the plugin's own error, `-32603` with the message, as the Rust oracle SDK gives one.
fn plugin_error(e: &InvokeError) -> ErrorObject {
    ErrorObject::new(jsonrpc::INTERNAL_ERROR, e.to_string()).with_data(e.data())
}

impl InProcess for ExportServer {
    fn start(&mut self) -> Vec<Vec<u8>> {
        // The oracle's `ready`; MCP's server waits for the client's `initialize`.
        self.transmit()
    }

    async fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Exit> {
        match self.speaks {
            Speaks::Oracle(_) => self.handle_oracle(frame).await,
            Speaks::Mcp(_) => self.handle_mcp(frame).await,
        }
    }

    fn finished(&self) -> bool {
        matches!(&self.speaks, Speaks::Oracle(server) if server.must_terminate())
    }

    async fn close(mut self) {
        if let Some(instance) = self.instance.take() {
            let _ = instance.close().await;
        }
    }
}
