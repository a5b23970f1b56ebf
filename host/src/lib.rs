//! sandpipe: run untrusted stdio plugins as sandboxed WASI components, or, unsandboxed, as
//! native processes, behind one session API.
//!
//! ```text
//!   Host::load(path) ──► Plugin ─┬─ Component / CoreModule  (wasmtime: fuel, memory cap,
//!                                │                            deadline, preopens, network
//!                                │                            by allow-list only)
//!                                └─ NativeUnsandboxed        (child process: env, rlimit,
//!                                                             process group, deadline)
//!   Host::start(&plugin, &policy, &options) ──► Session { send, recv, close_stdin,
//!                                                         shutdown, wait ─► Exit }
//! ```
//!
//! The plugin's stdout goes through a framer from `sandpipe-proto` (JSON Lines, CBOR sequence,
//! LSP `Content-Length`) so each protocol keeps its exact framing; its stderr is drained
//! continuously and its last lines are kept for error reports.
//!
//! What it does not do: protocol logic (that is `sandpipe-proto`'s state machines), or any
//! sandboxing of native plugins beyond what [`native`](crate::PluginKind::NativeUnsandboxed)
//! lists.
//!
//! Cargo features, both on by default:
//! - `cli`: the `sandpipe` command line (`sandpipe::cli` and the binary), and with it clap,
//!   anyhow and tracing-subscriber; a library user can leave it off;
//! - `registry`: `oci://` references, `sandpipe push` and `pull` ([`registry`]); without it
//!   plugins are paths only.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use sandpipe::{Fuel, Host, Policy, SessionOptions};
//! use sandpipe_proto::frame::Framing;
//! use std::time::Duration;
//!
//! let host = Host::new()?;
//! let plugin = host.load("echo-lines.wasm")?;
//! let policy = Policy::default()
//!     .fuel(Fuel::PerSession(1_000_000_000))
//!     .deadline(Duration::from_secs(5));
//! let mut session = host.start(&plugin, &policy, &SessionOptions::framed(Framing::JsonLines)).await?;
//! session.send(br#"{"id":1}"#).await?;
//! assert_eq!(session.recv().await?.as_deref(), Some(&br#"{"id":1}"#[..]));
//! let exit = session.shutdown(Duration::from_secs(1)).await;
//! assert!(exit.success());
//! # Ok(()) }
//! ```

// RpcError carries the exit and stderr tail so every pending caller learns why the plugin
// stopped; it is built once per failed call, never on a hot path, and matching on its fields
// matters more to callers than its size.
#![allow(clippy::result_large_err)]

// The tiers, bottom up (ARCHITECTURE.md, "Layout"): `dist` fetches and verifies plugins;
// `run` loads and runs one, wasm or native, and taps its frames; `speak` speaks a protocol to
// it and supervises it; `exports` serves a component's exported functions as a session;
// `replay` checks or stands in for a recorded session. `policy` and `net` say what a plugin
// may do, and every tier reads them.
mod dist;
mod error;
pub mod exports;
pub mod net;
pub mod policy;
pub mod policy_file;
mod protocol;
pub mod replay;
mod run;
pub mod serve;
mod speak;

#[cfg(feature = "registry")]
pub use dist::registry;
pub use dist::{image, lock, signing, store};
pub use run::record;
pub use speak::{driver, protocols, supervise};

#[cfg(feature = "cli")]
pub mod cli;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub use error::{Exit, HostError, RecordError, ServeError, SessionError, Stopped};
pub use policy::{
    Access, DEFAULT_MAX_MEMORY, DEFAULT_MAX_OPEN_FILES, DEFAULT_MAX_PROCESSES, DocumentError, Fuel,
    ImportPolicy, Policy, PolicyDocument, Preopen,
};
pub use policy_file::{PolicyFile, PolicyFileError};
pub use run::memory_plugin::MemoryPlugin;
pub use run::native::{
    CgroupSupport, LANDLOCK_TARGET_ABI, LandlockSupport, NamespaceSupport, PROXY_PORT,
    StartupGrant, WithheldGrant, startup_grants, withheld_startup_grants,
};
pub use run::sandbox::{
    ExportedFunc, InstanceAllocator, LoadSource, Metering, PoolNeeds, Pooling, default_cache_dir,
};
pub use run::session::{
    NativeStdio, Session, SessionControl, SessionGroup, SessionOptions, SessionReader,
    SessionWriter, TERM_GRACE,
};
pub use run::stderr::{StderrMode, StderrTail};

use run::hash_index::FileStamp;
use run::sandbox::{Compiled, Sandbox, WasmKind};
use run::transport::Meter;
use sha2::{Digest, Sha256};

/// Loads plugins and starts sessions. Holds one wasmtime engine (with its epoch ticker thread),
/// the compiled plugins seen so far, and the on-disk artifact cache. The engine is made on the
/// first wasm plugin (at once with [`InstanceAllocator::Pooling`]): a host that only runs
/// native plugins never pays for one.
#[derive(Debug)]
pub struct Host {
    sandbox: OnceLock<Sandbox>,
    /// What `sandbox` is made with, and one maker at a time.
    engine: Mutex<EngineOptions>,
    /// Plugins loaded so far by path, with the file's identity when it was read: a second
    /// `load` of an unchanged file neither reads nor hashes it again.
    loaded: Mutex<HashMap<PathBuf, (FileStamp, Plugin)>>,
    /// The same rule on disk, across processes (see [`hash_index`]).
    index: Option<run::hash_index::HashIndex>,
    /// [`HostOptions::allow_native_unsandboxed`].
    allow_native: bool,
}

/// What kind of plugin a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginKind {
    /// A WASI preview 2 component (`wasi:cli/run`), sandboxed.
    Component,
    /// A WASI preview 1 core module (`_start`), sandboxed.
    CoreModule,
    /// Anything else: run as a native child process, in the kernel's sandbox where it allows
    /// one (namespaces, seccomp, Landlock), never in wasmtime's: no fuel.
    NativeUnsandboxed,
}

impl PluginKind {
    /// A short name: `component`, `p1 module` or `native (unsandboxed)`.
    pub fn name(self) -> &'static str {
        match self {
            PluginKind::Component => "component",
            PluginKind::CoreModule => "p1 module",
            PluginKind::NativeUnsandboxed => "native (unsandboxed)",
        }
    }
}

/// A loaded plugin: cheap to clone, startable many times.
#[derive(Debug, Clone)]
pub struct Plugin {
    path: PathBuf,
    kind: PluginKind,
    size: u64,
    sha256: String,
    load_source: Option<LoadSource>,
    load_time: Duration,
    compiled: Option<Compiled>,
    cache_mismatch: Option<String>,
}

impl Plugin {
    /// A native program, run as a child process without a sandbox.
    pub fn native_unsandboxed(program: impl Into<PathBuf>) -> Result<Plugin, HostError> {
        let path = resolve_program(&program.into());
        let bytes = std::fs::read(&path).map_err(|source| HostError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(Plugin {
            sha256: hex(&Sha256::digest(&bytes)),
            size: bytes.len() as u64,
            path,
            kind: PluginKind::NativeUnsandboxed,
            load_source: None,
            load_time: Duration::ZERO,
            compiled: None,
            cache_mismatch: None,
        })
    }

    /// The plugin file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Component, core module or native.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }
    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Lowercase hex sha256 of the file.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// Where the compiled code came from (`None` for native plugins).
    pub fn load_source(&self) -> Option<LoadSource> {
        self.load_source
    }
    /// How long loading took (compile, cache read, or in-memory lookup).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }
    /// Why the plugin was compiled although the disk cache held an artifact of it compiled
    /// elsewhere: wasmtime's reason that artifact does not fit this machine or engine (a CPU
    /// feature the build machine had, other codegen settings), and whether the compiled one
    /// could be kept. `None` when nothing was in the way.
    pub fn cache_mismatch(&self) -> Option<&str> {
        self.cache_mismatch.as_deref()
    }
    /// Imports: component interface names (`wasi:cli/stdin@0.2.6`) or `module#name` for a core
    /// module. Empty for native plugins.
    pub fn imports(&self) -> &[String] {
        self.compiled.as_ref().map(Compiled::imports).unwrap_or(&[])
    }
    /// Exports. Empty for native plugins.
    pub fn exports(&self) -> &[String] {
        self.compiled.as_ref().map(Compiled::exports).unwrap_or(&[])
    }
    /// The functions a component exports, by full name with their WIT signatures (every
    /// component has some; a `wasm:` oracle is called through them). Empty for a core module
    /// or a native plugin.
    pub fn functions(&self) -> &[ExportedFunc] {
        self.compiled
            .as_ref()
            .map(Compiled::functions)
            .unwrap_or(&[])
    }
    /// True for a component that exports functions instead of `wasi:cli/run`: a Cairo
    /// `wasm:` oracle, served in process as a session by [`Host::start_speaking`] (see
    /// [`exports::session`]) or called directly with [`exports::oracle::WasmOracle`].
    pub fn exports_functions(&self) -> bool {
        self.compiled
            .as_ref()
            .is_some_and(Compiled::exports_functions)
    }
}

/// How a [`Host`] is set up. Defaults ([`HostOptions::default`]):
/// - `cache_dir`: [`default_cache_dir`] (compiled artifacts are cached on disk);
/// - `allocator`: [`InstanceAllocator::OnDemand`] (no cap on live sessions but
///   `vm.max_map_count`; see [`Pooling`] for many thousands of sessions);
/// - `metering`: fuel and epoch checks compiled in ([`Metering::default`]);
/// - `allow_native_unsandboxed`: `false`, [`Host::load`] refuses a file that is not wasm
///   instead of running it as a native process.
///
/// ```no_run
/// # fn demo() -> Result<(), sandpipe::HostError> {
/// use sandpipe::{Host, HostOptions};
///
/// let host = Host::with_options(&HostOptions::default().cache_dir(None))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostOptions {
    /// Where compiled artifacts are cached; `None` compiles every plugin once per process.
    pub cache_dir: Option<PathBuf>,
    /// How wasm instances get their memories, tables and stacks.
    pub allocator: InstanceAllocator,
    /// Whether fuel and epoch checks are compiled in (both, by default; see [`Metering`]).
    pub metering: Metering,
    /// Whether [`Host::load`] may turn a file that is not wasm into a
    /// [`PluginKind::NativeUnsandboxed`] plugin, run as a child process outside the sandbox
    /// (`SECURITY.md`, "Native mode"). Off by default: the load fails with
    /// [`HostError::NativeNotAllowed`].
    pub allow_native_unsandboxed: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            allocator: InstanceAllocator::OnDemand,
            metering: Metering::default(),
            allow_native_unsandboxed: false,
        }
    }
}

impl HostOptions {
    /// Set the artifact cache directory, or `None` for no disk cache.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Take wasm instances from a pool sized by `pooling` (see [`Pooling`]).
    pub fn pooling(mut self, pooling: Pooling) -> Self {
        self.allocator = InstanceAllocator::Pooling(pooling);
        self
    }

    /// Compile fuel metering and epoch checks in or out. Only for measuring what each limit
    /// costs: with fuel off a policy's fuel limit is refused at start; with epochs off a
    /// spinning guest is not interrupted at its deadline (a guest blocked in a host call still
    /// is). The default has both on.
    pub fn metering(mut self, metering: Metering) -> Self {
        self.metering = metering;
        self
    }

    /// Let [`Host::load`] run a file that is not wasm natively, without a sandbox (see
    /// [`HostOptions::allow_native_unsandboxed`]).
    pub fn allow_native_unsandboxed(mut self, allow: bool) -> Self {
        self.allow_native_unsandboxed = allow;
        self
    }
}

/// What a [`Host`]'s wasm sandbox is made with.
#[derive(Debug)]
struct EngineOptions {
    cache_dir: Option<PathBuf>,
    allocator: InstanceAllocator,
    metering: Metering,
}

impl EngineOptions {
    fn sandbox(&self) -> Result<Sandbox, HostError> {
        Sandbox::new(self.cache_dir.as_deref(), &self.allocator, self.metering)
    }
}

impl Host {
    /// A host with the default options ([`HostOptions::default`]); shorthand for
    /// `Host::with_options(&HostOptions::default())`.
    pub fn new() -> Result<Host, HostError> {
        Self::with_options(&HostOptions::default())
    }

    /// A host set up by `options`. With [`InstanceAllocator::Pooling`] this reserves the
    /// pool's address space now, and fails with [`HostError::Engine`] if it does not fit.
    pub fn with_options(options: &HostOptions) -> Result<Host, HostError> {
        let engine = EngineOptions {
            cache_dir: options.cache_dir.clone(),
            allocator: options.allocator.clone(),
            metering: options.metering,
        };
        let sandbox = OnceLock::new();
        if matches!(options.allocator, InstanceAllocator::Pooling(_)) {
            let _ = sandbox.set(engine.sandbox()?);
        }
        Ok(Host {
            sandbox,
            engine: Mutex::new(engine),
            loaded: Mutex::new(HashMap::new()),
            index: options
                .cache_dir
                .as_deref()
                .map(run::hash_index::HashIndex::new),
            allow_native: options.allow_native_unsandboxed,
        })
    }

    /// The wasm sandbox, made now if this is its first use.
    pub(crate) fn sandbox(&self) -> Result<&Sandbox, HostError> {
        if let Some(sandbox) = self.sandbox.get() {
            return Ok(sandbox);
        }
        let engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sandbox) = self.sandbox.get() {
            return Ok(sandbox);
        }
        let made = engine.sandbox()?;
        Ok(self.sandbox.get_or_init(|| made))
    }

    /// Load a plugin. A WASI component or core module (told by its header) is compiled, or
    /// taken from the caches. Anything else becomes [`PluginKind::NativeUnsandboxed`] when the
    /// host allows it ([`HostOptions::allow_native_unsandboxed`]), and is refused with
    /// [`HostError::NativeNotAllowed`] otherwise. A bare name without `/` that is not a file is
    /// looked up in `PATH`, as a shell would.
    ///
    /// Loading a file again while it is unchanged (same inode, size, mtime and ctime) returns
    /// the plugin loaded before without reading or hashing it, with [`LoadSource::Memory`]
    /// (a file modified in the last two seconds is always read again). With a cache directory
    /// the same rule holds across processes: an on-disk index maps the file's identity to its
    /// sha256, so an unchanged wasm file whose compiled artifact is cached, or an unchanged
    /// native program (an interpreter: node's binary is 99 MB), is not read or hashed at all
    /// (only its 8-byte header is read).
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Plugin, HostError> {
        let started = Instant::now();
        let path = resolve_program(path.as_ref());
        let stamp = FileStamp::of(&path).map_err(|source| HostError::Read {
            path: path.clone(),
            source,
        })?;
        if let Some((seen, plugin)) = self.memo().get(&path)
            && *seen == stamp
        {
            let mut plugin = plugin.clone();
            plugin.load_source = plugin.load_source.map(|_| LoadSource::Memory);
            plugin.load_time = started.elapsed();
            return Ok(plugin);
        }
        let plugin = match self.load_indexed(&path, &stamp, started)? {
            Some(plugin) => plugin,
            None => {
                let plugin = self.read_and_load(path.clone(), started)?;
                let indexed =
                    plugin.compiled.is_some() || plugin.kind == PluginKind::NativeUnsandboxed;
                if let Some(index) = &self.index
                    && indexed
                    && !stamp.racy()
                {
                    index.put(&stamp, &plugin.sha256);
                }
                plugin
            }
        };
        if !stamp.racy() {
            self.memo().insert(path, (stamp, plugin.clone()));
        }
        Ok(plugin)
    }

    /// A wasm plugin whose identity the on-disk index knows and whose compiled artifact is
    /// cached (on disk or in memory), without reading more than its header; `None` otherwise.
    fn load_indexed(
        &self,
        path: &Path,
        stamp: &FileStamp,
        started: Instant,
    ) -> Result<Option<Plugin>, HostError> {
        let Some(index) = &self.index else {
            return Ok(None);
        };
        if stamp.racy() {
            return Ok(None);
        }
        let Some(sha256) = index.get(stamp) else {
            return Ok(None);
        };
        let mut header = [0u8; 8];
        let read = std::fs::File::open(path).and_then(|mut f| {
            use std::io::Read as _;
            f.read_exact(&mut header)
        });
        if read.is_err() {
            return Ok(None);
        }
        let Some(wasm_kind) = run::sandbox::detect(&header) else {
            // A native program (an interpreter such as node's 99 MB binary) is run, not
            // compiled: its known digest is all a start needs. A host that refuses native
            // plugins says so from the full load.
            if !self.allow_native {
                return Ok(None);
            }
            tracing::debug!(plugin = %path.display(), "native plugin's hash taken from the index");
            return Ok(Some(Plugin {
                path: path.to_owned(),
                kind: PluginKind::NativeUnsandboxed,
                size: stamp.len,
                sha256,
                load_source: None,
                load_time: started.elapsed(),
                compiled: None,
                cache_mismatch: None,
            }));
        };
        let Some((compiled, source, cache_mismatch)) =
            self.sandbox()?.load(path, None, &sha256, wasm_kind)?
        else {
            return Ok(None);
        };
        let load_time = started.elapsed();
        tracing::debug!(plugin = %path.display(), ?source, ?load_time, "loaded plugin by its indexed hash");
        Ok(Some(Plugin {
            path: path.to_owned(),
            kind: match wasm_kind {
                WasmKind::Component => PluginKind::Component,
                WasmKind::CoreModule => PluginKind::CoreModule,
            },
            size: stamp.len,
            sha256,
            load_source: Some(source),
            load_time,
            compiled: Some(compiled),
            cache_mismatch,
        }))
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (FileStamp, Plugin)>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_and_load(&self, path: PathBuf, started: Instant) -> Result<Plugin, HostError> {
        let bytes = std::fs::read(&path).map_err(|source| HostError::Read {
            path: path.clone(),
            source,
        })?;
        let sha256 = hex(&Sha256::digest(&bytes));
        let Some(wasm_kind) = run::sandbox::detect(&bytes) else {
            if !self.allow_native {
                return Err(HostError::NativeNotAllowed { path });
            }
            return Ok(Plugin {
                path,
                kind: PluginKind::NativeUnsandboxed,
                size: bytes.len() as u64,
                sha256,
                load_source: None,
                load_time: started.elapsed(),
                compiled: None,
                cache_mismatch: None,
            });
        };
        let (compiled, source, cache_mismatch) = self
            .sandbox()?
            .load(&path, Some(&bytes), &sha256, wasm_kind)?
            .ok_or_else(|| HostError::Compile {
                path: path.clone(),
                message: "the compiler gave no artifact".to_owned(),
            })?;
        let load_time = started.elapsed();
        tracing::debug!(plugin = %path.display(), ?source, ?load_time, "loaded plugin");
        Ok(Plugin {
            path,
            kind: match wasm_kind {
                WasmKind::Component => PluginKind::Component,
                WasmKind::CoreModule => PluginKind::CoreModule,
            },
            size: bytes.len() as u64,
            sha256,
            load_source: Some(source),
            load_time,
            compiled: Some(compiled),
            cache_mismatch,
        })
    }

    /// Start a session with `plugin` under `policy`. For a session speaking a protocol, where a
    /// component that exports functions is served by sandpipe in process, see
    /// [`Host::start_speaking`]: it lives with the protocols' registry
    /// (`speak/protocols/mod.rs`), since `lib.rs` sits below the tiers that serve exports and
    /// know protocols, and may not import them (`tests/tests/layout.rs`).
    pub async fn start(
        &self,
        plugin: &Plugin,
        policy: &Policy,
        options: &SessionOptions,
    ) -> Result<Session, HostError> {
        let argv0 = run::transport::argv0_for(&plugin.path);
        let meter = Arc::new(Meter::default());
        let transport = match &plugin.compiled {
            Some(compiled) => {
                self.sandbox()?
                    .start(
                        compiled,
                        policy,
                        &argv0,
                        options.stderr,
                        options.stderr_tail_lines,
                        meter.clone(),
                    )
                    .await?
            }
            None => run::native::spawn(
                &plugin.path,
                policy,
                options.stderr,
                options.stderr_tail_lines,
                options.native_stdio,
            )?,
        };
        if let Some(audit) = &policy.audit {
            audit_limits(audit.clone(), transport.exit.clone());
        }
        Ok(Session::new(transport, options, meter))
    }
}

/// Write the limit that ended a session, if one did, to the audit log.
fn audit_limits(audit: net::AuditLog, mut exit: tokio::sync::watch::Receiver<Option<Exit>>) {
    tokio::spawn(async move {
        let Ok(exit) = exit.wait_for(Option::is_some).await else {
            return;
        };
        let Some(exit) = exit.as_ref() else { return };
        let Some(limit) = net::limit_of(exit) else {
            return;
        };
        audit.record(&net::AuditEvent::Limit {
            limit: limit.to_owned(),
            detail: Some(exit.to_string()),
            request_id: None,
        });
    });
}

fn resolve_program(path: &Path) -> PathBuf {
    if path.exists() || path.components().count() != 1 {
        return path.to_owned();
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(path))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| path.to_owned())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn write_old(path: &Path, bytes: &[u8], age: Duration) {
        std::fs::write(path, bytes).expect("write");
        let f = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        f.set_modified(SystemTime::now() - age).expect("set mtime");
    }

    #[test]
    fn an_unchanged_file_is_not_read_again_and_a_changed_one_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin");
        let old = Duration::from_secs(60);
        write_old(&path, b"#!/bin/sh\ncat\n", old);
        let host = Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true),
        )
        .expect("host");
        let first = host.load(&path).expect("load");
        assert!(host.memo().contains_key(&path), "an old file is memoized");
        let second = host.load(&path).expect("load again");
        assert_eq!(first.sha256(), second.sha256());
        assert_eq!(second.kind(), PluginKind::NativeUnsandboxed);

        // Same size, different bytes, even the same mtime: ctime moved, so it is read again.
        write_old(&path, b"#!/bin/sh\ntac\n", old);
        let third = host.load(&path).expect("load changed");
        assert_eq!(third.sha256(), hex(&Sha256::digest(b"#!/bin/sh\ntac\n")));

        // A replaced file (new inode) is read again too.
        let tmp = dir.path().join("next");
        write_old(&tmp, b"#!/bin/sh\nrev\n", old);
        std::fs::rename(&tmp, &path).expect("replace");
        let fourth = host.load(&path).expect("load replaced");
        assert_eq!(fourth.sha256(), hex(&Sha256::digest(b"#!/bin/sh\nrev\n")));

        // A file that is gone is an error, not the memo.
        std::fs::remove_file(&path).expect("remove");
        assert!(matches!(host.load(&path), Err(HostError::Read { .. })));
    }

    #[test]
    fn a_file_that_is_not_wasm_is_refused_unless_the_host_allows_native() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin");
        std::fs::write(&path, b"#!/bin/sh\ncat\n").expect("write");
        let strict = Host::with_options(&HostOptions::default().cache_dir(None)).expect("host");
        let err = strict.load(&path).expect_err("refused");
        assert!(
            matches!(&err, HostError::NativeNotAllowed { path: p } if *p == path),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("allow_native_unsandboxed"),
            "{err}"
        );
        // Refused every time, not only before a first successful load.
        assert!(matches!(
            strict.load(&path),
            Err(HostError::NativeNotAllowed { .. })
        ));
        let allowing = Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true),
        )
        .expect("host");
        let plugin = allowing.load(&path).expect("allowed");
        assert_eq!(plugin.kind(), PluginKind::NativeUnsandboxed);
    }

    #[test]
    fn a_just_written_file_is_not_memoized() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin");
        std::fs::write(&path, b"#!/bin/sh\ncat\n").expect("write");
        let host = Host::with_options(
            &HostOptions::default()
                .cache_dir(None)
                .allow_native_unsandboxed(true),
        )
        .expect("host");
        host.load(&path).expect("load");
        assert!(!host.memo().contains_key(&path));
        // Rewritten within the same clock tick, same size: still read afresh.
        std::fs::write(&path, b"#!/bin/sh\ntac\n").expect("rewrite");
        let again = host.load(&path).expect("load again");
        assert_eq!(again.sha256(), hex(&Sha256::digest(b"#!/bin/sh\ntac\n")));
    }
}
