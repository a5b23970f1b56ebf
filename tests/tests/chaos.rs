//! Chaos under load: 100 concurrent `sandpipe run --protocol oracle` sessions at
//! once, wasm and native, whose requests ask the plugin to trap, spin past its fuel or time,
//! allocate past its memory cap, or get it killed from outside mid-request; a fifth of the
//! engines close their pipes early. Every request the engine waits for is answered, with the
//! result or with the protocol's error; a session's misbehaving requests never touch another
//! session's answers; and once the last session ends, no process and no descriptor is left.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandpipe_tests::Target;
use sandpipe_tests::cli::path;
use sandpipe_tests::peers::{ORACLE_READY_ACK, oracle_invoke, sandpipe};
use sandpipe_tests::soak::children;

const SESSIONS: u64 = 100;
const REQUESTS: u64 = 6;
const SEED: u64 = 0xc4a0_5025;
/// A session still running after this is hung: its sandpipe is killed and the test fails.
const HANG_BOUND: Duration = Duration::from_secs(240);

#[derive(Debug, Default)]
struct Counts {
    sessions: u64,
    closed_early: u64,
    /// (selector, answer kind) → count.
    answers: BTreeMap<(&'static str, &'static str), u64>,
    kills: u64,
    statuses: BTreeMap<String, u64>,
    /// Every process the test saw: sandpipe and its native plugins.
    pids: Vec<Process>,
    failures: Vec<String>,
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[allow(unsafe_code)]
fn sigkill(pid: u32) {
    // SAFETY: kill takes plain integers.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// A process as `/proc` knows it: its id and start time (so a reused id is another process).
type Process = (u32, u64);

fn process(pid: u32) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces; the
    // start time is field 22 of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((pid, start))
}

/// The process still exists (a zombie counts: nobody reaped it).
fn alive(p: Process) -> bool {
    process(p.0) == Some(p)
}

fn session(n: u64, cache: &std::path::Path, counts: &Mutex<Counts>) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(SEED + n);
    let native = rng.u8(..10) < 3;
    let target = if native { Target::Native } else { Target::Wasm };
    let mut cmd = Command::new(sandpipe());
    cmd.args([
        "run",
        "--protocol",
        "oracle",
        "--restart",
        "--max-memory",
        "64MiB",
    ])
    .arg("--cache-dir")
    .arg(cache);
    if native {
        // What stops a native `sleep`. An `echo` must beat it on a machine loaded by the whole
        // test suite and a hundred sessions at once: 10 s leaves a starved echo room (3 s did
        // not, once), and the sleeps it stops still end well inside HANG_BOUND.
        cmd.args(["--request-timeout", "10s"]);
    } else {
        cmd.args(["--fuel-per-request", "20000000"]);
    }
    cmd.arg(path("oracle-hog", target));
    let mut child = sandpipe_tests::cli::spawn(&mut cmd);
    let pid = child.id();
    counts.lock().expect("counts").pids.extend(process(pid));
    let mut input = child.stdin.take().expect("stdin");
    let mut output = BufReader::new(child.stdout.take().expect("stdout"));
    let mut stderr = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    });
    // A hung session is killed, so a blocked read below returns and the case fails.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(HANG_BOUND).is_err() {
            sigkill(pid);
        }
    });
    let close_early = (rng.u8(..5) == 0).then(|| rng.u64(1..=REQUESTS));
    let mut line = String::new();
    let result = (|| -> Result<bool, String> {
        if output.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("no ready line".to_owned());
        }
        writeln!(input, "{ORACLE_READY_ACK}").map_err(|e| e.to_string())?;
        for id in 1..=REQUESTS {
            if close_early == Some(id) {
                return Ok(true);
            }
            let selector: &'static str = match rng.u8(..10) {
                0 => "trap",
                1 => "alloc",
                2 if native => "sleep",
                2 => "spin",
                3 if native => "kill",
                _ => "echo",
            };
            let invoke = if selector == "kill" {
                "sleep"
            } else {
                selector
            };
            writeln!(input, "{}", oracle_invoke(id, invoke, &["0x1"]))
                .map_err(|e| format!("request {id}: {e}"))?;
            if selector == "kill" {
                // The plugin blocks in its sleep: kill it from outside, as an OOM killer or
                // an operator would.
                let started = Instant::now();
                loop {
                    if let Some(&plugin) = children(pid).first() {
                        counts.lock().expect("counts").pids.extend(process(plugin));
                        sigkill(plugin);
                        break;
                    }
                    if started.elapsed() > HANG_BOUND {
                        return Err("no plugin process to kill".to_owned());
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                counts.lock().expect("counts").kills += 1;
            } else if native && let Some(&plugin) = children(pid).first() {
                counts.lock().expect("counts").pids.extend(process(plugin));
            }
            line.clear();
            if output.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err(format!("request {id} ({selector}): no answer"));
            }
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("request {id}: {e}: {line:?}"))?;
            if v["id"] != id {
                return Err(format!("request {id}: answer for another id: {line}"));
            }
            let kind = match (v.get("result"), v.get("error")) {
                (Some(r), None) if *r == serde_json::json!(["0x1"]) => "result",
                (None, Some(_)) => "error",
                _ => return Err(format!("request {id}: neither result nor error: {line}")),
            };
            // Only a misbehaving request fails; an echo always gets its result.
            if (selector == "echo") != (kind == "result") {
                return Err(format!("request {id} ({selector}) got {kind}: {line}"));
            }
            *counts
                .lock()
                .expect("counts")
                .answers
                .entry((selector, kind))
                .or_default() += 1;
        }
        Ok(false)
    })();
    // An early close drops both pipes at once, without reading what is still coming.
    drop(input);
    drop(output);
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = done_tx.send(());
    let _ = watchdog.join();
    let stderr = err.join().unwrap_or_default();
    let early = result.clone().unwrap_or(false);
    let mut c = counts.lock().expect("counts");
    c.sessions += 1;
    c.closed_early += u64::from(early);
    let status_text = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exit {code}"),
        (_, Some(sig)) => format!("signal {sig}"),
        _ => format!("{status:?}"),
    };
    *c.statuses
        .entry(format!(
            "{} {status_text}",
            if early { "closed early" } else { "to EOF" }
        ))
        .or_default() += 1;
    drop(c);
    result.map_err(|e| format!("session {n} ({target:?}): {e}; stderr: {stderr}"))?;
    if stderr.contains("panicked") {
        return Err(format!("session {n}: sandpipe panicked: {stderr}"));
    }
    if !early && !status.success() {
        return Err(format!(
            "session {n} ({target:?}) ended with {status_text} at its EOF; stderr: {stderr}"
        ));
    }
    Ok(())
}

#[test]
fn a_hundred_misbehaving_sessions_at_once_stay_apart_and_leave_nothing() {
    let cache = tempfile::tempdir().expect("cache dir");
    // Build and compile first, so the sessions start together.
    let status = Command::new(sandpipe())
        .arg("compile")
        .arg("--cache-dir")
        .arg(cache.path())
        .arg(path("oracle-hog", Target::Wasm))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("sandpipe compile");
    assert!(status.success());
    let _ = path("oracle-hog", Target::Native);
    let fds_before = fd_count();
    let counts = Mutex::new(Counts::default());
    std::thread::scope(|s| {
        for n in 0..SESSIONS {
            let (cache, counts) = (cache.path(), &counts);
            s.spawn(move || {
                if let Err(e) = session(n, cache, counts) {
                    counts.lock().expect("counts").failures.push(e);
                }
            });
        }
    });
    let counts = counts.into_inner().expect("counts");
    eprintln!(
        "{} sessions ({} closed early), {} plugins killed from outside\nanswers: {:?}\nstatuses: {:?}",
        counts.sessions, counts.closed_early, counts.kills, counts.answers, counts.statuses
    );
    assert!(
        counts.failures.is_empty(),
        "{} sessions failed:\n{}",
        counts.failures.len(),
        counts.failures.join("\n")
    );
    assert_eq!(counts.sessions, SESSIONS);
    // Nothing left: every sandpipe and plugin process gone (reaped, not a zombie), and this
    // process holds no descriptor more than before (each session's pipes closed).
    let started = Instant::now();
    let mut left: Vec<Process> = counts.pids.clone();
    while !left.is_empty() && started.elapsed() < Duration::from_secs(30) {
        left.retain(|&p| alive(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left.is_empty(), "processes left: {left:?}");
    assert_eq!(fd_count(), fds_before, "descriptors left in the engine");
    // The chaos happened: each kind of misbehaviour was answered with its error.
    for selector in ["trap", "alloc", "spin", "sleep", "kill"] {
        assert!(
            counts.answers.contains_key(&(selector, "error")),
            "no {selector} request ran: {:?}",
            counts.answers
        );
    }
}
