//! A component that exports functions, as a session: the transport behind
//! `run|call|inspect --protocol oracle X.wasm` and `run --protocol mcp tools.wasm`.
//!
//! This module is the part every such protocol shares: the instance, its calls and their
//! stops, and the in-process plugin around them. What speaks the protocol is an
//! [`ExportsServer`] in that protocol's host module, named by its line in the registry
//! (`ProtocolSpec::exports`), which is also where `Host::start_speaking` picks it.
//!
//! Such a component has no `wasi:cli/run` and no stdio to speak a protocol on, so sandpipe
//! speaks it for the component, in process, the way [`Session::memory`] presents a closure:
//!
//! ```text
//!   Supervisor / OracleClient / McpClient
//!     Session::send ─► framer ─► pipe ─► ExportsServer::handle ─► protocol machine (proto):
//!     Session::recv ◄─ framer ◄─ pipe ◄─┘   oracle (protocols/oracle.rs): OracleServer
//!                                             (ready, invoke, shutdown)
//!                                           mcp (protocols/mcp.rs): mcp::Server and
//!                                             mcp::exports::Tools
//!                                             └─ each invoke / tools/call ─► Exports::call
//!                                                ─► ExportInstance::call
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

use sandpipe_proto::component::{Selectors, Value};
use serde_json::{Value as Json, json};

use crate::error::{Exit, HostError};
use crate::exports::error::InvokeError;
use crate::run::memory_plugin::InProcess;
use crate::run::sandbox::exports::{CallFailure, ExportInstance, ExportsRunner};
use crate::run::session::{Session, SessionOptions};
use crate::{ExportedFunc, Host, Plugin, Policy};

/// A protocol's server for a component's exports: frames from the client in, frames out,
/// each call of an export made through [`Exports`]. A stop of the instance (the `Err` of
/// [`Exports::call`]) ends the session: pass it on with `?`.
#[async_trait::async_trait]
pub(crate) trait ExportsServer: Send {
    /// What it writes as it starts (the oracle's `ready`; nothing for a server that waits
    /// for its client).
    fn start(&mut self) -> Vec<Vec<u8>>;

    /// Answer one frame from the client: the frames to write, or the stop of a call.
    async fn handle(&mut self, frame: &[u8], exports: &mut Exports) -> Result<Vec<Vec<u8>>, Exit>;

    /// True once the protocol is done (the oracle's `shutdown`): the session ends with 0.
    fn finished(&self) -> bool {
        false
    }
}

/// Serve `plugin`'s exports through `runner` as a session speaking `server`'s protocol, from
/// a fresh instance made now (one that cannot start is an error here), with `policy.deadline`
/// as each call's limit.
pub(crate) async fn serve(
    runner: ExportsRunner,
    plugin: &Plugin,
    policy: &Policy,
    options: &SessionOptions,
    server: Box<dyn ExportsServer>,
) -> Result<Session, HostError> {
    let label = crate::run::transport::argv0_for(plugin.path());
    let instance = runner
        .instantiate(policy, &label, options.stderr, options.stderr_tail_lines)
        .await?;
    let stderr = instance.stderr();
    let meter = instance.meter();
    let plugin_side = Served {
        exports: Exports {
            functions: plugin.functions().into(),
            selectors: Selectors::new(plugin.functions().iter().map(|f| f.name.clone())),
            instance: Some(instance),
            timeout: policy.deadline,
        },
        server,
    };
    Ok(Session::in_process(plugin_side, options, stderr, meter))
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
    host.sandbox()?
        .exports_runner(compiled)
        .ok_or_else(|| HostError::Instantiate {
            message: format!(
                "{} is a core module; a wasm: oracle must be a component",
                plugin.path().display()
            ),
        })
}

/// What `inspect` shows of a component's functions: full name and WIT signature, and why the
/// codec cannot carry it, if so.
pub(crate) fn functions_json(plugin: &Plugin) -> Json {
    Json::Array(
        plugin
            .functions()
            .iter()
            .map(|f| {
                let mut entry = json!({"name": f.name, "signature": f.signature});
                let supported = f
                    .params
                    .as_ref()
                    .and(f.results.as_ref())
                    .map_err(Clone::clone)
                    .and_then(|_| {
                        let params = f.params.as_deref().unwrap_or_default();
                        let results = f.results.as_deref().unwrap_or_default();
                        sandpipe_proto::component::check_supported(params.iter().chain(results))
                    });
                if let Err(e) = supported {
                    entry["unsupported"] = Json::from(e.to_string());
                }
                entry
            })
            .collect(),
    )
}

/// The component's functions and its one instance, as a protocol's server calls them.
pub(crate) struct Exports {
    functions: Arc<[ExportedFunc]>,
    selectors: Selectors,
    /// `None` once closed.
    instance: Option<ExportInstance>,
    /// Each call's wall-clock limit.
    timeout: Option<Duration>,
}

impl Exports {
    /// The exported functions, in the order their indices count.
    pub(crate) fn functions(&self) -> &[ExportedFunc] {
        &self.functions
    }

    /// Their selectors: full names and unique short names.
    pub(crate) fn selectors(&self) -> &Selectors {
        &self.selectors
    }

    /// Call function `index`: its values, a result the codec cannot carry (`Ok(Err)`: the
    /// instance is fine), or the stop (the instance is closed, its stderr drained).
    pub(crate) async fn call(
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
}

/// The component's side of the session: its exports and the protocol's server.
struct Served {
    exports: Exports,
    server: Box<dyn ExportsServer>,
}

impl InProcess for Served {
    fn start(&mut self) -> Vec<Vec<u8>> {
        self.server.start()
    }

    async fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Exit> {
        self.server.handle(frame, &mut self.exports).await
    }

    fn finished(&self) -> bool {
        self.server.finished()
    }

    async fn close(mut self) {
        if let Some(instance) = self.exports.instance.take() {
            let _ = instance.close().await;
        }
    }
}
