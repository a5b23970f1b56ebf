//! Typed errors and outcomes of the host layer.

use std::path::PathBuf;

use sandpipe_proto::frame::FrameError;
use thiserror::Error;

pub use sandpipe_proto::stopped::{Exit, Stopped};

/// Errors while loading or starting a plugin.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HostError {
    /// The plugin file could not be read.
    #[error("reading plugin {}: {source}", path.display())]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The plugin file is not wasm, and the host was not set up to run such a file natively,
    /// outside the sandbox ([`HostOptions::allow_native_unsandboxed`](crate::HostOptions)).
    #[error(
        "plugin {} is not a wasm component or module; running it natively, unsandboxed, needs HostOptions::allow_native_unsandboxed",
        path.display()
    )]
    NativeNotAllowed {
        /// The plugin file.
        path: PathBuf,
    },
    /// wasmtime refused the module or component.
    #[error("compiling plugin {}: {message}", path.display())]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// wasmtime's message.
        message: String,
    },
    /// Strict import policy: the component imports interfaces outside the allowed set.
    #[error("plugin imports interfaces outside the allowed set: {}", offending.join(", "))]
    ImportsRefused {
        /// The imports that were not allowed, as the component names them.
        offending: Vec<String>,
    },
    /// A preopened directory could not be opened.
    #[error("preopening {}: {message}", host.display())]
    Preopen {
        /// The host directory.
        host: PathBuf,
        /// Why it failed.
        message: String,
    },
    /// [`Policy::max_disk_write`](crate::Policy::max_disk_write) with a read-write preopen, for
    /// a core module (WASI p1): its file writes happen inside wasmtime-wasi's p1 code, where
    /// they cannot be counted.
    #[error(
        "a disk-write quota needs a component (WASI 0.2): this plugin is a core module (WASI p1), \
         whose writes cannot be counted; drop --max-disk-write or make every --dir read-only (:ro)"
    )]
    DiskQuotaNeedsComponent,
    /// The engine could not be configured.
    #[error("configuring wasmtime: {message}")]
    Engine {
        /// wasmtime's message.
        message: String,
    },
    /// Instantiation failed (for example a memory cap below the module's initial memory).
    #[error("instantiating plugin: {message}")]
    Instantiate {
        /// wasmtime's message.
        message: String,
    },
    /// Landlock is available but the confinement of a native plugin could not be built.
    #[error("confining native plugin {} with Landlock: {message}", program.display())]
    Landlock {
        /// The program.
        program: PathBuf,
        /// What failed.
        message: String,
    },
    /// The pooling allocator has no free slot: as many wasm sessions are live as
    /// [`Pooling::max_sessions`](crate::Pooling) allows (or one of its per-kind totals is
    /// used up). Ending a session frees its slots.
    #[error("instantiating plugin: {message}")]
    PoolExhausted {
        /// wasmtime's message, naming the limit and what ran out.
        message: String,
    },
    /// A native plugin was allowed hosts (`Policy::net`), but the kernel gives it no network
    /// namespace: without one, the allow-list could not be enforced by host.
    #[error(
        "native plugin {} needs its own network namespace for --allow-net, and this kernel gives none ({reason}); run a wasm build, or drop --allow-net",
        program.display()
    )]
    NativeNetworkNeedsNamespaces {
        /// The program.
        program: PathBuf,
        /// Why there are no namespaces.
        reason: String,
    },
    /// The system-call filter of a native plugin could not be compiled.
    #[error("filtering the system calls of native plugin {}: {message}", program.display())]
    Seccomp {
        /// The program.
        program: PathBuf,
        /// What failed.
        message: String,
    },
    /// A native plugin could not be spawned.
    #[error("spawning native plugin {}: {source}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
}

/// Errors on a running session.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The plugin wrote bytes to stdout that are not a valid frame. Frames before them were
    /// delivered; the stream is now unusable.
    #[error("bad frame from plugin: {error}")]
    BadFrameFromPlugin {
        /// What was wrong.
        error: FrameError,
        /// The plugin's last stderr lines.
        stderr_tail: Vec<String>,
    },
    /// A frame given to `send` is not valid for the session's framing.
    #[error("bad frame to plugin: {0}")]
    BadFrameToPlugin(FrameError),
    /// The plugin no longer reads its stdin: it exited, was stopped, or closed stdin.
    /// [`crate::Session::wait`] tells how it ended.
    #[error("plugin stdin is closed")]
    StdinClosed,
    /// `send` after `close_stdin`.
    #[error("stdin was already closed by the host")]
    AlreadyClosed,
    /// Reading the plugin's stdout failed.
    #[error("reading plugin stdout: {0}")]
    Io(#[source] std::io::Error),
}

/// Errors starting `sandpipe serve`'s endpoint ([`crate::serve`]): each names the setting and
/// the value at fault. Once it runs, a request's failure is an HTTP answer, never an error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listening address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The IO error.
        source: std::io::Error,
    },
    /// A non-loopback address without authentication: anyone who reaches it could start
    /// instances.
    #[error(
        "listening on {addr} (not a loopback address) needs --auth-token-file or --jwks: without them anyone who reaches the address could start instances"
    )]
    OpenWithoutAuth {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// The token file could not be read.
    #[error("reading the token file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A line of the token file is not `PRINCIPAL TOKEN`.
    #[error("{}:{line}: {reason}", path.display())]
    TokenLine {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The JWKS file could not be read, or holds no key a resource server can verify with.
    #[error("the JWKS file {}: {reason}", path.display())]
    Jwks {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `--jwks` without what a token is checked against, or with `--auth-token-file` too.
    #[error("{0}")]
    AuthOptions(String),
    /// Options that do not go together (`--share` or `--warm` with principals' own tools).
    #[error("{0}")]
    Conflict(String),
    /// The record directory could not be created.
    #[error("creating the record directory {}: {source}", path.display())]
    RecordDir {
        /// The directory.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
}

/// Why a session's recording (`--record`) stopped taking lines. The recording is never cut
/// silently: the first of these is written into it as its last line, and every later write
/// (frames and network alike) gets it again.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The recording would grow past `--max-record`.
    #[error("the recording exceeds --max-record {limit} bytes (a line would take it to {got})")]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
        /// What the recording would have held with the line.
        got: u64,
    },
    /// The file could not be written.
    #[error("writing the recording: {message}")]
    Write {
        /// The IO error, in words.
        message: String,
    },
}
