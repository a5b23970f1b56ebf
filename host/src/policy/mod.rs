//! What a plugin may do: the deny-by-default policy shared by wasm and native sessions.

use std::path::PathBuf;
use std::time::Duration;

use crate::net::{AuditLog, NetPolicy, NetTape};

pub mod document;
pub mod sections;
pub mod value;
pub use document::{DocumentError, PolicyDocument};
pub use sections::{Grants, Limits, Net, RecycleMemory, Requests, Tools, Trust};

/// Access to a preopened directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read files and list directories; every write, create, rename or delete is refused.
    ReadOnly,
    /// Read and write inside the directory.
    ReadWrite,
}

/// A host directory made visible to the plugin at a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the plugin sees it, e.g. `/data`.
    pub guest: String,
    /// What the plugin may do in it.
    pub access: Access,
}

/// A wasm plugin's fuel budget (fuel is roughly one unit per wasm instruction). Native plugins
/// ignore it; their counterpart is [`Policy::max_cpu_time`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fuel {
    /// No instruction budget. Fuel metering stays compiled in, so a budget can be set per
    /// session without recompiling.
    #[default]
    Unlimited,
    /// This much fuel for the whole session; the guest is stopped with
    /// [`Exit::OutOfFuel`](crate::Exit::OutOfFuel) when it is used up.
    PerSession(u64),
    /// This much fuel for each request: the budget is re-armed when the guest takes its first
    /// step after [`SessionControl::begin_request`](crate::SessionControl::begin_request), and
    /// the guest is stopped with [`Exit::OutOfFuel`](crate::Exit::OutOfFuel) if one request
    /// uses it all. Time the guest spends blocked waiting for input burns no fuel, so idle time
    /// is never billed. For an exported-function plugin
    /// ([`WasmOracle`](crate::exports::oracle::WasmOracle)) it is re-armed before every call.
    PerRequest(u64),
}

impl Fuel {
    /// The armed budget, per session or per request; `None` when unlimited.
    pub fn limit(self) -> Option<u64> {
        match self {
            Fuel::Unlimited => None,
            Fuel::PerSession(n) | Fuel::PerRequest(n) => Some(n),
        }
    }
}

impl std::fmt::Display for Fuel {
    /// `unlimited`, `N`, or `N per request`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fuel::Unlimited => f.write_str("unlimited"),
            Fuel::PerSession(n) => write!(f, "{n}"),
            Fuel::PerRequest(n) => write!(f, "{n} per request"),
        }
    }
}

/// Which component imports a plugin may have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImportPolicy {
    /// Link the whole `wasi:cli` world (filesystem and sockets included) and `wasi:http`, and
    /// decide at run time (preopens, [`Policy::net`]). Components from Python and JS toolchains
    /// import sockets, filesystem and HTTP even when they never use them, so this is the default.
    #[default]
    LinkAll,
    /// Refuse, before instantiating, a component that imports anything outside this list.
    ///
    /// Entries are interface names such as `wasi:cli/stdin`, optionally versioned
    /// (`wasi:cli/stdin@0.2`); patch versions are ignored, so `@0.2` and `@0.2.6` both match an
    /// import of `wasi:cli/stdin@0.2.12`. For a WASI p1 core module, entries are module names
    /// such as `wasi_snapshot_preview1`.
    Strict(Vec<String>),
}

/// The sandbox policy. Deny by default; [`Policy::default`] gives:
/// - `fuel`: [`Fuel::Unlimited`], no instruction budget (fuel metering is still compiled in, so
///   a budget can be set per session without recompiling);
/// - `max_memory`: 256 MiB of linear memory (native: resident memory, see `SECURITY.md`);
/// - `deadline`: `None`, no wall-clock limit;
/// - `preopens`: none, the plugin sees no filesystem at all;
/// - `env`: empty, nothing is inherited from the host;
/// - `args`: none beyond argv\[0\] (the plugin's file name);
/// - `net`: empty, so no connection, no name lookup and no `wasi:http` request (see
///   [`NetPolicy`]); with rules, a component connects over TCP and sends `wasi:http`
///   requests only to what they admit, looks names up only through sandpipe's resolver,
///   and never binds, listens or uses UDP;
/// - `audit`: `None`, no audit trail;
/// - `tape`: `None`, the network is live and not recorded;
/// - `imports`: [`ImportPolicy::LinkAll`];
/// - `deterministic`: `None`, real clocks and random;
/// - `max_cpu_time`: `None`, no CPU-time limit for a native plugin (the wasm counterpart, fuel,
///   is unlimited by default too; a long-lived server legitimately adds up CPU over hours);
/// - `max_open_files`: 1024 ([`DEFAULT_MAX_OPEN_FILES`]) open files, wasm and native;
/// - `max_processes`: 512 ([`DEFAULT_MAX_PROCESSES`]) processes and threads of a native
///   plugin, where it has a cgroup;
/// - `startup_grants`: on; a native plugin may read what it needs to start (see
///   [`crate::startup_grants`]);
/// - `requests`: no per-request budget, no restart or recycling by count, recycling by memory
///   `auto`, a 60 s start timeout and a 2 s grace ([`Requests::resolved`]);
/// - `tools`: no MCP tool filter.
///
/// A native plugin (see `SECURITY.md`, "Native mode") additionally runs under Landlock where the kernel
/// has it: its filesystem is the system's programs and libraries read-only, its own file, and
/// `preopens` at their host paths; TCP bind and connect are refused; it cannot signal processes
/// outside its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// The fuel budget (wasm only): none, for the whole session, or for each request.
    pub fuel: Fuel,
    /// Memory cap in bytes: linear memory for wasm; for native, the resident memory of the
    /// plugin and its descendants, sampled, with `RLIMIT_DATA` at four times the cap (at least
    /// 1 GiB) as a backstop (memory a plugin uses, not address space it reserves, so V8, Go
    /// and the JVM start under it). `None` = no cap.
    pub max_memory: Option<u64>,
    /// Wall-clock deadline from the start of the session.
    pub deadline: Option<Duration>,
    /// Directories the plugin may see. A native plugin sees each at its host path (the guest
    /// path cannot be applied without a mount namespace), and only under Landlock.
    pub preopens: Vec<Preopen>,
    /// Environment variables the plugin sees, and nothing else.
    pub env: Vec<(String, String)>,
    /// Arguments after argv\[0\].
    pub args: Vec<String>,
    /// Which imports a component may have.
    pub imports: ImportPolicy,
    /// Deterministic mode with this seed (wasm only): clocks that advance only when read,
    /// random from the seed. See [`Policy::deterministic`].
    pub deterministic: Option<u64>,
    /// CPU time a native plugin may use (`RLIMIT_CPU`), in whole seconds rounded up (at least
    /// 1 s). Past it the kernel sends SIGXCPU, and SIGKILL one second later to a plugin that
    /// ignores SIGXCPU; both end as [`crate::Exit::CpuTimeLimit`]. Counted per process: each
    /// process the plugin starts has its own budget. Native only: wasm uses [`Policy::fuel`].
    pub max_cpu_time: Option<Duration>,
    /// Most file descriptors a plugin may have open at once.
    ///
    /// - Wasm: host descriptors the session holds, its preopened directories included (its
    ///   stdio is in memory and holds none). A file counts until the guest has closed it and
    ///   every stream read from it or written to it. Past the cap an open fails with an error
    ///   the guest can handle, never a trap: WASI p2's `error-code.quota` (wasi-libc `EDQUOT`,
    ///   Rust `ErrorKind::QuotaExceeded`; p2 has no `EMFILE`), WASI p1's `mfile` (`EMFILE`).
    ///   Closing one makes room for the next. `None`: no cap but sandpipe's own
    ///   `RLIMIT_NOFILE`, which one session can then use up for all the others.
    /// - Native: `RLIMIT_NOFILE`, stdio included; past it `open` fails with `EMFILE`. Lowered
    ///   to sandpipe's own hard limit when that is smaller. A dynamically linked program needs
    ///   a few to start (at least 16 is safe). `None` keeps sandpipe's own limit.
    pub max_open_files: Option<u64>,
    /// Native only: most processes and threads the plugin may have at once, all counted
    /// together (the cgroup's `pids.max`; sandpipe's own two helpers in the sandbox are not
    /// counted). Past it `fork`, `clone` and thread creation fail with `EAGAIN`, as under
    /// `ulimit -u`, and the plugin runs on. Enforced where the plugin has a cgroup (see
    /// [`crate::CgroupSupport`]); without one it is not, and the start-up line says so.
    /// `None`: no limit.
    pub max_processes: Option<u64>,
    /// Bytes a wasm component may write to files through its preopens, in all, for the
    /// session: every write counts, whatever its offset (an overwrite counts again; a file
    /// grown by `set-size` does not). Past it a write fails with `insufficient-space`
    /// (`ENOSPC`), writes nothing, and the plugin runs on. `None` (the default): no quota.
    /// Core modules (WASI p1) cannot be counted: one with a quota and a read-write preopen is
    /// refused at start. Native plugins ignore it (`RLIMIT_FSIZE` caps the size of each file,
    /// not the total; see SECURITY.md).
    pub max_disk_write: Option<u64>,
    /// Native only: grant, read-only, what the plugin needs to start (its resolved executable,
    /// a script's interpreter, the interpreter's install prefix, a venv, script files named in
    /// the arguments; see [`crate::startup_grants`]). On by default: without it a pyenv, venv or
    /// npm-installed interpreter dies under Landlock before its first frame.
    pub startup_grants: bool,
    /// What the plugin may reach on the network (see [`crate::net`]). Empty by default: no
    /// network at all.
    pub net: NetPolicy,
    /// Where enforcement decisions are written, one JSON line each (see [`crate::net::AuditLog`]).
    pub audit: Option<AuditLog>,
    /// The network on tape (see [`NetTape`]): each admitted `wasi:http` exchange written into
    /// the session's recording, or served from a recording with no network at all. Like
    /// `audit`, a handle, not a value of the policy document.
    pub tape: Option<NetTape>,
    /// Per-request budgets and instance renewal, for a protocol's supervisor (`run --protocol`),
    /// every default filled in ([`Requests::resolved`]). Its `fuel` is always `None`: per-request
    /// fuel is [`Policy::fuel`] ([`Fuel::PerRequest`]), its one home.
    pub requests: Requests,
    /// Which MCP tools an engine may see and call (`[tools]`); empty lists: every tool.
    pub tools: Tools,
}

/// The default memory cap.
pub const DEFAULT_MAX_MEMORY: u64 = 256 << 20;

/// The default open-file limit of a plugin, wasm or native: the usual soft limit of a Linux
/// login, so an ordinary plugin never notices it, while a descriptor leak stops at a thousand
/// instead of at a service manager's hard limit of a million (natively) or at the host
/// process's own limit, shared by every session (wasm).
pub const DEFAULT_MAX_OPEN_FILES: u64 = 1024;

/// The default process limit of a native plugin: room for a runtime's worker threads (Node
/// and Deno start about a dozen, a JVM a few dozen) and a pool of children, while a fork bomb
/// or a thread leak stops at hundreds instead of at the host's limit, which the host shares.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

impl Default for Policy {
    fn default() -> Self {
        Self {
            fuel: Fuel::Unlimited,
            max_memory: Some(DEFAULT_MAX_MEMORY),
            deadline: None,
            preopens: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            imports: ImportPolicy::LinkAll,
            deterministic: None,
            max_cpu_time: None,
            max_open_files: Some(DEFAULT_MAX_OPEN_FILES),
            max_processes: Some(DEFAULT_MAX_PROCESSES),
            max_disk_write: None,
            startup_grants: true,
            net: NetPolicy::default(),
            audit: None,
            tape: None,
            requests: Requests::default().resolved(),
            tools: Tools::default(),
        }
    }
}

impl Policy {
    /// Set the fuel budget (see [`Fuel`]).
    pub fn fuel(mut self, fuel: Fuel) -> Self {
        self.fuel = fuel;
        self
    }

    /// Set the memory cap (`None` removes it).
    pub fn max_memory(mut self, bytes: Option<u64>) -> Self {
        self.max_memory = bytes;
        self
    }
    /// Set the CPU-time limit of a native plugin (`None` removes it).
    pub fn max_cpu_time(mut self, limit: Option<Duration>) -> Self {
        self.max_cpu_time = limit;
        self
    }
    /// Set the open-file limit, wasm and native (`None` keeps sandpipe's own; see
    /// [`Policy::max_open_files`]).
    pub fn max_open_files(mut self, limit: Option<u64>) -> Self {
        self.max_open_files = limit;
        self
    }

    /// Set the process and thread limit of a native plugin (`None` removes it; see
    /// [`Policy::max_processes`]).
    pub fn max_processes(mut self, limit: Option<u64>) -> Self {
        self.max_processes = limit;
        self
    }

    /// Set the disk-write quota of a wasm component (see [`Policy::max_disk_write`]).
    pub fn max_disk_write(mut self, limit: Option<u64>) -> Self {
        self.max_disk_write = limit;
        self
    }

    /// Turn the read-only start-up grants of a native plugin on (the default) or off.
    pub fn startup_grants(mut self, on: bool) -> Self {
        self.startup_grants = on;
        self
    }

    /// Set what the plugin may reach on the network.
    pub fn net(mut self, net: NetPolicy) -> Self {
        self.net = net;
        self
    }

    /// Set the per-request budgets (their `fuel` is taken as [`Fuel::PerRequest`]).
    pub fn requests(mut self, requests: &Requests) -> Self {
        if let Some(n) = requests.fuel {
            self.fuel = Fuel::PerRequest(n);
        }
        self.requests = requests.resolved();
        self
    }

    /// Write enforcement decisions to `audit`.
    pub fn audit(mut self, audit: Option<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    /// Set the wall-clock deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
    /// Add a preopened directory.
    pub fn preopen(
        mut self,
        host: impl Into<PathBuf>,
        guest: impl Into<String>,
        access: Access,
    ) -> Self {
        self.preopens.push(Preopen {
            host: host.into(),
            guest: guest.into(),
            access,
        });
        self
    }
    /// Add an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
    /// Add an argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }
    /// Deterministic mode (wasm only), for byte-identical reruns. The exact rule:
    /// - the wall clock starts at 2000-01-01T00:00:00Z and every read advances it by 1 ms;
    /// - the monotonic clock starts at 0 and every read advances it by 1 ms;
    /// - `wasi:random/random` and `wasi:random/insecure` return a 64 KiB SplitMix64 stream
    ///   derived from `seed` (two different streams), repeating after 64 KiB;
    ///   `wasi:random/insecure-seed` (which seeds std's `HashMap`) returns `seed`;
    /// - the environment is only what the policy grants, as always.
    ///
    /// So the clocks depend only on how often the plugin reads them, never on real time.
    /// Native plugins ignore this: determinism is guaranteed only under wasm.
    pub fn deterministic(mut self, seed: u64) -> Self {
        self.deterministic = Some(seed);
        self
    }
    /// Set the import policy.
    pub fn imports(mut self, imports: ImportPolicy) -> Self {
        self.imports = imports;
        self
    }
}

/// `wasi:cli/stdin@0.2.12` -> (`wasi:cli/stdin`, Some(`0.2`)): the interface and its
/// compatibility version (major.minor for 0.x, major otherwise), patch ignored.
pub(crate) fn import_key(name: &str) -> (&str, Option<String>) {
    match name.split_once('@') {
        None => (name, None),
        Some((iface, version)) => {
            let mut parts = version.split('.');
            let major = parts.next().unwrap_or("");
            let minor = parts.next().unwrap_or("0");
            let compat = if major == "0" {
                format!("0.{minor}")
            } else {
                major.to_owned()
            };
            (iface, Some(compat))
        }
    }
}

/// Whether `import` is allowed by `allowed` (see [`ImportPolicy::Strict`]).
pub(crate) fn import_allowed(allowed: &[String], import: &str) -> bool {
    let (iface, version) = import_key(import);
    allowed.iter().any(|entry| {
        let (want_iface, want_version) = import_key(entry);
        want_iface == iface && (want_version.is_none() || want_version == version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_imports_ignore_patch_versions() {
        let allowed = vec![
            "wasi:cli/stdin@0.2".to_owned(),
            "wasi:io/streams".to_owned(),
        ];
        let cases = [
            ("wasi:cli/stdin@0.2.0", true),
            ("wasi:cli/stdin@0.2.12", true),
            ("wasi:cli/stdin@0.3.0", false),
            ("wasi:io/streams@0.2.6", true),
            ("wasi:sockets/tcp@0.2.6", false),
            ("wasi:cli/stdout@0.2.6", false),
        ];
        for (import, want) in cases {
            assert_eq!(import_allowed(&allowed, import), want, "{import}");
        }
        assert!(import_allowed(
            &["wasi:cli/stdin@0.2.6".to_owned()],
            "wasi:cli/stdin@0.2.1"
        ));
        assert!(import_allowed(
            &["wasi_snapshot_preview1".to_owned()],
            "wasi_snapshot_preview1"
        ));
    }
}
