//! Scarb's oracle hint service with sandpipe as its `wasm` protocol: Cairo `wasm:` oracles
//! under fuel, deadline and memory limits, with no filesystem, environment or network unless
//! granted.
//!
//! `scarb-oracle-hint-service` (0.1.1, without its default features, so without its own
//! wasmtime) takes protocols through `Protocol { const SCHEME; fn connect(..) }`, and a
//! protocol registered under an existing scheme replaces the built-in one. [`SandpipeWasm`]
//! is that protocol for `wasm`:
//!
//! ```text
//!   OracleHintService::new(Some(executable)).with_protocol::<SandpipeWasm>()
//!     oracle_invoke cheatcode: ByteArray(connection) ByteArray(selector) calldata…
//!       └─ "wasm:<asset>" ─► SandpipeWasm::connect (once per connection string)
//!            asset path checked (no absolute path, no `..` out of the executable's directory)
//!            └─ a worker thread: current-thread runtime + sandpipe::exports::oracle::WasmOracle
//!       └─ Connection::call(selector, calldata) ─► felts, or an error Cairo reads as
//!          oracle::Error ([1, ByteArray(message)])
//! ```
//!
//! The limits come from a [`Limits`] type parameter (a `connect` function has no `self` to
//! carry them): [`DefaultLimits`] is sandpipe's [`Policy::default`] (256 MiB of linear
//! memory; no preopens, environment or sockets) with a 30 s deadline per call, and Scarb's
//! behaviour after a trap (the instance is poisoned). Compiled components are cached on disk
//! (sandpipe's default cache directory), and one wasmtime engine serves every connection of
//! the process.
//!
//! Differences from Scarb's own `wasm` executor, on purpose: no stdin, stdout, environment,
//! network or working directory unless [`Limits::policy`] grants them (Scarb inherits them all
//! and preopens its working directory read-write); calls stop at their limits instead of
//! running forever; an absolute `wasm:/path` is refused (Scarb accepts it); error messages for
//! traps and codec errors are sandpipe's (selector errors and unsupported types read the same).
//!
//! ```no_run
//! use scarb_oracle_hint_service::OracleHintService;
//! use sandpipe_scarb::SandpipeWasm;
//! # let executable = std::path::Path::new("target/execute/app.executable.json");
//! let mut service = OracleHintService::new(Some(executable)).with_protocol::<SandpipeWasm>();
//! # let _ = &mut service;
//! ```

use std::marker::PhantomData;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use sandpipe::exports::oracle::{WasmOracle, WasmOracleOptions};
use sandpipe::{Host, Policy};
use scarb_oracle_hint_service::{ConnectCtx, Connection, Protocol};
use starknet_core::types::Felt as StarkFelt;

/// The per-call deadline of [`DefaultLimits`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The limits and grants every connection of a [`SandpipeWasm`] runs under.
pub trait Limits: 'static {
    /// The sandbox policy: memory cap, fuel per call
    /// ([`Fuel::PerRequest`](sandpipe::Fuel::PerRequest)), preopens, environment. Default:
    /// [`Policy::default`], nothing granted.
    fn policy() -> Policy {
        Policy::default()
    }
    /// Per-call deadline, what happens after a trap, where guest output goes. Default: a
    /// [`DEFAULT_CALL_TIMEOUT`] deadline, poisoning after a trap (as Scarb), guest stdout and
    /// stderr logged with `tracing`.
    fn options() -> WasmOracleOptions {
        WasmOracleOptions::default().call_timeout(Some(DEFAULT_CALL_TIMEOUT))
    }
}

/// See [`Limits`]'s defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultLimits;

impl Limits for DefaultLimits {}

/// The `wasm` protocol on sandpipe, under the limits `L`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandpipeWasm<L: Limits = DefaultLimits>(PhantomData<L>);

impl<L: Limits> Protocol for SandpipeWasm<L> {
    const SCHEME: &'static str = "wasm";

    fn connect(path: &str, ctx: ConnectCtx<'_>) -> Result<Box<dyn Connection + 'static>> {
        refuse_absolute(path)?;
        // Scarb's own lookup: `..` may not leave the executable's directory.
        let asset = ctx.assets.fetch(path)?;
        let connection = SandpipeConnection::start(asset, L::policy(), L::options())?;
        Ok(Box::new(connection))
    }
}

/// Scarb accepts `wasm:/any/path`; an asset must lie beside the executable.
fn refuse_absolute(path: &str) -> Result<()> {
    if Path::new(path)
        .components()
        .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)))
    {
        bail!(
            "invalid asset path `{path}`: an absolute path reaches outside of the base directory"
        );
    }
    Ok(())
}

/// The engine and compiled components, shared by every connection in the process.
fn host() -> Result<&'static Host, String> {
    static HOST: OnceLock<Result<Host, String>> = OnceLock::new();
    HOST.get_or_init(|| Host::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

struct Job {
    selector: String,
    calldata: Vec<sandpipe_proto::oracle::Felt>,
    reply: mpsc::Sender<std::result::Result<Vec<sandpipe_proto::oracle::Felt>, String>>,
}

/// One `wasm:` connection: a worker thread owning a current-thread runtime and the instance,
/// so `Connection::call`, which is synchronous, works whether or not the caller runs inside
/// an async runtime of its own.
struct SandpipeConnection {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl SandpipeConnection {
    fn start(asset: PathBuf, policy: Policy, options: WasmOracleOptions) -> Result<Self> {
        let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<(), String>>();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("sandpipe-wasm-oracle".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("starting a runtime: {e}")));
                        return;
                    }
                };
                let started = host().and_then(|host| {
                    let plugin = host.load(&asset).map_err(|e| e.to_string())?;
                    runtime
                        .block_on(WasmOracle::new(host, &plugin, &policy, options))
                        .map_err(|e| e.to_string())
                });
                let mut oracle = match started {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                while let Ok(job) = jobs_rx.recv() {
                    let answer = runtime
                        .block_on(oracle.invoke(&job.selector, &job.calldata))
                        .map_err(|e| e.to_string());
                    let _ = job.reply.send(answer);
                }
                runtime.block_on(oracle.close());
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                jobs: Some(jobs_tx),
                worker: Some(worker),
            }),
            Ok(Err(message)) => {
                let _ = worker.join();
                bail!("{message}")
            }
            Err(_) => {
                let _ = worker.join();
                bail!("the oracle worker ended before it started")
            }
        }
    }
}

impl Connection for SandpipeConnection {
    fn call(&mut self, selector: &str, calldata: &[StarkFelt]) -> Result<Vec<StarkFelt>> {
        let calldata = calldata
            .iter()
            .map(|f| {
                sandpipe_proto::oracle::Felt::from_be_bytes(&f.to_bytes_be())
                    .map_err(|e| anyhow!("{e}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let (reply, answer) = mpsc::channel();
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| anyhow!("the oracle connection is closed"))?;
        jobs.send(Job {
            selector: selector.to_owned(),
            calldata,
            reply,
        })
        .map_err(|_| anyhow!("the oracle worker has ended"))?;
        match answer.recv() {
            Ok(Ok(felts)) => Ok(felts
                .iter()
                .map(|f| StarkFelt::from_bytes_be(&f.to_be_bytes()))
                .collect()),
            Ok(Err(message)) => Err(anyhow!("{message}")),
            Err(_) => Err(anyhow!("the oracle worker has ended")),
        }
    }
}

impl Drop for SandpipeConnection {
    fn drop(&mut self) {
        // Closing the queue ends the worker, which drops the instance and drains its output.
        self.jobs = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for SandpipeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandpipeConnection").finish_non_exhaustive()
    }
}
