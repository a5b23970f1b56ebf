//! The audit trail (`--audit FILE`): one JSON object per line for each enforcement decision.
//!
//! Every line has `ts` (RFC 3339, UTC, milliseconds) and `event`, then the event's fields:
//!
//! ```text
//! {"ts":"…","event":"net","decision":"allow","via":"proxy","name":"api.test","addr":"127.0.0.1","port":8443,"rule":"api.test:8443"}
//! {"ts":"…","event":"net","decision":"refuse","via":"wasi-sockets","addr":"10.0.0.1","port":80,"reason":"…"}
//! {"ts":"…","event":"net-close","via":"proxy","name":"api.test","addr":"127.0.0.1","port":8443,"bytes_out":517,"bytes_in":4210}
//! {"ts":"…","event":"limit","limit":"memory","detail":"268435456 bytes","request_id":"7"}
//! {"ts":"…","event":"refused","what":"tool","name":"get-env","request_id":"3"}
//! ```
//!
//! Under `sandpipe serve`, each line also has `principal`, the client the instance serves.
//! Fields that do not apply are left out, never `null`. New fields may be added; the ones above
//! keep their names and meaning.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::Serialize;

use crate::error::Exit;

/// Allowed or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Let through.
    Allow,
    /// Refused.
    Refuse,
}

/// Which path a connection took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// A wasm component's `wasi:sockets` (name lookup, TCP connect).
    WasiSockets,
    /// A wasm component's outgoing `wasi:http` request.
    WasiHttp,
    /// A native plugin's connection through sandpipe's proxy (HTTP CONNECT, SOCKS5, or a
    /// plain HTTP request).
    Proxy,
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Via::WasiSockets => "wasi:sockets",
            Via::WasiHttp => "wasi:http",
            Via::Proxy => "proxy",
        })
    }
}

/// One enforcement decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditEvent {
    /// A name lookup or a connection, allowed or refused.
    Net {
        /// Allowed or refused.
        decision: Decision,
        /// Which path.
        via: Via,
        /// The name asked for.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The address connected to.
        #[serde(skip_serializing_if = "Option::is_none")]
        addr: Option<String>,
        /// The port (0 for a name lookup, which has none).
        port: u16,
        /// The rule that allowed it.
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// Why it was refused.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An allowed connection closed, with the bytes it carried.
    NetClose {
        /// Which path.
        via: Via,
        /// The name asked for.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The address connected to.
        addr: String,
        /// The port.
        port: u16,
        /// Bytes from the plugin to the server.
        bytes_out: u64,
        /// Bytes from the server to the plugin.
        bytes_in: u64,
    },
    /// A limit stopped the plugin or a request.
    Limit {
        /// `fuel`, `memory`, `deadline`, `cpu-time`, `request-timeout`, `disk`, `files`.
        limit: String,
        /// The limit's value, as the options give it.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// The request in flight, where the protocol has ids.
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// A request or a tool refused by policy.
    Refused {
        /// `tool` or `request`.
        what: String,
        /// The tool's or the method's name.
        name: String,
        /// The request's id.
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
}

#[derive(Serialize)]
struct Line<'a> {
    ts: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<&'a str>,
    #[serde(flatten)]
    event: &'a AuditEvent,
}

/// An audit log: a file that gets one JSON line per decision, each written whole with one
/// `write` under a lock, so lines from concurrent sessions never interleave. Cloning shares
/// the file. A log for one principal ([`AuditLog::for_principal`], `sandpipe serve`) writes
/// `principal` on each of its lines.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
    principal: Option<PrincipalSlot>,
}

/// Where a log reads its principal ([`AuditLog::for_principal_in`]): set once, maybe after
/// the log was made.
pub type PrincipalSlot = Arc<std::sync::OnceLock<Arc<str>>>;

struct Inner {
    path: PathBuf,
    file: Mutex<File>,
    /// Whether a failed write was already reported (once is enough).
    failed: AtomicBool,
}

impl AuditLog {
    /// Open `path` for appending (created if missing, mode 0600).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                file: Mutex::new(file),
                failed: AtomicBool::new(false),
            }),
            principal: None,
        })
    }

    /// The same file, each line naming `principal` (who the plugin serves).
    pub fn for_principal(&self, principal: &str) -> Self {
        Self {
            inner: self.inner.clone(),
            principal: Some(Arc::new(std::sync::OnceLock::from(Arc::from(principal)))),
        }
    }

    /// The same file, each line naming the principal in `slot` once it is set (a warm
    /// `sandpipe serve` instance learns whom it serves when a client claims it; its lines
    /// before then name nobody).
    pub fn for_principal_in(&self, slot: PrincipalSlot) -> Self {
        Self {
            inner: self.inner.clone(),
            principal: Some(slot),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Append `event`. A failed write is logged once and otherwise ignored: the audit trail
    /// never stops a plugin.
    pub fn record(&self, event: &AuditEvent) {
        let line = Line {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            principal: self.principal.as_ref().and_then(|p| p.get()).map(|p| &**p),
            event,
        };
        let Ok(mut text) = serde_json::to_vec(&line) else {
            return;
        };
        text.push(b'\n');
        let written = self
            .inner
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_all(&text);
        if let Err(e) = written
            && !self.inner.failed.swap(true, Ordering::Relaxed)
        {
            tracing::warn!("writing the audit log {}: {e}", self.inner.path.display());
        }
    }
}

impl fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuditLog({})", self.inner.path.display())
    }
}

impl PartialEq for AuditLog {
    fn eq(&self, other: &Self) -> bool {
        self.inner.path == other.inner.path
    }
}

impl Eq for AuditLog {}

/// The audit trail's name for the limit behind `exit`, if a limit ended it.
pub(crate) fn limit_of(exit: &Exit) -> Option<&'static str> {
    match exit {
        Exit::OutOfFuel { .. } => Some("fuel"),
        Exit::MemoryLimit { .. } => Some("memory"),
        Exit::ProcessLimit { .. } => Some("processes"),
        Exit::CpuTimeLimit { .. } => Some("cpu-time"),
        Exit::DeadlineExceeded { .. } => Some("deadline"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_one_json_line_with_its_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).expect("open");
        log.record(&AuditEvent::Net {
            decision: Decision::Refuse,
            via: Via::Proxy,
            name: Some("evil.test".into()),
            addr: None,
            port: 443,
            rule: None,
            reason: Some("no --allow-net rule matches this name".into()),
        });
        log.record(&AuditEvent::Limit {
            limit: "memory".into(),
            detail: Some("64MiB".into()),
            request_id: Some("7".into()),
        });
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "net");
        assert_eq!(lines[0]["decision"], "refuse");
        assert_eq!(lines[0]["via"], "proxy");
        assert_eq!(lines[0]["port"], 443);
        assert!(lines[0].get("addr").is_none());
        assert!(lines[0]["ts"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(lines[1]["event"], "limit");
        assert_eq!(lines[1]["request_id"], "7");
    }
}
