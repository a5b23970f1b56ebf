//! Native plugins: real child processes, unsandboxed. The only module that spawns processes.
//!
//! What is enforced: the environment is cleared to the policy's list; the child gets its own
//! process group, killed (SIGKILL to the group) on deadline, on kill and when the session is
//! dropped; the memory cap becomes `RLIMIT_AS`; stdin/stdout/stderr are pipes.
//!
//! What is NOT enforced: fuel, filesystem restriction (`--dir` only documents intent; the child
//! sees everything its user can), network access, syscalls.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use tokio::process::Command;
use tokio::sync::watch;

use crate::error::{Exit, HostError};
use crate::policy::Policy;
use crate::sandbox::finish;
use crate::stderr::{StderrMode, StderrTail};
use crate::transport::{KillSwitch, Transport, killed};

/// Start `program` as a child process under what `policy` can express natively.
pub(crate) fn spawn(
    program: &Path,
    policy: &Policy,
    stderr_mode: StderrMode,
    tail_lines: usize,
) -> Result<Transport, HostError> {
    let mut cmd = Command::new(program);
    cmd.args(&policy.args)
        .env_clear()
        .envs(policy.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(limit) = policy.max_memory {
        set_address_space_limit(&mut cmd, limit);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| HostError::Spawn {
        program: program.to_owned(),
        source,
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let (Some(stdin), Some(stdout), Some(stderr_pipe)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(HostError::Spawn {
            program: program.to_owned(),
            source: std::io::Error::other("child stdio was not piped"),
        });
    };

    grow_pipe(stdin.as_raw_fd());
    grow_pipe(stdout.as_raw_fd());

    let stderr = StderrTail::new(tail_lines);
    let name = crate::sandbox::argv0_for(program);
    let stderr_task = tokio::spawn(stderr.clone().drain(stderr_pipe, stderr_mode, name));
    let (exit_tx, exit_rx) = watch::channel(None);
    let (kill, mut kill_rx) = KillSwitch::new();
    let deadline = policy.deadline;
    let tail = stderr.clone();

    tokio::spawn(async move {
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until((started + d).into()).await,
                None => std::future::pending().await,
            }
        };
        let exit = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => from_status(status, &tail),
                Err(e) => Exit::Trap { message: format!("waiting for child: {e}"), stderr_tail: Vec::new() },
            },
            () = timer => {
                kill_group(pid);
                let _ = child.wait().await;
                Exit::DeadlineExceeded { limit: deadline.unwrap_or_default() }
            }
            () = killed(&mut kill_rx) => {
                kill_group(pid);
                let _ = child.wait().await;
                Exit::Killed { signal: Some(libc::SIGKILL) }
            }
        };
        finish(exit, stderr_task, &tail, exit_tx).await;
    });

    Ok(Transport {
        stdin: Box::pin(stdin),
        stdout: Box::pin(stdout),
        exit: exit_rx,
        kill,
        stderr,
        pid: pid.and_then(|p| u32::try_from(p).ok()),
    })
}

fn from_status(status: std::process::ExitStatus, tail: &StderrTail) -> Exit {
    if let Some(code) = status.code() {
        return Exit::Exited(code);
    }
    match status.signal() {
        // Crash signals are the native counterpart of a wasm trap.
        Some(
            sig @ (libc::SIGABRT
            | libc::SIGSEGV
            | libc::SIGBUS
            | libc::SIGILL
            | libc::SIGFPE
            | libc::SIGTRAP),
        ) => Exit::Trap {
            message: format!("killed by signal {sig} ({})", signal_name(sig)),
            stderr_tail: tail.lines(),
        },
        signal => Exit::Killed { signal },
    }
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

/// SIGKILL the child's whole process group. Called only while the leader is not yet reaped,
/// so the group id cannot have been reused.
fn kill_group(pid: Option<i32>) {
    if let Some(pid) = pid {
        send_group_signal(pid, libc::SIGKILL);
    }
}

/// SIGTERM a native plugin's process group (the session's `terminate`).
pub(crate) fn terminate_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        send_group_signal(pid, libc::SIGTERM);
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

#[allow(unsafe_code)]
fn set_address_space_limit(cmd: &mut Command, bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: the closure runs in the forked child before exec; it only calls setrlimit, which
    // is async-signal-safe, on a value captured by copy. No allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
