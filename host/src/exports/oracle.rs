//! Cairo `wasm:` oracles under limits: one instance of a component that exports functions,
//! called by selector with calldata felts, sandboxed like every other plugin.
//!
//! ```text
//!   invoke(selector, calldata)
//!     ├─ Selectors::resolve (proto)          unknown / ambiguous: error listing the candidates
//!     ├─ decode_args (proto)                 codec errors happen before the guest is entered
//!     ├─ ExportInstance::call (sandbox)      fuel per call, deadline per call, memory cap,
//!     │                                      no preopens/env/network unless the policy grants
//!     └─ encode_results (proto)  ─► felts    (capped at `max_result_felts`)
//!   a stop (fuel, deadline, memory, trap) ─► InvokeError::Stopped { stopped: Stopped, .. }, then
//!     AfterTrap::Poison   every later call fails with InvokeError::Poisoned (Scarb's behaviour)
//!     AfterTrap::Restart  the next call gets a fresh instance (as `run --restart` does)
//! ```
//!
//! Decisions, written down:
//! - **Direct calls, for a caller with no engine.** `WasmOracle` is the library API (Scarb's
//!   hint service in `sandpipe-scarb` is built on it): it calls the exports on one instance,
//!   with no frames, driver or supervisor between. The CLI does not use it: `run`, `call` and
//!   `inspect` serve the component as a session ([`crate::exports::session`]) under the same
//!   supervisor as every plugin, where restart, poisoning and recycling are
//!   `sandpipe_proto::supervise`'s. Both paths share the selector and codec step
//!   (`prepare`) and the sandbox's call and stop handling (`sandbox/exports.rs`), so a call
//!   and its limits behave the same; a thin client over the session would cost a JSON round
//!   trip per call and lose the typed [`InvokeError`]s this API returns.
//! - **After a trap** (or any stop: fuel, deadline, memory cap) the instance is dropped, since
//!   its store may be stopped mid-call. [`AfterTrap::Poison`] (the default) keeps Scarb's
//!   semantics: the connection stays, and every later call fails with the first stop's
//!   reason. [`AfterTrap::Restart`] gives the next call a fresh instance (state starts over).
//!   A guest returning `result::err` is data, not a failure: it is encoded like any value.
//! - **Recycling is the supervisor's rule**: [`WasmOracleOptions::recycle`] is
//!   `sandpipe_proto::supervise::Recycle`, the type of `Budgets::recycle`, and the decision
//!   after each call is its [`Recycle::due`] (calls answered on the instance, its linear
//!   memory, and that memory after its first call), so "after N requests", "above M bytes"
//!   and "before the cap" mean one thing on both paths.
//! - **What follows a stop is not `Budgets`' two flags**, on purpose. The supervisor's
//!   `restart` and `poison` combine (both are set for an export component run with
//!   `--restart`), and `poison` there also means "this instance enforces its own deadlines":
//!   it keeps the supervisor from cancelling a timed-out request and replacing a deaf
//!   instance, which has no meaning for a direct call. Its third choice, ending the session,
//!   has none either: a `WasmOracle` has no session to end, only the next call. So this API
//!   keeps its own two-way [`AfterTrap`], whose `Restart` is `Budgets::restart` and whose
//!   `Poison` is `Budgets::poison` without `restart`, and the stop's answer is the same
//!   [`Stopped`] message on both paths.
//! - **Limits per call.** A [`Fuel::PerRequest`](crate::Fuel::PerRequest) budget is re-armed
//!   before every call ([`Fuel::PerSession`](crate::Fuel::PerSession) is one budget for the
//!   instance's life); the deadline
//!   ([`WasmOracleOptions::call_timeout`], else [`Policy::deadline`]) runs from the call's
//!   start, checked inside running wasm by epochs and by an outer timer for a guest blocked in
//!   a host call.
//! - **Stdio.** The guest's stdin is empty; its stdout and stderr go where
//!   [`WasmOracleOptions::stderr`] says (a log, sandpipe's stderr, nowhere), never to the
//!   engine's stdout; the last stderr lines are in every failure.
//! - **Capabilities.** Exactly the policy's: by default no preopens, no environment, no
//!   sockets. (Scarb's own executor inherits stdin, stdout, the environment and the network,
//!   and preopens its working directory read-write.)
//! - **Selectors** are resolved by [`Selectors`]: a full name (the export path joined with
//!   `/`) or a unique short name.

use std::time::Duration;

use sandpipe_proto::component::{
    DEFAULT_MAX_RESULT_FELTS, Selectors, Ty, Value, check_supported, decode_args, encode_results,
};
use sandpipe_proto::oracle::Felt;

use crate::error::{HostError, Stopped};
pub use crate::exports::error::InvokeError;
use crate::run::sandbox::exports::{CallFailure, ExportInstance, ExportsRunner};
use crate::{ExportedFunc, Host, Plugin, Policy, StderrMode};
pub use sandpipe_proto::supervise::Recycle;

/// What happens to an instance after a call stopped it (trap, fuel, deadline, memory cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AfterTrap {
    /// Every later call fails with [`InvokeError::Poisoned`], as in Scarb's executor.
    #[default]
    Poison,
    /// The next call gets a fresh instance (its state starts over).
    Restart,
}

/// How a [`WasmOracle`] runs. Defaults ([`WasmOracleOptions::default`]):
/// - `call_timeout`: `None` ([`Policy::deadline`], if set, is used per call);
/// - `after_trap`: [`AfterTrap::Poison`];
/// - `max_result_felts`: [`DEFAULT_MAX_RESULT_FELTS`] (1 Mi felts);
/// - `recycle`: [`Recycle::default`] (never renew a healthy instance);
/// - `stderr`: [`StderrMode::Log`], keeping the last 20 lines for errors.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WasmOracleOptions {
    /// Wall-clock limit of one call.
    pub call_timeout: Option<Duration>,
    /// What happens after a stopped call.
    pub after_trap: AfterTrap,
    /// Most felts one call's results may encode to.
    pub max_result_felts: usize,
    /// When to start a fresh instance for a healthy one, checked after each call: the
    /// supervisor's rule (`after_requests` counts calls on the instance, `above_memory` and
    /// `before_cap` read its linear memory).
    pub recycle: Recycle,
    /// Where the guest's stdout and stderr go.
    pub stderr: StderrMode,
    /// Stderr lines kept for error reports.
    pub stderr_tail_lines: usize,
}

impl Default for WasmOracleOptions {
    fn default() -> Self {
        Self {
            call_timeout: None,
            after_trap: AfterTrap::Poison,
            max_result_felts: DEFAULT_MAX_RESULT_FELTS,
            recycle: Recycle::default(),
            stderr: StderrMode::Log,
            stderr_tail_lines: 20,
        }
    }
}

impl WasmOracleOptions {
    /// Set the per-call wall-clock limit.
    pub fn call_timeout(mut self, limit: Option<Duration>) -> Self {
        self.call_timeout = limit;
        self
    }
    /// Set what happens after a stopped call.
    pub fn after_trap(mut self, after: AfterTrap) -> Self {
        self.after_trap = after;
        self
    }
    /// Set when a healthy instance is renewed.
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
        self
    }
    /// Set where the guest's stdout and stderr go.
    pub fn stderr(mut self, mode: StderrMode) -> Self {
        self.stderr = mode;
        self
    }
}

enum Slot {
    Live(ExportInstance),
    /// Renew before the next call (after a restartable stop, or recycling).
    Fresh,
    Poisoned(String),
}

/// Resolve `selector` and decode `calldata` for it: the function's index, its arguments and
/// its result types. Selector and codec errors happen here, before the guest is entered.
pub(crate) fn prepare(
    functions: &[ExportedFunc],
    selectors: &Selectors,
    selector: &str,
    calldata: &[Felt],
) -> Result<(usize, Vec<Value>, Vec<Ty>), InvokeError> {
    let index = selectors.resolve(selector)?;
    let func = &functions[index];
    let params = func.params.clone()?;
    let results = func.results.clone()?;
    check_supported(params.iter().chain(&results))?;
    let args = decode_args(&params, calldata)?;
    Ok((index, args, results))
}

/// One `wasm:` oracle connection: an instance of a component that exports functions, whose
/// state persists across calls (see the module docs).
pub struct WasmOracle {
    runner: ExportsRunner,
    functions: Vec<ExportedFunc>,
    selectors: Selectors,
    policy: Policy,
    options: WasmOracleOptions,
    label: String,
    slot: Slot,
    calls_on_instance: u64,
    /// The instance's linear memory after its first call ([`Recycle::before_cap`]'s base).
    base_memory: Option<u64>,
    restarts: u32,
}

impl std::fmt::Debug for WasmOracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmOracle")
            .field("label", &self.label)
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

impl WasmOracle {
    /// Instantiate `plugin` (a component) under `policy`. A component that cannot be
    /// instantiated, or a plugin that is not a component, is an error now, so a failed
    /// connect is never cached by a caller.
    pub async fn new(
        host: &Host,
        plugin: &Plugin,
        policy: &Policy,
        options: WasmOracleOptions,
    ) -> Result<WasmOracle, HostError> {
        let runner = crate::exports::session::exports_runner(host, plugin, policy)?;
        let label = crate::run::transport::argv0_for(plugin.path());
        let first = runner
            .instantiate(policy, &label, options.stderr, options.stderr_tail_lines)
            .await?;
        let functions = plugin.functions().to_vec();
        Ok(WasmOracle {
            selectors: Selectors::new(functions.iter().map(|f| f.name.clone())),
            functions,
            runner,
            policy: policy.clone(),
            options,
            label,
            slot: Slot::Live(first),
            calls_on_instance: 0,
            base_memory: None,
            restarts: 0,
        })
    }

    /// The exported functions, with their full names and WIT signatures.
    pub fn functions(&self) -> &[ExportedFunc] {
        &self.functions
    }

    /// Fresh instances started after a stop or by recycling.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Call `selector` with `calldata`; the result felts (without Scarb's leading 0).
    pub async fn invoke(
        &mut self,
        selector: &str,
        calldata: &[Felt],
    ) -> Result<Vec<Felt>, InvokeError> {
        let (index, args, _) = prepare(&self.functions, &self.selectors, selector, calldata)?;
        let values = self.call(index, &args).await?;
        Ok(encode_results(&values, self.options.max_result_felts)?)
    }

    /// Call function `index` (of [`WasmOracle::functions`]) with `args`, already checked
    /// against its parameter types, under the same per-call limits, poisoning and restart as
    /// [`WasmOracle::invoke`]; the values it returned (for a caller with typed values, not
    /// felts).
    pub async fn call(&mut self, index: usize, args: &[Value]) -> Result<Vec<Value>, InvokeError> {
        let results = match self.functions.get(index).map(|f| f.results.clone()) {
            Some(r) => r?.len(),
            None => {
                return Err(InvokeError::Restart {
                    message: format!("no function {index}"),
                });
            }
        };
        let timeout = self.options.call_timeout.or(self.policy.deadline);
        let instance = self.live().await?;
        let outcome = instance.call(index, args, results, timeout).await;
        self.calls_on_instance += 1;
        match outcome {
            Ok(values) => {
                self.recycle_if_due().await;
                Ok(values)
            }
            Err(CallFailure::Results(e)) => Err(e.into()),
            Err(CallFailure::Stopped(exit)) => {
                let (exit, stderr_tail) = match std::mem::replace(&mut self.slot, Slot::Fresh) {
                    Slot::Live(i) => i.close_stopped(exit).await,
                    _ => (exit, Vec::new()),
                };
                let restarting = self.options.after_trap == AfterTrap::Restart;
                let error = InvokeError::Stopped {
                    stopped: Stopped::ended(exit, stderr_tail),
                    restarting,
                };
                if !restarting {
                    self.slot = Slot::Poisoned(error.to_string());
                }
                Err(error)
            }
        }
    }

    async fn live(&mut self) -> Result<&mut ExportInstance, InvokeError> {
        match &self.slot {
            Slot::Poisoned(cause) => {
                return Err(InvokeError::Poisoned {
                    cause: cause.clone(),
                });
            }
            Slot::Fresh => {
                let fresh = self
                    .runner
                    .instantiate(
                        &self.policy,
                        &self.label,
                        self.options.stderr,
                        self.options.stderr_tail_lines,
                    )
                    .await
                    .map_err(|e| InvokeError::Restart {
                        message: e.to_string(),
                    })?;
                self.restarts += 1;
                self.calls_on_instance = 0;
                self.base_memory = None;
                self.slot = Slot::Live(fresh);
            }
            Slot::Live(_) => {}
        }
        match &mut self.slot {
            Slot::Live(i) => Ok(i),
            _ => Err(InvokeError::Restart {
                message: "no instance".into(),
            }),
        }
    }

    async fn recycle_if_due(&mut self) {
        let Slot::Live(instance) = &self.slot else {
            return;
        };
        let recycle = self.options.recycle;
        let used = recycle.reads_memory().then(|| instance.memory_in_use());
        if self.calls_on_instance == 1 && recycle.needs_base() {
            self.base_memory = used;
        }
        if recycle.due(self.calls_on_instance, used, self.base_memory)
            && let Slot::Live(i) = std::mem::replace(&mut self.slot, Slot::Fresh)
        {
            let _ = i.close().await;
        }
    }

    /// Drop the instance, letting its stdout and stderr drain.
    pub async fn close(self) {
        if let Slot::Live(i) = self.slot {
            let _ = i.close().await;
        }
    }
}
