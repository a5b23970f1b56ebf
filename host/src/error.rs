//! Typed errors and outcomes of the host layer.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use sandpipe_proto::frame::FrameError;
use thiserror::Error;

/// How a plugin ended. Everything but [`Exit::Exited`] means the host stopped it or it crashed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// The plugin exited on its own with this code (returning from `main` is 0).
    ///
    /// Under WASI preview 2, `std::process::exit(n)` reports every non-zero `n` as 1; a guest
    /// keeps its code with `wasi:cli/exit.exit-with-code` (`sandpipe_guest::exit`).
    Exited(i32),
    /// The plugin used up its fuel budget (wasm only).
    OutOfFuel {
        /// The budget that was armed.
        limit: u64,
    },
    /// The plugin needed more memory than the cap allowed, and died of it.
    MemoryLimit {
        /// The cap, in bytes.
        limit: u64,
    },
    /// A native plugin used up its CPU time (`RLIMIT_CPU`, [`crate::Policy::max_cpu_time`]):
    /// the kernel's SIGXCPU, or its SIGKILL at the hard limit one second later for a plugin
    /// that ignores SIGXCPU. The native counterpart of [`Exit::OutOfFuel`].
    CpuTimeLimit {
        /// The CPU time the kernel allowed (whole seconds).
        limit: Duration,
    },
    /// The plugin ran past its wall-clock deadline and was stopped.
    DeadlineExceeded {
        /// The deadline, measured from the start of the session.
        limit: Duration,
    },
    /// The plugin crashed: a wasm trap (a Rust panic or abort inside the guest, an
    /// out-of-bounds access, a stack overflow), or a native plugin killed by a crash signal.
    Trap {
        /// The trap as wasmtime reports it, or the signal for a native plugin.
        message: String,
        /// The plugin's last stderr lines.
        stderr_tail: Vec<String>,
    },
    /// The host killed the plugin (shutdown grace period over, session dropped, explicit kill),
    /// or a native plugin died of a non-crash signal.
    Killed {
        /// The signal, for native plugins.
        signal: Option<i32>,
    },
}

impl Exit {
    /// True when the plugin exited on its own with code 0.
    pub fn success(&self) -> bool {
        matches!(self, Exit::Exited(0))
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Exited(code) => write!(f, "plugin exited with code {code}"),
            Exit::OutOfFuel { limit } => write!(f, "plugin ran out of fuel (limit {limit})"),
            Exit::MemoryLimit { limit } => {
                write!(
                    f,
                    "plugin exceeded the memory limit of {}",
                    bytesize::ByteSize(*limit).display().iec()
                )
            }
            Exit::DeadlineExceeded { limit } => {
                write!(
                    f,
                    "plugin exceeded its deadline of {}",
                    humantime::format_duration(*limit)
                )
            }
            Exit::CpuTimeLimit { limit } => {
                write!(
                    f,
                    "plugin used up its CPU time of {}",
                    humantime::format_duration(*limit)
                )
            }
            Exit::Trap { message, .. } => write!(f, "plugin trapped: {message}"),
            Exit::Killed { signal: Some(sig) } => write!(f, "plugin was killed by signal {sig}"),
            Exit::Killed { signal: None } => write!(f, "plugin was killed by the host"),
        }
    }
}

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
