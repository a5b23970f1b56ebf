//! How a plugin ended, and why it will never answer: the one description every protocol's
//! failure answer is built from.
//!
//! ```text
//!   host: plugin gone / broke the framing / broke the protocol
//!     └► Stopped { reason, exit, stderr_tail, violation }
//!          ├► jsonrpc::stopped_error(dialect, &s)   JSON-RPC 2.0 and LSP: -32603, data {reason, exit, stderr}
//!          ├► oracle::stopped_error(&s)             the Cairo oracle's OracleError
//!          ├► orchard::stopped_error(method, &s)    Orchard: execute_failed / internal_error, detail = stderr
//!          ├► denobridge::stopped_error(&s)         JSON-RPC 2.0 with the stderr tail
//!          ├► atp::stopped_error(run_id, &s, ..)    an ATP error message for the run
//!          └► finecode::stopped_error(&s)           LSP -32603
//! ```
//!
//! Each protocol's client machine (`fail_pending`), the host's driver, its supervisor and
//! `replay --serve` all answer a request the plugin will never answer through these functions,
//! so an engine sees the same error whichever of them noticed.

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

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
    /// A native plugin with no cgroup of its own had more processes and threads than its
    /// limit, and the host stopped it (with a cgroup, `pids.max` refuses the fork instead and
    /// the plugin runs on).
    ProcessLimit {
        /// The limit, in processes and threads.
        limit: u64,
    },
    /// A native plugin used up its CPU time (`RLIMIT_CPU`, `Policy::max_cpu_time` in the host):
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
            Exit::ProcessLimit { limit } => write!(
                f,
                "plugin exceeded the limit of {limit} processes and threads (with no cgroup to \
                 refuse the fork, the host stopped it)"
            ),
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

impl Exit {
    /// A machine-readable rendering: `{"kind": "exited", "code": 3}`,
    /// `{"kind": "out_of_fuel", "limit": n}`, and so on.
    pub fn to_json(&self) -> Value {
        match self {
            Exit::Exited(code) => json!({"kind": "exited", "code": code}),
            Exit::OutOfFuel { limit } => json!({"kind": "out_of_fuel", "limit": limit}),
            Exit::MemoryLimit { limit } => json!({"kind": "memory_limit", "limit": limit}),
            Exit::ProcessLimit { limit } => json!({"kind": "process_limit", "limit": limit}),
            Exit::DeadlineExceeded { limit } => {
                json!({"kind": "deadline_exceeded", "limit_ms": limit.as_millis() as u64})
            }
            Exit::CpuTimeLimit { limit } => {
                json!({"kind": "cpu_time_limit", "limit_ms": limit.as_millis() as u64})
            }
            Exit::Trap { message, .. } => json!({"kind": "trap", "message": message}),
            Exit::Killed { signal } => json!({"kind": "killed", "signal": signal}),
        }
    }
}

/// Why a plugin will never answer the requests it has pending: it exited or was stopped
/// (`exit`), or it broke the framing or the protocol (`violation`, and the host stopped it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// One line for the engine: the exit's own words (`plugin ran out of fuel (limit 100)`),
    /// or what was broken (`bad frame from plugin: …`, `plugin broke the protocol: …`).
    pub reason: String,
    /// How the plugin ended, once it has.
    pub exit: Option<Exit>,
    /// The plugin's last stderr lines.
    pub stderr_tail: Vec<String>,
    /// True when the plugin broke the framing or the protocol, rather than ending or being
    /// stopped by a limit.
    pub violation: bool,
}

impl Stopped {
    /// The plugin ended (on its own or by a limit): the reason is the exit's own words.
    pub fn ended(exit: Exit, stderr_tail: Vec<String>) -> Self {
        Stopped {
            reason: exit.to_string(),
            exit: Some(exit),
            stderr_tail,
            violation: false,
        }
    }

    /// The plugin broke the framing or the protocol; `exit` is how it ended once stopped.
    pub fn violation(
        reason: impl Into<String>,
        exit: Option<Exit>,
        stderr_tail: Vec<String>,
    ) -> Self {
        Stopped {
            reason: reason.into(),
            exit,
            stderr_tail,
            violation: true,
        }
    }

    /// The host gave up on the plugin for a reason of its own (a request timed out, the
    /// session was cancelled), with the plugin possibly still running.
    pub fn by_host(reason: impl Into<String>, stderr_tail: Vec<String>) -> Self {
        Stopped {
            reason: reason.into(),
            exit: None,
            stderr_tail,
            violation: false,
        }
    }

    /// `{"reason": …, "exit": …, "stderr": […]}`: the `data` of a JSON-RPC error.
    pub fn to_json(&self) -> Value {
        json!({
            "reason": self.reason,
            "exit": self.exit.as_ref().map(Exit::to_json),
            "stderr": self.stderr_tail,
        })
    }

    /// The reason followed by the stderr tail, for protocols whose error is one string
    /// (ATP, Cairo `wasm:` oracles): `reason\nstderr:\nline 1\nline 2`.
    pub fn message_with_tail(&self) -> String {
        if self.stderr_tail.is_empty() {
            return self.reason.clone();
        }
        format!("{}\nstderr:\n{}", self.reason, self.stderr_tail.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_renders_its_exit_and_tail() {
        let s = Stopped::ended(Exit::OutOfFuel { limit: 7 }, vec!["a".into(), "b".into()]);
        assert_eq!(s.reason, "plugin ran out of fuel (limit 7)");
        assert_eq!(
            s.message_with_tail(),
            "plugin ran out of fuel (limit 7)\nstderr:\na\nb"
        );
        assert_eq!(
            s.to_json(),
            json!({"reason": s.reason, "exit": {"kind": "out_of_fuel", "limit": 7}, "stderr": ["a", "b"]})
        );
        let v = Stopped::violation("bad frame from plugin: x", None, vec![]);
        assert!(v.violation);
        assert_eq!(v.message_with_tail(), "bad frame from plugin: x");
    }
}
