//! Native plugins: real child processes in a sandbox of the kernel's own parts. The only module
//! that spawns processes.
//!
//! What is enforced (see `SECURITY.md`, "Native mode", for the whole list, and what is not):
//! - where the kernel allows it ([`NamespaceSupport`]), the plugin's own user, mount, PID, IPC,
//!   network and UTS namespaces ([`namespace`]): a tmpfs root holding only what it may read,
//!   `--dir` at its guest path, a fresh `/proc`, loopback alone (and sandpipe's proxy when the
//!   policy allows hosts), no capabilities;
//! - a seccomp filter ([`seccomp`]): no Unix sockets, ptrace, mounts, namespaces, BPF, keyrings,
//!   kernel modules;
//! - the environment is cleared to the policy's list;
//! - the child gets its own process group, killed (SIGKILL to the group) on deadline, on kill
//!   and when the session is dropped; a waiter thread reaps it, so no zombie is left;
//! - rlimits, set in the child before exec ([`rlimit`]): the memory cap becomes `RLIMIT_AS`,
//!   `max_cpu_time` `RLIMIT_CPU`, `max_open_files` `RLIMIT_NOFILE`, and `RLIMIT_CORE` is 0;
//! - where the kernel has Landlock ([`landlock`]), the filesystem is limited to the preopens
//!   (read-only honoured) plus the system's programs and libraries read-only, TCP is refused
//!   and signals cannot leave the sandbox; without it nothing of that is, and
//!   [`LandlockSupport::warning`] says so;
//! - stdin/stdout/stderr are pipes.
//!
//! What is NOT enforced: fuel (CPU time is the coarse counterpart), determinism; without
//! namespaces, UDP, the network namespace's isolation and other processes' /proc.
//!
//! ```text
//! spawn: Limits::for_policy + Landlock ruleset + seccomp programs + the jail's plan (host)
//!        ─ fork ─► pre_exec: setrlimit, [namespaces: monitor ─ fork ─► PID 1: new root
//!        ─ fork ─► plugin], restrict_self, seccomp ─► exec plugin
//! waiter thread: waitid(WNOWAIT) ─► lock ─► wait4 (status + rusage) ─► oneshot
//! task: select { waited → classify | deadline → killpg | kill switch → killpg } → Exit
//! ```

mod cgroup;
mod grant_path;
mod landlock;
mod memory;
mod namespace;
mod paths;
mod pause;
mod probe_cache;
mod rlimit;
mod seccomp;
mod startup;

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::error::{Exit, HostError};
use crate::policy::{Policy, Preopen};
use crate::run::stderr::{StderrMode, StderrTail};
use crate::run::transport::{KillSwitch, PluginStdin, PluginStdout, Transport, finish, killed};
use pause::Step;

pub use cgroup::CgroupSupport;
pub use landlock::{LANDLOCK_TARGET_ABI, LandlockSupport};
pub(crate) use memory::plugin_resident;
pub use namespace::NamespaceSupport;
pub use paths::PROXY_PORT;
pub(crate) use rlimit::Limits;
pub use startup::{StartupGrant, WithheldGrant, startup_grants, withheld_startup_grants};

/// How a native plugin's stdin and stdout are connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NativeStdio {
    /// Pipes to the session: frames are sent, received, checked and recorded.
    #[default]
    Piped,
    /// The plugin gets this process's own stdin and stdout: no copy and no hop, and nothing
    /// for the session to send, receive, check or record (`send` writes nowhere, `recv` sees
    /// end of stream at once). For a caller that only stands in for the plugin with raw bytes:
    /// `sandpipe run` without `--framing` for a native plugin. Limits, Landlock, signals and the
    /// exit work as with pipes.
    Inherit,
}

/// Start `program` as a child process under what `policy` can express natively.
pub(crate) fn spawn(
    program: &Path,
    policy: &Policy,
    stderr_mode: StderrMode,
    tail_lines: usize,
    stdio: NativeStdio,
) -> Result<Transport, HostError> {
    let namespaces = NamespaceSupport::detect();
    let started = spawn_under(program, policy, stderr_mode, tail_lines, stdio, &namespaces);
    // A remembered probe answer that no longer holds fails the jail's first step: probe now,
    // and start the plugin again under what the kernel allows today.
    match started {
        Err(HostError::Spawn { .. }) if namespaces.is_available() => {
            match NamespaceSupport::reprobe_if_remembered() {
                Some(fresh) if !fresh.is_available() => {
                    tracing::warn!(
                        "the remembered namespace probe no longer holds ({}): the plugin runs without namespaces",
                        fresh.describe()
                    );
                    spawn_under(program, policy, stderr_mode, tail_lines, stdio, &fresh)
                }
                _ => started,
            }
        }
        started => started,
    }
}

fn spawn_under(
    program: &Path,
    policy: &Policy,
    stderr_mode: StderrMode,
    tail_lines: usize,
    stdio: NativeStdio,
    namespaces: &NamespaceSupport,
) -> Result<Transport, HostError> {
    let spawn_error = |source: std::io::Error| HostError::Spawn {
        program: program.to_owned(),
        source,
    };
    let mut phases = Phases::new();
    let limits = Limits::for_policy(policy);
    let preopens = resolved_preopens(&policy.preopens)?;
    let mut grants = if policy.startup_grants {
        startup_grants(program, &policy.args)
    } else {
        Vec::new()
    };
    // `--tls-intercept`: the session CA, whose certificate the plugin reads (a grant like
    // its program's) and is told to trust. Only behind the proxy, which needs the namespaces.
    let session_ca =
        if policy.net.tls_intercept && namespaces.is_available() && !policy.net.is_closed() {
            let ca = SessionCaFile::create().map_err(spawn_error)?;
            grants.push(StartupGrant {
                path: ca.path.clone(),
                reason: "session CA",
            });
            Some(ca)
        } else {
            None
        };
    phases.mark("grants");
    phases.add("probe_once", NamespaceSupport::probe_time());
    let mut confinement = landlock::confinement(
        program,
        &preopens,
        &grants,
        namespaces.is_available(),
        namespaces.is_available() && !policy.net.is_closed(),
    )?;
    // Landlock's port rules cannot tell one host from another: without a network namespace
    // and the proxy, an allow-list could only be approximated by a hole.
    if let (false, NamespaceSupport::Unavailable { reason }) = (policy.net.is_closed(), namespaces)
    {
        return Err(HostError::NativeNetworkNeedsNamespaces {
            program: program.to_owned(),
            reason: reason.clone(),
        });
    }
    phases.mark("landlock");
    let filter = if seccomp::available() {
        Some(
            seccomp::SyscallFilter::get().map_err(|message| HostError::Seccomp {
                program: program.to_owned(),
                message,
            })?,
        )
    } else {
        None
    };
    // The plugin must not outlive sandpipe, even one killed with SIGKILL: the child asks for
    // SIGKILL when the thread that forked it (the spawner thread, which lives as long as
    // sandpipe) dies, and checks that sandpipe did not die before the request took effect.
    let parent = std::process::id();
    // A plugin is a file, never a name to look up in PATH: `plugin.mjs` is `./plugin.mjs`, as
    // `wasmtime run plugin.wasm` reads the file in the working directory.
    let file = if program.components().count() == 1 && program.is_relative() {
        Path::new(".").join(program)
    } else {
        program.to_owned()
    };
    // In its own root the plugin is found by absolute path (the working directory there is a
    // copy of sandpipe's), `..` and symlinked directories resolved as a shell would, a version
    // manager's shim as the interpreter it would run; argv[0] stays the name it was given, or
    // for a shim the interpreter's.
    let (exec_path, shim) = startup::resolve_program(&file).map_err(spawn_error)?;
    let file = if shim { exec_path.clone() } else { file };
    let proxy_channel = if namespaces.is_available() && !policy.net.is_closed() {
        Some(std::os::unix::net::UnixStream::pair().map_err(spawn_error)?)
    } else {
        None
    };
    let (proxy_ours, proxy_theirs) = match proxy_channel {
        Some((ours, theirs)) => (Some(ours), Some(std::os::fd::OwnedFd::from(theirs))),
        None => (None, None),
    };
    phases.mark("seccomp");
    let cgroup = cgroup::PluginCgroup::create(policy.max_memory, policy.max_processes);
    phases.mark("cgroup");
    let joiner = cgroup.as_ref().map(cgroup::PluginCgroup::joiner);
    let mut jail = if namespaces.is_available() {
        Some(namespace::Jail::plan(
            program,
            &exec_path,
            &preopens,
            &grants,
            proxy_theirs,
            // With a cgroup, shared memory is counted with the rest, to the cap exactly.
            policy.max_memory.filter(|_| cgroup.is_none()),
        )?)
    } else {
        None
    };
    let jailed = jail.is_some();
    let plugin_depth = if jailed { 2 } else { 0 };
    let mut cmd = std::process::Command::new(&exec_path);
    cmd.arg0(&file)
        .args(&policy.args)
        .env_clear()
        .envs(policy.env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::piped())
        .process_group(0);
    if proxy_ours.is_some() {
        let http = format!("http://127.0.0.1:{PROXY_PORT}");
        let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
        for (name, value) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &socks),
        ] {
            cmd.env(name, value).env(name.to_lowercase(), value);
        }
    }
    if let Some(ca) = &session_ca {
        // Over a `--env` of the same name: the plugin's TLS goes through the session CA.
        for name in SessionCaFile::VARIABLES {
            cmd.env(name, &ca.path);
        }
    }
    let inherit = stdio == NativeStdio::Inherit;
    if inherit {
        cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit());
    } else {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    }
    let pause = pause::Pause::from_env();
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec. It calls close_range (or
    // fcntl), setrlimit, prctl, the jail's system calls (unshare, mount, fork, ...: see
    // `Jail::enter`), landlock_restrict_self and seccomp on values computed before the fork
    // (no allocation, no lock on the success path); the ruleset it takes is the child's copy.
    unsafe {
        cmd.pre_exec(move || {
            pause.at(Step::Forked);
            die_with_parent(parent)?;
            if let Some(joiner) = &joiner {
                joiner.join()?;
            }
            pause.at(Step::Joined);
            close_inherited_descriptors();
            match jail.as_mut() {
                // In the plugin: the jail's own steps open descriptors (the status pipe, the
                // sources of the binds) while sandpipe's inherited ones are still open, which
                // a small RLIMIT_NOFILE would refuse; and the monitor and PID 1 need no limit.
                Some(jail) => {
                    jail.enter(pause)?;
                    limits.apply()?;
                }
                None => limits.apply()?,
            }
            confinement.apply()?;
            if let Some(filter) = &filter {
                filter.apply()?;
            }
            pause.at(Step::Exec);
            Ok(())
        });
    }
    phases.mark("plan");
    let started = Instant::now();
    let mut child = spawn_from_spawner_thread(cmd).map_err(spawn_error)?;
    phases.mark("fork_exec");
    let group = Arc::new(Group {
        pgid: i32::try_from(child.id())
            .map_err(|_| spawn_error(std::io::Error::other("process id out of range")))?,
        reaped: Mutex::new(false),
    });
    // A process of its own that SIGKILLs the plugin's group when sandpipe dies, however it
    // dies: PR_SET_PDEATHSIG reaches the plugin alone, not what the plugin started. In the
    // jail it is not needed (and its fork of sandpipe not paid): the monitor dies with
    // sandpipe, PID 1 with the monitor, and everything in the PID namespace with PID 1.
    let guard = if jailed {
        None
    } else {
        GroupGuard::start(group.pgid)
    };
    let proxy = match proxy_ours {
        Some(channel) => {
            let received = namespace::receive_listener(&std::os::fd::OwnedFd::from(channel));
            let resolver = Arc::new(
                crate::net::Resolver::new(policy.net.clone(), policy.audit.clone())
                    .with_tape(policy.tape.clone())
                    .with_intercept(session_ca.as_ref().map(|c| c.ca.clone())),
            );
            match received.and_then(|listener| crate::net::spawn_proxy(listener, resolver)) {
                Ok(handle) => Some(handle),
                Err(e) => {
                    group.signal(libc::SIGKILL);
                    let _ = child.wait();
                    return Err(spawn_error(e));
                }
            }
        }
        None => None,
    };
    let waited = match wait_in_thread(group.clone()) {
        Ok(waited) => waited,
        Err(e) => {
            group.signal(libc::SIGKILL);
            let _ = child.wait();
            return Err(spawn_error(e));
        }
    };
    type Pipes = (
        std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
        std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
        tokio::process::ChildStderr,
    );
    let pipes = (|| -> Option<Pipes> {
        let stderr = tokio::process::ChildStderr::from_std(child.stderr.take()?).ok()?;
        if inherit {
            return Some((
                Box::pin(tokio::io::sink()),
                Box::pin(tokio::io::empty()),
                stderr,
            ));
        }
        let stdin = tokio::process::ChildStdin::from_std(child.stdin.take()?).ok()?;
        let stdout = tokio::process::ChildStdout::from_std(child.stdout.take()?).ok()?;
        grow_pipe(stdin.as_raw_fd());
        grow_pipe(stdout.as_raw_fd());
        Some((Box::pin(stdin), Box::pin(stdout), stderr))
    })();
    // The waiter thread reaps the child; `child` itself needs nothing more.
    drop(child);
    let Some((stdin, stdout, stderr_pipe)) = pipes else {
        group.signal(libc::SIGKILL);
        return Err(spawn_error(std::io::Error::other(
            "the child's stdio could not be registered with the runtime",
        )));
    };

    let stderr = StderrTail::new(tail_lines);
    let name = crate::run::transport::argv0_for(program);
    let stderr_task = tokio::spawn(stderr.clone().drain(stderr_pipe, stderr_mode, name));
    let (exit_tx, exit_rx) = watch::channel(None);
    let (kill, mut kill_rx) = KillSwitch::new();
    let deadline = policy.deadline;
    let cpu_limit = limits.cpu_time();
    let memory_limit = policy.max_memory;
    // With a cgroup the kernel holds both caps exactly; the watch, which counts a page shared
    // by N processes N times (a fork-heavy plugin), is for where there is none.
    let process_limit = policy.max_processes;
    let watched = cgroup
        .is_none()
        .then_some(memory::Caps {
            memory: memory_limit,
            tasks: process_limit,
        })
        .filter(|caps| caps.any());
    let tail = stderr.clone();
    let pid = u32::try_from(group.pgid).ok();

    tokio::spawn(async move {
        // Dropped with this task (runtime shutdown) before the child is reaped: kill it.
        let _guard = KillOnDrop(group.clone());
        let _group_guard = guard;
        let _proxy = proxy;
        // Its file is removed once the plugin is gone.
        let _session_ca = session_ca;
        // Removed when this task ends, after the plugin was reaped.
        let cgroup = cgroup;
        let oom = || {
            cgroup
                .as_ref()
                .is_some_and(cgroup::PluginCgroup::oom_killed)
        };
        let mut waited = waited;
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until((started + d).into()).await,
                None => std::future::pending().await,
            }
        };
        let peak = std::sync::atomic::AtomicU64::new(0);
        let over_cap = async {
            match watched {
                Some(caps) => memory::exceeded(group.pgid as u32, plugin_depth, caps, &peak).await,
                None => std::future::pending().await,
            }
        };
        let exit = tokio::select! {
            done = &mut waited => match done {
                Ok(Ok(w)) => from_status(&w, peak.load(std::sync::atomic::Ordering::Relaxed), oom(), cpu_limit, memory_limit, &tail),
                Ok(Err(e)) => Exit::Trap { message: format!("waiting for child: {e}"), stderr_tail: Vec::new() },
                Err(_) => Exit::Trap { message: "waiting for child: the waiter thread ended".to_owned(), stderr_tail: Vec::new() },
            },
            () = timer => {
                group.signal(libc::SIGKILL);
                let _ = (&mut waited).await;
                Exit::DeadlineExceeded { limit: deadline.unwrap_or_default() }
            }
            over = over_cap => {
                group.signal(libc::SIGKILL);
                let _ = (&mut waited).await;
                match over {
                    memory::Over::Memory => Exit::MemoryLimit { limit: memory_limit.unwrap_or_default() },
                    memory::Over::Tasks => Exit::ProcessLimit { limit: process_limit.unwrap_or_default() },
                }
            }
            () = killed(&mut kill_rx) => {
                group.signal(libc::SIGKILL);
                match (&mut waited).await {
                    // It had already ended (a forwarded SIGTERM, its own exit) and was not yet
                    // reaped when the kill came: that end is the truth, not the kill.
                    Ok(Ok(w)) if w.status.signal() != Some(libc::SIGKILL) => from_status(&w, peak.load(std::sync::atomic::Ordering::Relaxed), oom(), cpu_limit, memory_limit, &tail),
                    _ => Exit::Killed { signal: Some(libc::SIGKILL) },
                }
            }
        };
        finish(exit, stderr_task, &tail, exit_tx).await;
    });

    phases.mark("ready");
    phases.log();
    Ok(Transport {
        stdin: PluginStdin::Stream(stdin),
        stdout: PluginStdout::Stream(stdout),
        exit: exit_rx,
        kill,
        stderr,
        pid,
        plugin_depth,
    })
}

/// The session CA of `--tls-intercept` and its certificate's file, which the plugin is told
/// to trust. The file is public (a certificate; the key never leaves sandpipe's memory) and is
/// removed when this is dropped.
struct SessionCaFile {
    ca: Arc<crate::net::SessionCa>,
    path: PathBuf,
}

impl SessionCaFile {
    /// The variables that name the CA file for the plugin: OpenSSL and Python's `ssl`,
    /// Python `requests`, Node.js, Deno, curl.
    const VARIABLES: [&'static str; 5] = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "DENO_CERT",
        "CURL_CA_BUNDLE",
    ];

    /// A fresh CA and its certificate in a new file under the temporary directory.
    fn create() -> std::io::Result<Self> {
        use std::io::Write;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let ca = crate::net::SessionCa::new()
            .map_err(|e| std::io::Error::other(format!("--tls-intercept: {e}")))?;
        let path = std::env::temp_dir().join(format!(
            "sandpipe-session-ca-{}-{}.pem",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let file_guard = Self {
            ca: Arc::new(ca),
            path,
        };
        file.write_all(file_guard.ca.pem().as_bytes())?;
        Ok(file_guard)
    }
}

impl Drop for SessionCaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The `--dir` grants as the start-up line names them: each resolved host path (as
/// [`resolved_preopens`] resolves it, or as given when it cannot be), its guest path when that
/// differs, and `ro` or `rw`.
#[cfg(feature = "cli")]
pub fn describe_grants(preopens: &[Preopen]) -> String {
    preopens
        .iter()
        .map(|p| {
            let p = resolved_preopen(p).unwrap_or_else(|_| p.clone());
            let access = if p.access == crate::policy::Access::ReadOnly {
                "ro"
            } else {
                "rw"
            };
            if Path::new(&p.guest) == p.host {
                format!("{} ({access})", p.host.display())
            } else {
                format!("{} at {} ({access})", p.host.display(), p.guest)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `preopens` with each host path resolved ([`grant_path::resolve`]: `..` and relative paths
/// as a shell would, no symbolic link that leads out of its directory). A grant seen at its
/// own path (no `::GUEST`) is seen at the resolved path.
fn resolved_preopens(preopens: &[Preopen]) -> Result<Vec<Preopen>, HostError> {
    preopens.iter().map(resolved_preopen).collect()
}

/// One grant of [`resolved_preopens`].
fn resolved_preopen(p: &Preopen) -> Result<Preopen, HostError> {
    let host = grant_path::resolve(&p.host).map_err(|message| HostError::Preopen {
        host: p.host.clone(),
        message,
    })?;
    let guest = if p.guest == p.host.display().to_string() {
        host.display().to_string()
    } else {
        p.guest.clone()
    };
    Ok(Preopen {
        host,
        guest,
        access: p.access,
    })
}

/// How long each phase of a native start took, logged at debug level (target
/// `sandpipe::start`, one event: `probe_us=.. landlock_us=.. ...`) for `sandpipe-bench
/// --profile-start`. `fork_exec` runs from the fork to the plugin's `exec` (the jail's steps
/// in the child included); `probe` is the namespace probe, paid once per process.
struct Phases {
    last: Instant,
    taken: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            last: Instant::now(),
            taken: Vec::with_capacity(8),
        }
    }

    /// A phase timed elsewhere (the namespace probe, maybe run before this start began).
    fn add(&mut self, phase: &'static str, took: Duration) {
        self.taken.push((phase, took));
    }

    fn mark(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.taken.push((phase, now - self.last));
        self.last = now;
    }

    fn log(&self) {
        if tracing::enabled!(target: "sandpipe::start", tracing::Level::DEBUG) {
            let text = self
                .taken
                .iter()
                .map(|(phase, d)| format!("{phase}_us={}", d.as_micros()))
                .collect::<Vec<_>>()
                .join(" ");
            tracing::debug!(target: "sandpipe::start", "native start: {text}");
        }
    }
}

/// Whether native plugins get a seccomp system-call filter on this kernel (the start-up line).
#[cfg(feature = "cli")]
pub fn seccomp_available() -> bool {
    seccomp::available()
}

/// Fork every native plugin from one thread that lives as long as the process: the kernel sends
/// `PR_SET_PDEATHSIG` when the *thread* that forked the child ends, so a plugin started from a
/// short-lived thread (a `spawn_blocking` worker, a thread running its own runtime) would be
/// killed with that thread instead of with sandpipe.
fn spawn_from_spawner_thread(
    mut cmd: std::process::Command,
) -> std::io::Result<std::process::Child> {
    type Job = (
        std::process::Command,
        std::sync::mpsc::Sender<std::io::Result<std::process::Child>>,
    );
    static SPAWNER: OnceLock<Option<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sandpipe-spawn".to_owned())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(spawner) = spawner else {
        return cmd.spawn();
    };
    let (reply, answer) = std::sync::mpsc::channel();
    spawner
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// In the forked child: ask for SIGKILL when the thread that forked us dies, then check that
/// `parent` (sandpipe's pid) had not already died before the request took effect, in which case
/// nobody will ever send it. Async-signal-safe: prctl and getppid only.
#[allow(unsafe_code)]
fn die_with_parent(parent: u32) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and return plain integers.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if u32::try_from(libc::getppid()).ok() != Some(parent) {
            libc::_exit(137);
        }
    }
    Ok(())
}

/// Mark every descriptor above stderr close-on-exec, so the plugin starts with its three pipes
/// and nothing sandpipe's own process happened to leave inheritable (a parent's jobserver
/// pipe, a socket opened without `CLOEXEC` by some library). Marked rather than closed: std
/// reports a failed exec through a pipe of its own that must stay open until the exec.
#[allow(unsafe_code)]
fn close_inherited_descriptors() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes plain integers and touches no memory; async-signal-safe.
    let marked =
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0;
    if marked {
        return;
    }
    // Kernels before 5.11: one fcntl per possible descriptor, up to the current limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit on our stack; async-signal-safe.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(1 << 16) as libc::c_int
    } else {
        1024
    };
    for fd in 3..top {
        // SAFETY: fcntl on a descriptor number; EBADF for a closed one is harmless.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// The child's process group, and whether its leader has been reaped. While the leader is a
/// zombie (or running) its id cannot be reused, so a signal sent under the lock with
/// `reaped == false` reaches this plugin's group and nothing else.
#[derive(Debug)]
struct Group {
    pgid: libc::pid_t,
    reaped: Mutex<bool>,
}

impl Group {
    fn signal(&self, signal: i32) {
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            send_group_signal(self.pgid, signal);
        }
    }
}

/// A forked watcher that kills the plugin's process group if sandpipe dies without stopping it
/// (SIGKILL included): it blocks reading a pipe whose only write end sandpipe holds, and the
/// kernel closes that end when sandpipe's process ends. Dropping the guard stops the watcher
/// first (SIGKILL, then reap) and only then closes the pipe, so a normal end never signals a
/// group id that may since have been reused.
#[derive(Debug)]
struct GroupGuard {
    pid: libc::pid_t,
    /// Held, never written: the watcher wakes when the last copy closes.
    _write_end: std::os::fd::OwnedFd,
}

impl GroupGuard {
    #[allow(unsafe_code)]
    fn start(pgid: libc::pid_t) -> Option<GroupGuard> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which lives across the call.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            tracing::warn!("no group guard: pipe2: {}", std::io::Error::last_os_error());
            return None;
        }
        let [read_end, write_end] = fds;
        // SAFETY: the child of a multi-threaded process may only make async-signal-safe calls:
        // it makes nothing but close_range, read, killpg and _exit system calls, on integers
        // and a byte of its own stack, and never returns into Rust code.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                let r = read_end as libc::c_uint;
                // Hold nothing of sandpipe's: no stdio, no plugin pipe, no engine pipe.
                if r > 0 {
                    libc::syscall(libc::SYS_close_range, 0u32, r - 1, 0u32);
                }
                libc::syscall(libc::SYS_close_range, r + 1, u32::MAX, 0u32);
                let mut byte = 0u8;
                loop {
                    let n = libc::read(read_end, (&raw mut byte).cast(), 1);
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    break;
                }
                libc::killpg(pgid, libc::SIGKILL);
                libc::_exit(0);
            }
        }
        // SAFETY: `read_end` and `write_end` are ours, just created and not owned elsewhere.
        unsafe { libc::close(read_end) };
        let write_end = unsafe { std::os::fd::OwnedFd::from_raw_fd(write_end) };
        if pid < 0 {
            tracing::warn!("no group guard: fork: {}", std::io::Error::last_os_error());
            return None;
        }
        Some(GroupGuard {
            pid,
            _write_end: write_end,
        })
    }
}

impl Drop for GroupGuard {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child's pid, which stays ours until reaped here.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        // `_write_end` closes after this, with the watcher already gone.
    }
}

#[derive(Debug)]
struct KillOnDrop(Arc<Group>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.signal(libc::SIGKILL);
    }
}

/// How the child ended and the CPU time it used (user + system, its reaped children
/// included).
#[derive(Debug)]
struct Waited {
    status: ExitStatus,
    cpu: Duration,
}

type WaitResult = std::io::Result<Waited>;

/// Reap the child on a thread of its own: `wait4` is the only way to get the status together
/// with the child's own resource usage, which tells a SIGKILL at the CPU hard limit from any
/// other.
fn wait_in_thread(group: Arc<Group>) -> std::io::Result<oneshot::Receiver<WaitResult>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("sandpipe-wait".to_owned())
        .spawn(move || {
            let _ = tx.send(reap(&group));
        })?;
    Ok(rx)
}

#[allow(unsafe_code)]
fn reap(group: &Group) -> WaitResult {
    // First wait without reaping, so that nobody can signal a reused id; then reap under the
    // lock the signallers take.
    loop {
        // SAFETY: siginfo_t is plain data; an all-zero value is valid for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes into `info`, which lives across the call.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                group.pgid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            *group.reaped.lock().unwrap_or_else(PoisonError::into_inner) = true;
            return Err(e);
        }
    }
    let mut reaped = group.reaped.lock().unwrap_or_else(PoisonError::into_inner);
    let mut status = 0;
    // SAFETY: rusage is plain data; an all-zero value is valid for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes into `status` and `usage`, which live across the call.
        let r = unsafe { libc::wait4(group.pgid, &mut status, 0, &mut usage) };
        if r == group.pgid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            *reaped = true;
            return Err(e);
        }
    }
    *reaped = true;
    Ok(Waited {
        status: ExitStatus::from_raw(status),
        cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
    })
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
}

/// Classify an exit the host did not cause. `cpu_limit` is the soft `RLIMIT_CPU` the child ran
/// under, `memory_limit` its memory cap, `oom` whether the kernel's OOM killer killed in the
/// plugin's cgroup (which holds it to the cap exactly, memfd and shared memory included).
///
/// A native plugin refused memory under `RLIMIT_DATA` sees `ENOMEM` and usually dies of it
/// (Rust and C++ abort, Python exits 1 on an uncaught `MemoryError`, Go and V8 crash); the kernel
/// reports nothing more. So a failed end (a crash signal or a non-zero code) of a plugin whose
/// resident set was seen at half the cap or more (`peak`, sampled by [`memory::exceeded`]) is
/// reported as [`Exit::MemoryLimit`]: the plugin really used memory close to the cap. A plugin
/// that handles the refusal and exits 0 is not.
fn from_status(
    waited: &Waited,
    peak: u64,
    oom: bool,
    cpu_limit: Option<Duration>,
    memory_limit: Option<u64>,
    tail: &StderrTail,
) -> Exit {
    let Waited { status, cpu } = *waited;
    match (status.signal(), cpu_limit) {
        // The kernel's SIGXCPU at the soft limit, or its SIGKILL at the hard limit (one second
        // later) for a plugin that ignores SIGXCPU: the CPU time it used tells the latter from
        // any other SIGKILL.
        (Some(libc::SIGXCPU), Some(limit)) => return Exit::CpuTimeLimit { limit },
        (Some(libc::SIGKILL), Some(limit)) if cpu >= limit => {
            return Exit::CpuTimeLimit { limit };
        }
        _ => {}
    }
    let failed = match status.code() {
        Some(code) => code != 0,
        None => status
            .signal()
            .is_some_and(|s| s == libc::SIGKILL || is_crash(s)),
    };
    if let Some(limit) = memory_limit
        && failed
        && (oom || peak >= limit / 2)
    {
        return Exit::MemoryLimit { limit };
    }
    if let Some(code) = status.code() {
        return Exit::Exited(code);
    }
    match status.signal() {
        // Crash signals are the native counterpart of a wasm trap.
        Some(sig) if is_crash(sig) => Exit::Trap {
            message: format!("killed by signal {sig} ({})", signal_name(sig)),
            stderr_tail: tail.lines(),
        },
        signal => Exit::Killed { signal },
    }
}

fn is_crash(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP
    )
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
    }
}

/// Send `signal` to a native plugin's process group (the session's `terminate` and `signal`).
pub(crate) fn signal_group(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        send_group_signal(pid, signal);
    }
}

#[allow(unsafe_code)]
fn send_group_signal(pgid: i32, signal: i32) {
    // SAFETY: killpg takes plain integers and touches no memory of ours; a failure (ESRCH when
    // the group is already gone) is harmless and ignored.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Pipe capacity asked for on the child's stdin and stdout. The Linux default (64 KiB) is
/// smaller than a 64 KiB frame plus its newline, so each such frame would cost extra
/// switches between host and child while the pipe fills and drains.
const PIPE_BYTES: libc::c_int = 1 << 20;

#[allow(unsafe_code)]
fn grow_pipe(fd: RawFd) {
    // SAFETY: F_SETPIPE_SZ takes an int and touches no memory of ours; `fd` is a pipe we own
    // and keep open. A refusal (EPERM above /proc/sys/fs/pipe-max-size) keeps the default size.
    let got = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES) };
    if got < 0 {
        tracing::debug!(
            "could not grow a plugin pipe: {}",
            std::io::Error::last_os_error()
        );
    }
}
