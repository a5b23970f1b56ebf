//! The wasmtime sandbox: the only module that names wasmtime types.
//!
//! ```text
//!  Sandbox (one Engine: fuel + epochs compiled in, a 10 ms epoch ticker thread)
//!    ├─ load(bytes)  ─ sha256 ─► in-process map ─► on-disk .cwasm cache ─► compile
//!    │                               └──────────────► Compiled { CommandPre | InstancePre }
//!    └─ start(compiled, policy) ─► Store { WasiCtx, Limiter, OpenFiles (open_files.rs),
//!                                          Resolver (the allow-list: sockets.rs, http.rs) }
//!                                    + stdio pipes (stdio.rs)
//!                                    └─ runner task: instantiate, call run, classify ─► Exit
//! ```

mod cache;
mod determinism;
mod disk_quota;
pub(crate) mod exports;
mod http;
mod open_files;
mod pool;
mod sockets;
mod stdio;
mod tcp_tape;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use crate::run::cache_root::default_cache_dir;
use cache::ArtifactCache;
use disk_quota::DiskQuota;
pub use exports::ExportedFunc;
use open_files::OpenFiles;
pub use pool::{InstanceAllocator, PoolNeeds, Pooling};
use tokio::sync::watch;
use wasmtime::component::{Component, ComponentExportIndex, ResourceTable};
use wasmtime::{
    CallHook, Engine, InstancePre, Module, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::error::{Exit, HostError};
use crate::net::Resolver;
use crate::policy::{Access, Fuel, ImportPolicy, Policy, import_allowed};
use crate::run::stderr::{StderrMode, StderrTail};
use crate::run::transport::{
    KillSwitch, Meter, PluginStdin, PluginStdout, Transport, finish, killed,
};

/// How often the epoch ticker bumps the engine's epoch. Each bump lets a running guest yield
/// to tokio (so kills and timeouts are noticed) and checks its deadline.
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Capacity of each in-memory stdio pipe (`stdio.rs`): unread bytes it holds before the writer
/// waits. A native plugin's OS pipes hold as much (`native::PIPE_BYTES`): a 64 KiB frame and its
/// newline go into the guest's stdin in one host write, not one write and a wait for the guest.
/// It is a bound, not an allocation: the pipe holds only what is unread.
const PIPE_BYTES: usize = 1 << 20;
/// Table elements one store may hold in all (a table-growth bomb stops here).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Where a loaded plugin's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadSource {
    /// Compiled now (and written to the on-disk cache, if there is one).
    Compiled,
    /// Read from the on-disk cache: no compilation.
    DiskCache,
    /// Already loaded in this process: the pre-instance is reused.
    Memory,
}

/// Whether a wasm binary is a component or a core module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WasmKind {
    Component,
    CoreModule,
}

/// Classify by header: `\0asm` then version 1 (core module) or 0x0d layer 1 (component).
pub(crate) fn detect(bytes: &[u8]) -> Option<WasmKind> {
    match bytes.get(..8)? {
        [0, b'a', b's', b'm', 1, 0, 0, 0] => Some(WasmKind::CoreModule),
        [0, b'a', b's', b'm', 0x0d, 0, 1, 0] => Some(WasmKind::Component),
        [0, b'a', b's', b'm', ..] => Some(WasmKind::Component), // unknown version: let wasmtime say why
        _ => None,
    }
}

/// A compiled plugin, ready to instantiate many times.
#[derive(Clone)]
pub(crate) enum Compiled {
    Component {
        pre: wasmtime::component::InstancePre<State2>,
        /// `None` when the component does not export `wasi:cli/run` (a `wasm:` oracle).
        command: Option<CommandPre<State2>>,
        /// Its exported functions (`exports.rs`) and their export indices.
        functions: Arc<Vec<ExportedFunc>>,
        indices: Arc<Vec<ComponentExportIndex>>,
        imports: Vec<String>,
        exports: Vec<String>,
    },
    Module {
        pre: InstancePre<State1>,
        imports: Vec<String>,
        exports: Vec<String>,
    },
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compiled::Component { .. } => f.write_str("Compiled::Component"),
            Compiled::Module { .. } => f.write_str("Compiled::Module"),
        }
    }
}

impl Compiled {
    pub(crate) fn imports(&self) -> &[String] {
        match self {
            Compiled::Component { imports, .. } | Compiled::Module { imports, .. } => imports,
        }
    }
    pub(crate) fn exports(&self) -> &[String] {
        match self {
            Compiled::Component { exports, .. } | Compiled::Module { exports, .. } => exports,
        }
    }
    /// The functions a component exports (empty for a core module).
    pub(crate) fn functions(&self) -> &[ExportedFunc] {
        match self {
            Compiled::Component { functions, .. } => functions,
            Compiled::Module { .. } => &[],
        }
    }
    /// Whether this is a component without `wasi:cli/run`: a `wasm:` oracle.
    pub(crate) fn exports_functions(&self) -> bool {
        matches!(self, Compiled::Component { command: None, .. })
    }
}

/// Store state for a component (WASI p2).
pub(crate) struct State2 {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    open_files: OpenFiles,
    disk: std::sync::Arc<DiskQuota>,
    /// The session's allow-list and pins: every `wasi:sockets` and `wasi:http` decision.
    resolver: Arc<Resolver>,
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: http::HttpHooks,
    /// The `wasi:sockets` TCP connections on the session's tape.
    tcp: tcp_tape::TcpTaps,
}

impl State2 {
    /// The store state of one component session.
    fn new(policy: &Policy, ctx: WasiCtx, limiter: Limiter, resolver: Arc<Resolver>) -> Self {
        State2 {
            ctx,
            table: ResourceTable::new(),
            limiter,
            open_files: OpenFiles::new(policy.max_open_files, policy.preopens.len()),
            disk: DiskQuota::new(policy.max_disk_write),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            http_hooks: http::HttpHooks::new(resolver.clone()),
            tcp: tcp_tape::TcpTaps::default(),
            resolver,
        }
    }
}

impl WasiView for State2 {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for State2 {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// Store state for a core module (WASI p1).
pub(crate) struct State1 {
    wasi: WasiP1Ctx,
    limiter: Limiter,
    open_files: OpenFiles,
}

/// Caps linear memory across all of a store's memories, and remembers a refusal so a guest
/// that then aborts is reported as [`Exit::MemoryLimit`] rather than a bare trap.
#[derive(Debug)]
struct Limiter {
    max_memory: Option<usize>,
    memory_in_use: usize,
    table_elements: usize,
    denied: Arc<AtomicBool>,
    meter: Arc<Meter>,
}

impl Limiter {
    /// The limits `policy` sets on one store; `denied` records that a growth was refused.
    fn new(policy: &Policy, denied: Arc<AtomicBool>, meter: Arc<Meter>) -> Self {
        Limiter {
            max_memory: policy
                .max_memory
                .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            memory_in_use: 0,
            table_elements: 0,
            denied,
            meter,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current);
        let total = self.memory_in_use.saturating_add(grow);
        if let Some(max) = self.max_memory
            && total > max
        {
            self.denied.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        self.memory_in_use = total;
        self.meter
            .memory
            .store(u64::try_from(total).unwrap_or(u64::MAX), Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current);
        let total = self.table_elements.saturating_add(grow);
        if total > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
    }
}

/// A full pool is its own error: the caller can wait for a session to end and retry.
fn instantiate_err(e: wasmtime::Error) -> HostError {
    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        return HostError::PoolExhausted {
            message: e.to_string(),
        };
    }
    HostError::Instantiate {
        message: format!("{e:#}"),
    }
}

/// The error an epoch callback raises once the deadline has passed.
#[derive(Debug)]
struct DeadlineHit;

impl std::fmt::Display for DeadlineHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("wall-clock deadline exceeded")
    }
}

impl std::error::Error for DeadlineHit {}

/// Which limits the engine compiles into guest code. Both are on by default, and a [`Host`]
/// built with [`Host::new`] always has both; turning one off is for measuring its cost.
///
/// [`Host`]: crate::Host
/// [`Host::new`]: crate::Host::new
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metering {
    /// Fuel metering (`Policy::fuel`). Off: a policy with a fuel limit is refused at start.
    pub fuel: bool,
    /// Epoch checks (the in-guest deadline check and the 10 ms yield to tokio). Off: only the
    /// outer timer enforces a deadline, so a guest spinning in wasm runs on past it.
    pub epochs: bool,
}

impl Default for Metering {
    fn default() -> Self {
        Self {
            fuel: true,
            epochs: true,
        }
    }
}

impl Metering {
    /// Both limits compiled in: the default.
    pub fn all() -> Self {
        Self::default()
    }
    /// Set fuel metering on or off.
    pub fn fuel(mut self, on: bool) -> Self {
        self.fuel = on;
        self
    }
    /// Set epoch checks on or off.
    pub fn epochs(mut self, on: bool) -> Self {
        self.epochs = on;
        self
    }
}

/// One engine, its linkers, and the compiled plugins it has seen.
pub(crate) struct Sandbox {
    engine: Engine,
    metering: Metering,
    /// Built on first use: a process that only runs components never links preview 1, and
    /// one that runs a native plugin links neither.
    linker2: OnceLock<wasmtime::component::Linker<State2>>,
    linker1: OnceLock<wasmtime::Linker<State1>>,
    cache: Option<ArtifactCache>,
    loaded: Mutex<HashMap<String, Compiled>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

fn engine_err(e: impl std::fmt::Display) -> HostError {
    HostError::Engine {
        message: e.to_string(),
    }
}

impl Sandbox {
    /// What starts export instances of `compiled`, if it is a component.
    pub(crate) fn exports_runner(&self, compiled: &Compiled) -> Option<exports::ExportsRunner> {
        match compiled {
            Compiled::Component { pre, indices, .. } => Some(exports::ExportsRunner {
                pre: pre.clone(),
                indices: indices.clone(),
                metering: self.metering,
            }),
            Compiled::Module { .. } => None,
        }
    }

    pub(crate) fn new(
        cache_dir: Option<&Path>,
        allocator: &InstanceAllocator,
        metering: Metering,
    ) -> Result<Self, HostError> {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(metering.fuel);
        config.epoch_interruption(metering.epochs);
        // The allocator does not change generated code: both strategies share a cached
        // artifact (the cache key hashes only codegen settings).
        config.allocation_strategy(pool::strategy(allocator));
        let engine = Engine::new(&config).map_err(engine_err)?;
        if metering.epochs {
            spawn_epoch_ticker(&engine);
        }
        let cache = cache_dir.map(|d| ArtifactCache::new(d, &engine));
        Ok(Self {
            engine,
            metering,
            linker2: OnceLock::new(),
            linker1: OnceLock::new(),
            cache,
            loaded: Mutex::new(HashMap::new()),
        })
    }

    /// The preview 2 linker, built on first use.
    fn linker2(&self) -> Result<&wasmtime::component::Linker<State2>, HostError> {
        if let Some(l) = self.linker2.get() {
            return Ok(l);
        }
        let mut linker = wasmtime::component::Linker::new(&self.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_err)?;
        open_files::link_p2(&mut linker).map_err(engine_err)?;
        sockets::link_p2(&mut linker).map_err(engine_err)?;
        disk_quota::link_p2(&mut linker).map_err(engine_err)?;
        Ok(self.linker2.get_or_init(|| linker))
    }

    /// The preview 1 linker, built on first use.
    fn linker1(&self) -> Result<&wasmtime::Linker<State1>, HostError> {
        if let Some(l) = self.linker1.get() {
            return Ok(l);
        }
        let mut linker = wasmtime::Linker::new(&self.engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut State1| &mut s.wasi)
            .map_err(engine_err)?;
        open_files::link_p1(&mut linker).map_err(engine_err)?;
        Ok(self.linker1.get_or_init(|| linker))
    }

    /// Compile (or fetch) the plugin whose sha256 is `sha_hex`. With `bytes` (the file's
    /// contents) it compiles when no cache holds it; without, it returns `None` instead, and
    /// the caller reads the file and asks again.
    pub(crate) fn load(
        &self,
        path: &Path,
        bytes: Option<&[u8]>,
        sha_hex: &str,
        kind: WasmKind,
    ) -> Result<Option<(Compiled, LoadSource, Option<String>)>, HostError> {
        if let Some(c) = self
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sha_hex)
        {
            return Ok(Some((c.clone(), LoadSource::Memory, None)));
        }
        let compile_err = |e: wasmtime::Error| HostError::Compile {
            path: path.to_owned(),
            message: format!("{e:#}"),
        };
        let (compiled, source, note) = match kind {
            WasmKind::Component => {
                let Some((component, source, note)) = self
                    .cached::<Component>(bytes, sha_hex)
                    .map_err(compile_err)?
                else {
                    return Ok(None);
                };
                let ty = component.component_type();
                let imports = ty
                    .imports(&self.engine)
                    .map(|(n, _)| n.to_owned())
                    .collect();
                let exports = ty
                    .exports(&self.engine)
                    .map(|(n, _)| n.to_owned())
                    .collect();
                let pre = self
                    .linker2()?
                    .instantiate_pre(&component)
                    .map_err(compile_err)?;
                let command = CommandPre::new(pre.clone()).ok();
                let (functions, indices) = exports::functions(&component, &self.engine);
                (
                    Compiled::Component {
                        pre,
                        command,
                        functions: Arc::new(functions),
                        indices: Arc::new(indices),
                        imports,
                        exports,
                    },
                    source,
                    note,
                )
            }
            WasmKind::CoreModule => {
                let Some((module, source, note)) =
                    self.cached::<Module>(bytes, sha_hex).map_err(compile_err)?
                else {
                    return Ok(None);
                };
                let imports = module
                    .imports()
                    .map(|i| format!("{}#{}", i.module(), i.name()))
                    .collect();
                let exports = module.exports().map(|e| e.name().to_owned()).collect();
                let pre = self
                    .linker1()?
                    .instantiate_pre(&module)
                    .map_err(compile_err)?;
                (
                    Compiled::Module {
                        pre,
                        imports,
                        exports,
                    },
                    source,
                    note,
                )
            }
        };
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sha_hex.to_owned(), compiled.clone());
        Ok(Some((compiled, source, note)))
    }

    /// Load the artifact the disk cache holds for `sha_hex` (mapped, not read: wasmtime's
    /// `deserialize_file` maps the file), or compile `bytes`; `None` if neither can be done.
    fn cached<A: Artifact>(
        &self,
        bytes: Option<&[u8]>,
        sha_hex: &str,
    ) -> wasmtime::Result<Option<(A, LoadSource, Option<String>)>> {
        let mut mismatch = None;
        if let Some(cache) = &self.cache {
            let path = cache.path_for(sha_hex);
            if !path.exists() {
                // No artifact under this engine's key, but perhaps one compiled by another
                // machine or with other settings (an image's /cache built elsewhere):
                // wasmtime checks its header against this engine and this CPU, so it is used
                // if it fits, and if none does, why not is said once, by the caller.
                for other in cache.others_for(sha_hex) {
                    // SAFETY: as below; wasmtime refuses an artifact whose settings or CPU
                    // features this engine and machine do not have before using its code.
                    #[allow(unsafe_code)]
                    match unsafe { A::load(&self.engine, &other) } {
                        Ok(a) => return Ok(Some((a, LoadSource::DiskCache, None))),
                        Err(e) => {
                            mismatch.get_or_insert_with(|| {
                                format!(
                                    "{} does not fit this engine's settings or this CPU: {e:#}",
                                    other.display()
                                )
                            });
                        }
                    }
                }
            } else {
                // SAFETY: the artifact is one this process family wrote itself (atomically, into
                // a 0700 directory keyed by content hash and engine settings), and wasmtime checks
                // its header against this engine's version and settings before using it.
                #[allow(unsafe_code)]
                let loaded = unsafe { A::load(&self.engine, &path) };
                match loaded {
                    Ok(a) => return Ok(Some((a, LoadSource::DiskCache, None))),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "discarding unusable cached artifact: {e}")
                    }
                }
            }
        }
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let artifact = A::compile(&self.engine, bytes)?;
        let stored = self.store_artifact(sha_hex, artifact.serialize());
        // One message for the whole story: the artifact that did not fit, and whether the
        // compiled one could be kept (in a read-only image it cannot: every start compiles).
        let note = mismatch.map(|m| match stored {
            Err(e) => format!(
                "{m}; and the cache cannot keep the compiled one ({e}), so every start compiles"
            ),
            Ok(()) => m,
        });
        Ok(Some((artifact, LoadSource::Compiled, note)))
    }

    /// A cache that cannot be written costs a recompile next time, never a failed load: the
    /// error is logged, and returned for the caller's message.
    fn store_artifact(
        &self,
        sha_hex: &str,
        artifact: wasmtime::Result<Vec<u8>>,
    ) -> Result<(), String> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        match artifact
            .map_err(|e| e.to_string())
            .and_then(|b| cache.store(sha_hex, &b).map_err(|e| e.to_string()))
        {
            Ok(path) => {
                tracing::debug!(path = %path.display(), "cached compiled artifact");
                Ok(())
            }
            Err(e) => {
                tracing::warn!("could not cache compiled artifact: {e}");
                Err(e)
            }
        }
    }

    /// Check the strict import policy.
    pub(crate) fn check_imports(compiled: &Compiled, policy: &Policy) -> Result<(), HostError> {
        let ImportPolicy::Strict(allowed) = &policy.imports else {
            return Ok(());
        };
        let mut offending: Vec<String> = Vec::new();
        for import in compiled.imports() {
            // Core-module imports are `module#name`; the policy names modules.
            let name = import.split('#').next().unwrap_or(import);
            if !import_allowed(allowed, name) && !offending.iter().any(|o| o == name) {
                offending.push(name.to_owned());
            }
        }
        if offending.is_empty() {
            Ok(())
        } else {
            Err(HostError::ImportsRefused { offending })
        }
    }

    /// Instantiate and start running `compiled` under `policy`.
    pub(crate) async fn start(
        &self,
        compiled: &Compiled,
        policy: &Policy,
        argv0: &str,
        stderr_mode: StderrMode,
        tail_lines: usize,
        meter: Arc<Meter>,
    ) -> Result<Transport, HostError> {
        Self::check_imports(compiled, policy)?;
        let (host_in, guest_in) = stdio::stdin_pipe(PIPE_BYTES);
        let (guest_out, host_out) = stdio::stdout_pipe(PIPE_BYTES);
        let (guest_err, host_err) = stdio::stdout_pipe(PIPE_BYTES);
        let resolver = Arc::new(
            Resolver::new(policy.net.clone(), policy.audit.clone()).with_tape(policy.tape.clone()),
        );
        let builder = wasi_builder(policy, argv0, guest_in, guest_out, guest_err, &resolver)?;

        let denied = Arc::new(AtomicBool::new(false));
        let limiter = Limiter::new(policy, denied.clone(), meter.clone());
        let started = Instant::now();
        let deadline = policy.deadline.map(|d| (started + d, d));
        let stderr = StderrTail::new(tail_lines);
        let stderr_task = tokio::spawn(stderr.clone().drain(
            host_err,
            stderr_mode,
            argv0.to_owned(),
        ));
        let (exit_tx, exit_rx) = watch::channel(None);
        let (kill, kill_rx) = KillSwitch::new();
        let limits = Limits {
            fuel: policy.fuel,
            meter,
            max_memory: policy.max_memory,
            deadline,
            denied,
        };

        match compiled {
            Compiled::Component { command, .. } => {
                let Some(pre) = command else {
                    return Err(HostError::Instantiate {
                        message: "the component does not export wasi:cli/run; it exports \
                                  functions (a wasm: oracle: use `--protocol oracle`)"
                            .to_owned(),
                    });
                };
                let mut b = builder;
                let state = State2::new(policy, b.build(), limiter, resolver);
                let mut store = Store::new(&self.engine, state);
                store.limiter(|s| &mut s.limiter);
                arm(&mut store, &limits, self.metering)?;
                let command = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(instantiate_err)?;
                let tail = stderr.clone();
                tokio::spawn(async move {
                    let run = async {
                        command
                            .wasi_cli_run()
                            .call_run(&mut store)
                            .await
                            .map(|r| r.map_err(|()| 1))
                    };
                    let exit = supervise(run, &limits, kill_rx, &tail).await;
                    drop(store); // closes the guest's pipe ends: the host reader sees EOF
                    finish(exit, stderr_task, &tail, exit_tx).await;
                });
            }
            Compiled::Module { pre, .. } => {
                if policy.max_disk_write.is_some()
                    && policy
                        .preopens
                        .iter()
                        .any(|p| p.access == Access::ReadWrite)
                {
                    return Err(HostError::DiskQuotaNeedsComponent);
                }
                let mut b = builder;
                let state = State1 {
                    wasi: b.build_p1(),
                    limiter,
                    open_files: OpenFiles::new(policy.max_open_files, policy.preopens.len()),
                };
                let mut store = Store::new(&self.engine, state);
                store.limiter(|s| &mut s.limiter);
                arm(&mut store, &limits, self.metering)?;
                let instance = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(instantiate_err)?;
                let start = instance
                    .get_typed_func::<(), ()>(&mut store, "_start")
                    .map_err(|e| HostError::Instantiate {
                        message: format!("{e:#}"),
                    })?;
                let tail = stderr.clone();
                tokio::spawn(async move {
                    let run = async { start.call_async(&mut store, ()).await.map(Ok) };
                    let exit = supervise(run, &limits, kill_rx, &tail).await;
                    drop(store);
                    finish(exit, stderr_task, &tail, exit_tx).await;
                });
            }
        }
        Ok(Transport {
            stdin: PluginStdin::Guest(Box::pin(host_in)),
            stdout: PluginStdout::Guest(Box::pin(host_out)),
            exit: exit_rx,
            kill,
            stderr,
            pid: None,
            plugin_depth: 0,
        })
    }
}

/// What the artifact cache holds: a compiled component or core module.
trait Artifact: Sized {
    /// Load a serialized artifact.
    ///
    /// # Safety
    /// `path` must hold an artifact produced by `serialize` of a compatible engine (wasmtime
    /// trusts its machine code).
    #[allow(unsafe_code)]
    unsafe fn load(engine: &Engine, path: &Path) -> wasmtime::Result<Self>;
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
    fn serialize(&self) -> wasmtime::Result<Vec<u8>>;
}

/// `Component` and `Module` have the same inherent `deserialize_file`, `from_binary` and
/// `serialize`: the trait is those.
macro_rules! artifact {
    ($($t:ident),*) => {$(
        #[allow(unsafe_code)]
        impl Artifact for $t {
            unsafe fn load(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
                // SAFETY: forwarded to the caller (see the trait).
                unsafe { $t::deserialize_file(engine, path) }
            }
            fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
                $t::from_binary(engine, bytes)
            }
            fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
                $t::serialize(self)
            }
        }
    )*};
}

artifact!(Component, Module);

/// The limits one store runs under.
struct Limits {
    fuel: Fuel,
    meter: Arc<Meter>,
    max_memory: Option<u64>,
    deadline: Option<(Instant, Duration)>,
    denied: Arc<AtomicBool>,
}

fn arm<T>(store: &mut Store<T>, limits: &Limits, metering: Metering) -> Result<(), HostError> {
    if !metering.fuel {
        if limits.fuel != Fuel::Unlimited {
            return Err(engine_err(
                "a fuel limit needs fuel metering, which this host's engine has off",
            ));
        }
    } else if let Fuel::PerRequest(budget) = limits.fuel {
        store.set_fuel(budget).map_err(engine_err)?;
        // Re-arm at the guest's first step back from a host call (typically the stdin read
        // that delivered the request) after a new request began. A guest blocked on input
        // burns no fuel, so idle time between requests is never billed.
        let meter = limits.meter.clone();
        let mut seen = meter.requests.load(Ordering::Relaxed);
        store.call_hook(move |mut ctx, hook| {
            if matches!(hook, CallHook::ReturningFromHost) {
                let now = meter.requests.load(Ordering::Relaxed);
                if now != seen {
                    seen = now;
                    ctx.set_fuel(budget)?;
                }
            }
            Ok(())
        });
    } else {
        store
            .set_fuel(limits.fuel.limit().unwrap_or(u64::MAX))
            .map_err(engine_err)?;
    }
    if !metering.epochs {
        return Ok(());
    }
    // Every epoch tick, yield to tokio (so a spinning guest never starves the runtime and a
    // kill is noticed) and check the deadline from inside the guest.
    let deadline = limits.deadline.map(|(at, _)| at);
    store.epoch_deadline_callback(move |_| match deadline {
        Some(at) if Instant::now() >= at => Err(wasmtime::Error::new(DeadlineHit)),
        _ => Ok(UpdateDeadline::Yield(1)),
    });
    store.set_epoch_deadline(1);
    Ok(())
}

/// Run the guest to its end, a kill, or the deadline; classify how it ended.
async fn supervise(
    run: impl Future<Output = wasmtime::Result<Result<(), i32>>>,
    limits: &Limits,
    mut kill_rx: watch::Receiver<bool>,
    tail: &StderrTail,
) -> Exit {
    // The outer timer covers a guest blocked in a host call (a stdin read, a sleep), where
    // no epoch check runs.
    let timer = async {
        match limits.deadline {
            Some((at, _)) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = run => classify(r, limits, tail),
        () = timer => Exit::DeadlineExceeded { limit: limits.deadline.map(|(_, d)| d).unwrap_or_default() },
        () = killed(&mut kill_rx) => Exit::Killed { signal: None },
    }
}

fn classify(r: wasmtime::Result<Result<(), i32>>, limits: &Limits, tail: &StderrTail) -> Exit {
    let err = match r {
        Ok(Ok(())) => return Exit::Exited(0),
        Ok(Err(code)) => return Exit::Exited(code),
        Err(e) => e,
    };
    let memory_denied = limits.denied.load(Ordering::Relaxed);
    if let Some(exit) = err.downcast_ref::<I32Exit>() {
        return Exit::Exited(exit.0);
    }
    if err.downcast_ref::<DeadlineHit>().is_some() {
        return Exit::DeadlineExceeded {
            limit: limits.deadline.map(|(_, d)| d).unwrap_or_default(),
        };
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => {
            return Exit::OutOfFuel {
                limit: limits.fuel.limit().unwrap_or(u64::MAX),
            };
        }
        Some(Trap::Interrupt) => {
            return Exit::DeadlineExceeded {
                limit: limits.deadline.map(|(_, d)| d).unwrap_or_default(),
            };
        }
        _ => {}
    }
    // A refused memory.grow returns -1 to the guest; a Rust guest then aborts (a trap).
    if memory_denied {
        return Exit::MemoryLimit {
            limit: limits.max_memory.unwrap_or(0),
        };
    }
    Exit::Trap {
        message: trap_message(&err),
        stderr_tail: tail.lines(),
    }
}

/// `wasm trap: wasm `unreachable` instruction executed (in abort)`: the trap and the innermost
/// named frame.
fn trap_message(err: &wasmtime::Error) -> String {
    let mut msg = match err.downcast_ref::<Trap>() {
        Some(t) => t.to_string(),
        None => err.root_cause().to_string(),
    };
    if let Some(bt) = err.downcast_ref::<wasmtime::WasmBacktrace>()
        && let Some(name) = bt.frames().iter().find_map(|f| f.func_name())
    {
        msg.push_str(&format!(" (in {name})"));
    }
    msg
}

fn wasi_builder(
    policy: &Policy,
    argv0: &str,
    stdin: stdio::GuestStdin,
    stdout: stdio::GuestStdout,
    stderr: stdio::GuestStdout,
    resolver: &Arc<Resolver>,
) -> Result<WasiCtxBuilder, HostError> {
    let mut b = WasiCtxBuilder::new();
    b.stdin(stdin).stdout(stdout).stderr(stderr);
    b.arg(argv0);
    for a in &policy.args {
        b.arg(a);
    }
    for (k, v) in &policy.env {
        b.env(k, v);
    }
    for p in &policy.preopens {
        if std::fs::metadata(&p.host).is_ok_and(|m| !m.is_dir()) {
            return Err(HostError::Preopen {
                host: p.host.clone(),
                message: "not a directory: a wasm plugin is granted directories; a single file can be granted only to a native plugin".to_owned(),
            });
        }
        let perms = match p.access {
            Access::ReadOnly => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        b.preopened_dir(&p.host, &p.guest, perms)
            .map_err(|e| HostError::Preopen {
                host: p.host.clone(),
                message: format!("{e:#}"),
            })?;
    }
    if let Some(seed) = policy.deterministic {
        determinism::apply(&mut b, seed);
    }
    // The whole wasi:sockets world is linked (toolchains import it unconditionally); what
    // the guest may use of it is the allow-list's (`sockets.rs`), nothing when it is empty.
    sockets::configure(&mut b, resolver);
    Ok(b)
}

fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    // One thread per Sandbox (not per process): it ends when the engine is dropped.
    let spawned = std::thread::Builder::new()
        .name("sandpipe-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(
            "could not start the epoch ticker; deadlines fall back to the outer timer: {e}"
        );
    }
}
