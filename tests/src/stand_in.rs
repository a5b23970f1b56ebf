//! Playing the engine against a real peer, run directly or behind `sandpipe run`, and keeping
//! what the engine sees: every byte the peer writes to stdout, then how the process ended.
//!
//! ```text
//!  steps ──► stdin ─► [ peer | sandpipe run … peer ] ─► stdout ─► lines ─► Transcript.stdout
//!  (Send, Expect, Signal, CloseStdin)            └──► stderr ─► Transcript.stderr
//! ```
//!
//! The engine works in lockstep: `Expect(n)` waits for `n` more lines before the next step, so
//! a peer that answers concurrently still produces one order of bytes, and two runs of the same
//! steps can be compared byte for byte. Timing is the only thing left out.
//!
//! ```no_run
//! use sandpipe_tests::stand_in::{Step, play};
//! let mut cmd = std::process::Command::new("cat");
//! let t = play(&mut cmd, &[Step::Send(b"{}\n".to_vec()), Step::Expect(1), Step::CloseStdin]);
//! assert_eq!(t.stdout, b"{}\n");
//! assert_eq!(t.status, "exit code 0");
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Give the peer SIGINT and SIGQUIT at their defaults, as an engine started from a terminal
/// passes them on. A test process started in the background of a non-interactive shell has
/// both ignored, and a peer run directly would inherit that: a `Signal("INT")` step would then
/// test nothing (sandpipe takes the signals over either way, so only the direct runs changed).
#[allow(unsafe_code)]
fn default_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec. It only calls `signal`,
    // which is async-signal-safe, allocates nothing and touches no state shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Only a guard against a hung peer, so that a broken run fails instead of blocking the suite;
/// nothing is asserted about time.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// One thing the engine does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write these bytes to the process's stdin.
    Send(Vec<u8>),
    /// Wait for this many more lines on its stdout.
    Expect(usize),
    /// Send this signal (`"INT"`, `"TERM"`, … as `kill -s` spells it) to the process the
    /// engine spawned.
    Signal(&'static str),
    /// Close its stdin.
    CloseStdin,
}

/// What the engine saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// Every byte read from stdout, in order.
    pub stdout: Vec<u8>,
    /// `exit code N` or `killed by signal N`.
    pub status: String,
    /// The process's stderr: not part of the protocol, kept for diagnostics and for peers
    /// that log what they received.
    pub stderr: Vec<u8>,
    /// A step the engine could not complete (no answer came, stdin was closed under it), with
    /// the rest of the steps skipped; `None` when every step ran.
    pub broke: Option<String>,
}

impl Transcript {
    /// The stderr lines that start with `prefix`, in order.
    pub fn stderr_lines(&self, prefix: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.stderr)
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// `Ok` when the engine saw the same bytes and the same end in both; otherwise a message
    /// that shows where they part (frames can be megabytes, so not the whole of both).
    pub fn same_for_engine(&self, other: &Transcript) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.broke != other.broke {
            problems.push(format!(
                "engine: {} vs {}",
                self.broke.as_deref().unwrap_or("every step ran"),
                other.broke.as_deref().unwrap_or("every step ran")
            ));
        }
        if self.status != other.status {
            problems.push(format!("status: {} vs {}", self.status, other.status));
        }
        if self.stdout != other.stdout {
            let at = self
                .stdout
                .iter()
                .zip(&other.stdout)
                .position(|(a, b)| a != b)
                .unwrap_or(self.stdout.len().min(other.stdout.len()));
            let around = |b: &[u8]| {
                let from = at.saturating_sub(80);
                let to = (at + 160).min(b.len());
                String::from_utf8_lossy(&b[from..to])
                    .escape_debug()
                    .to_string()
            };
            problems.push(format!(
                "stdout differs at byte {at} ({} vs {} bytes):\n  {}\n  {}",
                self.stdout.len(),
                other.stdout.len(),
                around(&self.stdout),
                around(&other.stdout)
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}\n--- stderr of the first:\n{}\n--- stderr of the second:\n{}",
                problems.join("\n"),
                tail(&self.stderr),
                tail(&other.stderr)
            ))
        }
    }
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    let lines = &lines[lines.len().saturating_sub(30)..];
    lines
        .iter()
        .map(|l| {
            if l.len() > 300 {
                format!("{}… ({} bytes)", &l[..l.floor_char_boundary(300)], l.len())
            } else {
                (*l).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("{status}"),
    }
}

/// Spawn `cmd` with piped stdio, play `steps`, then keep reading until the process has
/// exited and its stdout is closed. Stdin stays open until a `CloseStdin` step or the exit, as
/// an engine keeps its end of the pipe. A step that cannot complete ends the steps and is
/// recorded in [`Transcript::broke`].
pub fn play(cmd: &mut Command, steps: &[Step]) -> Transcript {
    default_signals(cmd);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");

    let (line_tx, lines) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::with_capacity(1 << 16, stdout);
        loop {
            let mut line = Vec::new();
            match stdout.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line_tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut all = Vec::new();
        // A read error only ends the capture early; stderr is diagnostics.
        let _ = stderr.read_to_end(&mut all);
        all
    });

    let mut seen = Vec::new();
    let mut problem: Option<String> = None;
    for step in steps {
        match step {
            Step::Send(bytes) => {
                let Some(pipe) = stdin.as_mut() else {
                    problem = Some("Send after CloseStdin".into());
                    break;
                };
                if let Err(e) = pipe.write_all(bytes).and_then(|()| pipe.flush()) {
                    problem = Some(format!("writing {} bytes to stdin: {e}", bytes.len()));
                    break;
                }
            }
            Step::Expect(n) => {
                for i in 0..*n {
                    match lines.recv_timeout(HANG_GUARD) {
                        Ok(line) => seen.extend_from_slice(&line),
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            problem = Some(format!("stdout closed before answer line {}", i + 1));
                            break;
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            problem = Some(format!("no answer line {} (hang guard)", i + 1));
                            break;
                        }
                    }
                }
                if problem.is_some() {
                    break;
                }
            }
            Step::Signal(signal) => {
                let sent = Command::new("kill")
                    .args(["-s", signal, &pid.to_string()])
                    .status()
                    .expect("running kill");
                assert!(sent.success(), "kill -s {signal} {pid} failed");
            }
            Step::CloseStdin => drop(stdin.take()),
        }
    }

    // Wait for the exit on a thread, so that a hung peer can be killed instead of hanging here.
    let (exit_tx, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });
    let status = match exited.recv_timeout(HANG_GUARD) {
        Ok(status) => status.expect("waiting for the process"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
            let status = exited
                .recv()
                .expect("the waiter thread")
                .expect("waiting for the process");
            problem.get_or_insert_with(|| "the process did not exit (killed it)".into());
            status
        }
    };
    drop(stdin);
    reader.join().expect("stdout reader");
    seen.extend(lines.try_iter().flatten());
    let stderr = errors.join().expect("stderr reader");
    Transcript {
        stdout: seen,
        status: describe(status),
        stderr,
        broke: problem,
    }
}

/// Outcomes of every (way of running, scenario), printed as one line per way (the table in the
/// issue's closing note comes from these), failing once at the end with every difference.
#[derive(Debug, Default)]
pub struct Tally {
    results: Vec<(String, String, Option<String>)>,
}

impl Tally {
    /// Note how `scenario` went when the peer ran `way` (e.g. `sandpipe run --framing lines`).
    pub fn record(&mut self, way: &str, scenario: &str, outcome: Result<(), String>) {
        self.results
            .push((way.to_owned(), scenario.to_owned(), outcome.err()));
    }

    /// Print the table and panic with every failure, if any.
    pub fn finish(self, peer: &str) {
        let mut ways: Vec<&str> = Vec::new();
        for (way, _, _) in &self.results {
            if !ways.contains(&way.as_str()) {
                ways.push(way);
            }
        }
        for way in ways {
            let of_way = || self.results.iter().filter(move |(w, _, _)| w == way);
            let passed: Vec<&str> = of_way()
                .filter(|(_, _, f)| f.is_none())
                .map(|(_, s, _)| s.as_str())
                .collect();
            let failed: Vec<&str> = of_way()
                .filter(|(_, _, f)| f.is_some())
                .map(|(_, s, _)| s.as_str())
                .collect();
            println!(
                "stand-in | {peer} | {way} | passed {}/{}: {} | failed: {}",
                passed.len(),
                passed.len() + failed.len(),
                passed.join(" "),
                if failed.is_empty() {
                    "-".to_owned()
                } else {
                    failed.join(" ")
                }
            );
        }
        let failures: Vec<String> = self
            .results
            .iter()
            .filter_map(|(w, s, f)| f.as_ref().map(|f| format!("{s}, {w}: {f}")))
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }
}
