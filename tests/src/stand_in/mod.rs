//! Playing the engine against a real peer, run directly or behind `sandpipe run`, and keeping
//! what the engine sees: every byte the peer writes to stdout, then how the process ended.
//!
//! ```text
//!   test (engine) ── send / await a frame or lines / signal / close stdin ──► spawned process
//!        ▲                                                                     │
//!        └──── stdout bytes (the transcript) + exit status (+ stderr) ◄────────┘
//!   spawned process = the peer itself (Way::Direct) or `sandpipe run [--framing F] PEER`
//!   (Way::Behind), or any command line
//! ```
//!
//! One [`Session`] runs every spawned process; two ways to drive it:
//! - by hand: [`Session::send`], [`Session::await_frame`] (frames split with the peer's
//!   framing), [`Session::signal`], then [`Session::finish`], for engines that read what the
//!   peer says before answering (ATP's hello, [`atp`]);
//! - by script: [`play`] runs a list of [`Step`]s in lockstep, `Expect(n)` waiting for `n`
//!   more lines, so a peer that answers concurrently still produces one order of bytes and two
//!   runs of the same steps can be compared byte for byte ([`Transcript::same_for_engine`]);
//!   [`Tally`] collects the outcomes of many runs.
//!
//! The engine waits on events (a frame or a line the peer wrote, its end, its exit), never on
//! time. A bound of [`STEP`] per wait turns a hang into a failure with the transcript so far;
//! it asserts nothing about speed.
//!
//! ```no_run
//! use sandpipe_tests::stand_in::{Step, play};
//! let mut cmd = std::process::Command::new("cat");
//! let t = play(&mut cmd, &[Step::Send(b"{}\n".to_vec()), Step::Expect(1), Step::CloseStdin]);
//! assert_eq!(t.stdout, b"{}\n");
//! assert_eq!(t.status, "exit code 0");
//! ```

pub mod atp;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use sandpipe_proto::frame::{AnyFramer, BytesMut, FrameLimits, Framer, Framing};

/// How long one wait may take before the test fails as hung: only a guard against a hung
/// peer, so that a broken run fails instead of blocking the suite.
pub const STEP: Duration = Duration::from_secs(180);

/// How long [`Session::finish`] waits, after a signal, for the peer to end before the EOF.
pub const AFTER_SIGNAL: Duration = Duration::from_secs(3);

/// A real peer: the command line an engine's configuration holds for it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The program (for a Python peer, the venv's `bin/python`).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment the engine gives it (the direct run gets exactly this; behind sandpipe each
    /// one is granted with `--env NAME=VALUE`).
    pub env: Vec<(String, OsString)>,
    /// Directories of the peer's own data it writes (granted with `--dir`; never the
    /// interpreter: sandpipe grants that by itself).
    pub data_dirs: Vec<PathBuf>,
    /// How the peer frames its stdout (the engine splits frames with it to await them).
    pub framing: Framing,
}

/// How the engine starts the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The peer's own command.
    Direct,
    /// `sandpipe run [--framing F] PEER...` in its place, default limits.
    Behind(Option<Framing>),
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Way::Direct => write!(f, "direct"),
            Way::Behind(None) => write!(f, "sandpipe run"),
            Way::Behind(Some(fr)) => write!(f, "sandpipe run --framing {}", fr.name()),
        }
    }
}

impl Way {
    /// Direct, then behind sandpipe with raw framing and with the peer's own framing.
    pub fn all(framing: Framing) -> [Way; 3] {
        [Way::Direct, Way::Behind(None), Way::Behind(Some(framing))]
    }
}

/// The command line the engine runs for `peer` started `way`.
pub fn command(peer: &Peer, way: Way) -> Command {
    match way {
        Way::Direct => {
            let mut cmd = Command::new(&peer.program);
            cmd.args(&peer.args).env_clear();
            for (k, v) in &peer.env {
                cmd.env(k, v);
            }
            cmd
        }
        Way::Behind(framing) => {
            let mut cmd = Command::new(crate::peers::sandpipe());
            cmd.arg("run").env_clear();
            if let Some(f) = framing {
                cmd.args(["--framing", f.name()]);
            }
            for (k, v) in &peer.env {
                let mut grant = OsString::from(format!("{k}="));
                grant.push(v);
                cmd.arg("--env").arg(grant);
            }
            for d in &peer.data_dirs {
                cmd.arg("--dir").arg(d);
            }
            cmd.arg(&peer.program).args(&peer.args);
            cmd
        }
    }
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
        self.stderr_text()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// The process's stderr, as text.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// `Ok` when the engine saw the same bytes and the same end in both (stderr is not the
    /// engine's); otherwise a message that shows where they part, each side rendered
    /// ([`render`]: frames can be megabytes, so not the whole of both).
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
            let around =
                |b: &[u8]| render(&b[at.saturating_sub(80).min(b.len())..(at + 160).min(b.len())]);
            problems.push(format!(
                "stdout differs at byte {at} ({} vs {} bytes):\n  ...{}\n  ...{}",
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

/// The last 30 lines of `stderr`, each cut at 300 bytes.
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

fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("{status}"),
    }
}

/// Give the peer SIGINT and SIGQUIT at their defaults, as an engine started from a terminal
/// passes them on. A test process started in the background of a non-interactive shell has
/// both ignored, and a peer run directly would inherit that: a signal step would then test
/// nothing (sandpipe takes the signals over either way, so only the direct runs changed).
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

#[derive(Default)]
struct Seen {
    bytes: Vec<u8>,
    eof: bool,
}

/// Why a wait for a line ended without one.
enum NoLine {
    /// Stdout ended.
    Closed,
    /// Nothing came within [`STEP`].
    Hung,
}

/// One running process: the engine's side of the pipes.
pub struct Session {
    label: String,
    /// `None` once waited for.
    child: Option<Child>,
    pid: u32,
    stdin: Option<ChildStdin>,
    out: Arc<(Mutex<Seen>, Condvar)>,
    err: Arc<Mutex<Vec<u8>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    framer: AnyFramer,
    pending: BytesMut,
    /// Stdout bytes handed to the framer.
    taken: usize,
    /// Stdout bytes handed out as lines ([`play`]'s `Expect`).
    lines_taken: usize,
    /// Frames the engine has examined, in order.
    pub frames: Vec<Vec<u8>>,
    /// A signal was sent: [`Session::finish`] gives the peer a moment to act on it before the
    /// stdin EOF (see there).
    signalled: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("label", &self.label)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Spawn `peer` the given way, stdin, stdout and stderr piped.
    pub fn start(peer: &Peer, way: Way) -> Session {
        Session::spawn(command(peer, way), peer.framing, way)
    }

    /// Spawn an arbitrary command line (already built with [`command`] or by hand), whose
    /// stdout is framed with `framing`.
    pub fn spawn(mut cmd: Command, framing: Framing, way: Way) -> Session {
        Session::launch(&mut cmd, framing, way.to_string())
    }

    fn launch(cmd: &mut Command, framing: Framing, label: String) -> Session {
        default_signals(cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out: Arc<(Mutex<Seen>, Condvar)> = Arc::default();
        let err: Arc<Mutex<Vec<u8>>> = Arc::default();
        let o = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = stdout.read(&mut buf).unwrap_or(0);
                let (lock, cv) = &*o;
                let mut seen = lock.lock().expect("lock");
                if n == 0 {
                    seen.eof = true;
                    cv.notify_all();
                    return;
                }
                seen.bytes.extend_from_slice(&buf[..n]);
                cv.notify_all();
            }
        });
        let e = err.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            // A read error only ends the capture early; stderr is diagnostics.
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    return;
                }
                e.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        });
        Session {
            label,
            pid: child.id(),
            child: Some(child),
            stdin,
            out,
            err,
            threads: vec![reader, drain],
            framer: framing.framer(FrameLimits::with_max_frame_bytes(64 << 20)),
            pending: BytesMut::new(),
            taken: 0,
            lines_taken: 0,
            frames: Vec::new(),
            signalled: false,
        }
    }

    /// The pid of the process the engine spawned (the peer, or sandpipe).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the process wrote on stderr so far, as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().expect("lock")).into_owned()
    }

    fn context(&self) -> String {
        let bytes = self.out.0.lock().expect("lock").bytes.len();
        let stderr = self.stderr();
        let mut start = stderr.len().saturating_sub(4000);
        while !stderr.is_char_boundary(start) {
            start += 1;
        }
        format!(
            "{} (pid {}), {} stdout bytes, {} frames; stderr:\n{}",
            self.label,
            self.pid,
            bytes,
            self.frames.len(),
            &stderr[start..]
        )
    }

    /// Write `bytes` to the peer's stdin as they are, or say why that failed.
    fn try_send(&mut self, bytes: &[u8]) -> Result<(), String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("Send after CloseStdin".into());
        };
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing {} bytes to stdin: {e}", bytes.len()))
    }

    /// Write `bytes` to the peer's stdin as they are.
    pub fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_send(bytes) {
            panic!("{e}; {}", self.context());
        }
    }

    /// Close the peer's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Send signal `name` (`INT`, `TERM`, ... as `kill -s` spells it) to the spawned process.
    pub fn signal(&mut self, name: &str) {
        self.signalled = true;
        let status = Command::new("kill")
            .args(["-s", name, &self.pid.to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -s {name} {}", self.pid);
    }

    /// The next frame the peer writes, or `None` at the end of its stdout.
    pub fn next_frame(&mut self) -> Option<Vec<u8>> {
        loop {
            match self.framer.decode(&mut self.pending) {
                Ok(Some(frame)) => {
                    self.frames.push(frame.to_vec());
                    return Some(frame.to_vec());
                }
                Ok(None) => {}
                Err(e) => panic!("the peer's stdout is not framed: {e}; {}", self.context()),
            }
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let (seen, timeout) = cv
                .wait_timeout_while(seen, STEP, |s| s.bytes.len() == self.taken && !s.eof)
                .expect("lock");
            if timeout.timed_out() {
                drop(seen);
                panic!("no frame after {STEP:?}; {}", self.context());
            }
            if seen.bytes.len() > self.taken {
                self.pending.extend_from_slice(&seen.bytes[self.taken..]);
                self.taken = seen.bytes.len();
                continue;
            }
            // End of stdout and nothing new: whatever is left is not a whole frame.
            return None;
        }
    }

    /// Read frames until one satisfies `want`, and return it.
    pub fn await_frame(&mut self, what: &str, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        loop {
            match self.next_frame() {
                Some(f) if want(&f) => return f,
                Some(_) => {}
                None => panic!("stdout ended before {what}; {}", self.context()),
            }
        }
    }

    /// Wait for the next whole line on stdout (raw bytes, whatever the framing).
    fn next_line(&mut self) -> Result<(), NoLine> {
        let (lock, cv) = &*self.out;
        let from = self.lines_taken;
        let newline = |s: &Seen| s.bytes[from..].iter().position(|&b| b == b'\n');
        let seen = lock.lock().expect("lock");
        let (seen, _) = cv
            .wait_timeout_while(seen, STEP, |s| newline(s).is_none() && !s.eof)
            .expect("lock");
        match newline(&seen) {
            Some(at) => {
                self.lines_taken = from + at + 1;
                Ok(())
            }
            None if seen.eof => Err(NoLine::Closed),
            None => Err(NoLine::Hung),
        }
    }

    /// Wait for the process to exit, killing it if it has not within [`STEP`]; its status,
    /// and whether it had to be killed.
    fn wait_exit(&mut self) -> (ExitStatus, bool) {
        let mut child = self.child.take().expect("waited for once");
        // Wait on a thread, so that a hung process can be killed instead of hanging here.
        let (exit_tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = exit_tx.send(child.wait());
        });
        match exited.recv_timeout(STEP) {
            Ok(status) => (status.expect("waiting for the process"), false),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-s", "KILL", &self.pid.to_string()])
                    .status();
                let status = exited
                    .recv()
                    .expect("the waiter thread")
                    .expect("waiting for the process");
                (status, true)
            }
        }
    }

    /// Read stdout to its end, join the readers, and give the transcript.
    fn transcript(&mut self, status: ExitStatus, broke: Option<String>) -> Transcript {
        self.stdin = None;
        for t in self.threads.drain(..) {
            t.join().expect("reader thread");
        }
        let stdout = std::mem::take(&mut self.out.0.lock().expect("lock").bytes);
        Transcript {
            stdout,
            status: status_text(status),
            stderr: std::mem::take(&mut self.err.lock().expect("lock")),
            broke,
        }
    }

    /// Close stdin, read stdout to its end, wait for the process, and give the transcript.
    pub fn finish(mut self) -> Transcript {
        // After a signal, an engine waits for the plugin to act on it before it ends its
        // input. Behind sandpipe the signal is forwarded while an EOF may go straight to the
        // plugin (inherited stdin), so an EOF sent at once could reach the plugin first and
        // it would end by its EOF path instead of its signal handler: a race the direct run
        // does not have. A plugin that ignores the signal gets its EOF after `AFTER_SIGNAL`.
        if self.signalled {
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let _ = cv
                .wait_timeout_while(seen, AFTER_SIGNAL, |s| !s.eof)
                .expect("lock");
        }
        self.stdin = None;
        {
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let (seen, timeout) = cv.wait_timeout_while(seen, STEP, |s| !s.eof).expect("lock");
            if timeout.timed_out() {
                drop(seen);
                panic!("stdout still open after {STEP:?}; {}", self.context());
            }
        }
        let (status, killed) = self.wait_exit();
        assert!(
            !killed,
            "the process did not exit (killed it); {}",
            self.context()
        );
        self.transcript(status, None)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A failed test must not leave the peer running.
        if let Some(child) = self.child.as_mut()
            && let Ok(None) = child.try_wait()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One thing the engine does in a [`play`] script.
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

/// Spawn `cmd` with piped stdio, play `steps`, then keep reading until the process has
/// exited and its stdout is closed. Stdin stays open until a `CloseStdin` step or the exit, as
/// an engine keeps its end of the pipe. A step that cannot complete ends the steps and is
/// recorded in [`Transcript::broke`].
pub fn play(cmd: &mut Command, steps: &[Step]) -> Transcript {
    // Lines are counted on the raw bytes; the framing is not used.
    let mut s = Session::launch(cmd, Framing::JsonLines, "engine script".into());
    let mut problem: Option<String> = None;
    'steps: for step in steps {
        match step {
            Step::Send(bytes) => {
                if let Err(e) = s.try_send(bytes) {
                    problem = Some(e);
                    break;
                }
            }
            Step::Expect(n) => {
                for i in 0..*n {
                    match s.next_line() {
                        Ok(()) => {}
                        Err(NoLine::Closed) => {
                            problem = Some(format!("stdout closed before answer line {}", i + 1));
                            break 'steps;
                        }
                        Err(NoLine::Hung) => {
                            problem = Some(format!("no answer line {} (hang guard)", i + 1));
                            break 'steps;
                        }
                    }
                }
            }
            Step::Signal(signal) => s.signal(signal),
            Step::CloseStdin => s.close_stdin(),
        }
    }
    let (status, killed) = s.wait_exit();
    if killed {
        problem.get_or_insert_with(|| "the process did not exit (killed it)".into());
    }
    s.transcript(status, problem)
}

/// Outcomes of every (way of running, scenario), printed as one line per way, failing once at
/// the end with every difference.
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

/// Bytes as readable text: printable ASCII kept, the rest escaped, long runs of one byte
/// shortened (`x{1048576}`), so a 1 MiB frame fits in a failure message.
pub fn render(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let mut run = 1;
        while i + run < bytes.len() && bytes[i + run] == b {
            run += 1;
        }
        let one = match b {
            b'\\' => "\\\\".to_owned(),
            0x20..=0x7e => (b as char).to_string(),
            b'\n' => "\\n".to_owned(),
            b'\r' => "\\r".to_owned(),
            _ => format!("\\x{b:02x}"),
        };
        if run > 8 {
            out.push_str(&format!("{one}{{{run}}}"));
        } else {
            for _ in 0..run {
                out.push_str(&one);
            }
        }
        i += run;
    }
    out
}

/// `Err` naming `case` with where the transcripts part, unless the engine saw the same in
/// both ([`Transcript::same_for_engine`]).
pub fn compare(case: &str, want: &Transcript, got: &Transcript) -> Result<(), String> {
    want.same_for_engine(got)
        .map_err(|e| format!("{case}: transcripts differ (direct, then behind)\n{e}"))
}
