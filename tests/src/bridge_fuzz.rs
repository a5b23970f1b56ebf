//! A black-box fuzzer for `sandpipe run`, driven as an engine drives it: the built binary as a
//! separate process, a byte-for-byte echo plugin (`cat`, wasm and native) behind it, generated
//! input (sometimes with a damaged frame) written in random chunks with random pauses, and
//! every way a session ends.
//!
//! ```text
//!  seed ─► Case { framing, target, input, chunks, ending }
//!            │
//!  writer ───┴─► stdin ─► sandpipe run [--framing F] cat ─► stdout ─► reader (may hang up)
//!  main: signal at the cut, wait (bounded) ─► status, stdout, stderr ─► check(case, ...)
//! ```
//!
//! The oracle is the plugin's valid output: `cat` writes back exactly what it was given, so
//! what must reach the engine is the longest run of valid frames at the front of the input
//! (all of it, for raw bytes), in order; a prefix of that when the ending cuts the session
//! short. Every ending has its documented statuses (README, "Exit status"), and nothing else
//! passes. A case is made from its seed alone, so a failure is replayed with that seed
//! (`cargo run -p sandpipe-tests --example bridge_fuzz -- --seed S --cases 1`).

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use sandpipe_proto::frame::{BytesMut, FrameLimits, Framer, Framing};

use crate::Target;

/// A case still running after this is a hang (the only use of time here: a bound, never a
/// measure).
pub const HANG_BOUND: Duration = Duration::from_secs(120);
/// How long a signal forwarded to a native plugin may take to end it (see `run_case`): a
/// bound for a loaded machine, not a speed.
const FORWARD_BOUND: Duration = Duration::from_secs(20);

/// The signals `sandpipe run` forwards or emulates (the `HANDLED` list of `cli::signals`).
pub const SIGNALS: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (`WIFSIGNALED`).
    Signal(i32),
}

impl Status {
    /// The status of `status`.
    pub fn of(status: ExitStatus) -> Status {
        match (status.code(), status.signal()) {
            (Some(code), _) => Status::Code(code),
            (None, Some(sig)) => Status::Signal(sig),
            (None, None) => Status::Code(-1),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Code(c) => write!(f, "exit {c}"),
            Status::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// How the engine ends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Everything written, then stdin closed.
    Eof,
    /// This signal sent to sandpipe once `cut` input bytes are written and output has begun;
    /// then the rest is written and stdin closed.
    Signal { sig: i32, cut: usize },
    /// The engine reads `after` bytes of output, then closes its end of sandpipe's stdout;
    /// it goes on writing.
    ReaderGone { after: usize },
    /// The plugin leaves by itself with `code` after echoing `after` bytes (`cat N K`).
    ExitEarly { after: usize, code: u8 },
}

impl Ending {
    /// A short name, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Ending::Eof => "eof",
            Ending::Signal { .. } => "signal",
            Ending::ReaderGone { .. } => "reader-gone",
            Ending::ExitEarly { .. } => "exit-early",
        }
    }
}

/// One generated session.
#[derive(Debug, Clone)]
pub struct Case {
    /// The seed it was made from.
    pub seed: u64,
    /// `--framing`, or raw bytes.
    pub framing: Option<Framing>,
    /// `cat` as a wasm component or a native executable.
    pub target: Target,
    /// What the engine writes.
    pub input: Vec<u8>,
    /// One frame of `input` was damaged.
    pub damaged: bool,
    /// The writes: each chunk's length and the pause before it.
    pub chunks: Vec<(usize, Duration)>,
    /// How it ends.
    pub ending: Ending,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} ({}, {:?}, {} bytes in {} chunks{}, {:?})",
            self.seed,
            self.framing.map_or("raw", Framing::name),
            self.target,
            self.input.len(),
            self.chunks.len(),
            if self.damaged { ", damaged" } else { "" },
            self.ending
        )
    }
}

/// A text of `len` bytes that needs no escaping in JSON.
fn text(rng: &mut fastrand::Rng, len: usize) -> String {
    (0..len).map(|_| rng.alphanumeric()).collect()
}

/// A payload length: mostly small, sometimes past a pipe's buffer.
fn length(rng: &mut fastrand::Rng) -> usize {
    match rng.u8(..10) {
        0 => rng.usize(..200_000),
        1 => 0,
        _ => rng.usize(..200),
    }
}

/// A CBOR head: major type and argument.
fn cbor_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend([m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend((n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend((n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend(n.to_be_bytes());
        }
    }
}

/// Frame `i` of a stream in `framing` (raw: a run of arbitrary bytes).
fn frame(rng: &mut fastrand::Rng, framing: Option<Framing>, i: usize) -> Vec<u8> {
    let len = length(rng);
    match framing {
        None => std::iter::repeat_with(|| rng.u8(..)).take(len).collect(),
        Some(Framing::JsonLines) => format!("{{\"i\":{i},\"s\":\"{}\"}}\n", text(rng, len)).into(),
        Some(Framing::ContentLength) => {
            let body = format!("{{\"i\":{i},\"s\":\"{}\"}}", text(rng, len));
            format!("Content-Length: {}\r\n\r\n{body}", body.len()).into()
        }
        Some(_) => {
            // {"i": i, "s": h'…'}
            let mut out = Vec::with_capacity(len + 16);
            cbor_head(&mut out, 5, 2);
            cbor_head(&mut out, 3, 1);
            out.push(b'i');
            cbor_head(&mut out, 0, i as u64);
            cbor_head(&mut out, 3, 1);
            out.push(b's');
            cbor_head(&mut out, 2, len as u64);
            out.extend(std::iter::repeat_with(|| rng.u8(..)).take(len));
            out
        }
    }
}

/// Damage frame `k` of `frames` (not the first): bad content, a broken header, or a frame cut
/// short (the stream's last, or one in the middle that the rest then runs into).
fn damage(rng: &mut fastrand::Rng, framing: Framing, frames: &mut [Vec<u8>], k: usize) {
    let last = k + 1 == frames.len();
    let f = &mut frames[k];
    match (framing, rng.u8(..3)) {
        (Framing::JsonLines, 0) => *f = b"{\"i\":\n".to_vec(),
        (Framing::JsonLines, 1) if last => {
            let keep = rng.usize(1..f.len());
            f.truncate(keep);
        }
        (Framing::JsonLines, _) => *f = b"not json at all\n".to_vec(),
        (Framing::ContentLength, 0) => *f = b"Content-Length: x\r\n\r\n{}".to_vec(),
        (Framing::ContentLength, 1) => {
            let body = f.iter().position(|&b| b == b'{').unwrap_or(0);
            for b in &mut f[body..] {
                *b = b'@';
            }
        }
        (Framing::ContentLength, _) => {
            let keep = rng.usize(1..f.len());
            f.truncate(keep);
        }
        (_, 0) => f[0] = 0xff,
        (_, _) => {
            let keep = rng.usize(1..f.len());
            f.truncate(keep);
        }
    }
}

/// The case made from `seed`.
pub fn generate(seed: u64) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed);
    let framing = [
        None,
        Some(Framing::JsonLines),
        Some(Framing::CborSeq),
        Some(Framing::ContentLength),
    ][rng.usize(..4)];
    let target = if rng.bool() {
        Target::Wasm
    } else {
        Target::Native
    };
    let n = rng.usize(2..=24);
    let mut frames: Vec<Vec<u8>> = (0..n).map(|i| frame(&mut rng, framing, i)).collect();
    // Raw bytes have no frames to damage; the first frame stays whole so output always begins.
    if frames[0].is_empty() {
        frames[0].push(b'x');
    }
    let damaged = framing.is_some() && rng.u8(..5) == 0;
    if let (true, Some(f)) = (damaged, framing) {
        let k = rng.usize(1..n);
        damage(&mut rng, f, &mut frames, k);
    }
    let first = frames[0].len();
    let input = frames.concat();
    let ending = match rng.u8(..4) {
        0 => Ending::Eof,
        1 => Ending::Signal {
            sig: SIGNALS[rng.usize(..SIGNALS.len())],
            cut: rng.usize(first..=input.len()),
        },
        2 => Ending::ReaderGone {
            after: rng.usize(..=input.len()),
        },
        _ => Ending::ExitEarly {
            after: rng.usize(..=input.len() + 1),
            code: rng.u8(7..100),
        },
    };
    let mut chunks = Vec::new();
    let mut left = input.len();
    while left > 0 {
        let len = match rng.u8(..8) {
            0 => rng.usize(1..16),
            1 => rng.usize(1..128 << 10),
            _ => rng.usize(1..4096),
        }
        .min(left);
        let pause = if rng.u8(..8) == 0 {
            Duration::from_micros(rng.u64(..3000))
        } else {
            Duration::ZERO
        };
        chunks.push((len, pause));
        left -= len;
    }
    Case {
        seed,
        framing,
        target,
        input,
        damaged,
        chunks,
        ending,
    }
}

/// What must reach the engine when `cat` echoes `bytes`: the valid frames at its front, as
/// sandpipe writes them, and whether that is all of it (no bad or incomplete frame follows).
pub fn valid_output(framing: Option<Framing>, bytes: &[u8]) -> (Vec<u8>, bool) {
    let Some(framing) = framing else {
        return (bytes.to_vec(), true);
    };
    let limits = FrameLimits::default();
    let mut decoder = framing.framer(limits);
    let mut encoder = framing.framer(limits);
    let mut buf = BytesMut::from(bytes);
    let mut out = BytesMut::new();
    loop {
        match decoder.decode_eof(&mut buf) {
            Ok(Some(frame)) => match decoder.last_headers() {
                Some(headers) => {
                    out.extend_from_slice(headers);
                    out.extend_from_slice(&frame);
                }
                None => encoder
                    .encode(&frame, &mut out)
                    .expect("a decoded frame encodes"),
            },
            Ok(None) => return (out.to_vec(), true),
            Err(_) => return (out.to_vec(), false),
        }
    }
}

/// The programs a case runs.
#[derive(Debug, Clone)]
pub struct Bins {
    /// The `sandpipe` binary.
    pub sandpipe: PathBuf,
    /// `cat` built as a wasm component.
    pub cat_wasm: PathBuf,
    /// `cat` built natively.
    pub cat_native: PathBuf,
    /// The artifact cache every case shares (`--cache-dir`).
    pub cache_dir: PathBuf,
}

impl Bins {
    /// This workspace's `sandpipe` and `cat`, built if needed, with `cat.wasm` compiled once
    /// into `cache_dir`.
    pub fn build(cache_dir: &Path) -> Bins {
        let bins = Bins {
            sandpipe: crate::peers::sandpipe(),
            cat_wasm: crate::plugin("cat", Target::Wasm),
            cat_native: crate::plugin("cat", Target::Native),
            cache_dir: cache_dir.to_owned(),
        };
        let status = Command::new(&bins.sandpipe)
            .arg("compile")
            .arg("--cache-dir")
            .arg(cache_dir)
            .arg(&bins.cat_wasm)
            .stdout(Stdio::null())
            .status()
            .expect("running sandpipe compile");
        assert!(status.success(), "sandpipe compile cat.wasm: {status}");
        bins
    }
}

/// What one case gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How sandpipe ended.
    pub status: Status,
    /// Bytes that reached the engine.
    pub stdout: Vec<u8>,
    /// sandpipe's stderr (its own lines and the plugin's).
    pub stderr: Vec<u8>,
}

/// A core file from a plugin's SIGQUIT is of no use here; the soft limit is inherited by the
/// plugin, and SIGINT/SIGQUIT are given their defaults (see `stand_in::default_signals`).
#[allow(unsafe_code)]
fn child_setup(cmd: &mut Command) {
    // SAFETY: runs in the child between fork and exec; `setrlimit` and `signal` are
    // async-signal-safe, and nothing here allocates or touches state shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Send `sig` to process `pid`.
#[allow(unsafe_code)]
fn kill(pid: u32, sig: i32) {
    // SAFETY: kill takes plain integers; the caller holds the unreaped child, so `pid` is it.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Run `case` against `bins` and collect what the engine saw; `Err` for a hang.
pub fn run_case(bins: &Bins, case: &Case) -> Result<Outcome, String> {
    let mut cmd = Command::new(&bins.sandpipe);
    cmd.arg("run").arg("--cache-dir").arg(&bins.cache_dir);
    if let Some(f) = case.framing {
        cmd.args(["--framing", f.name()]);
    }
    cmd.arg(match case.target {
        Target::Native => &bins.cat_native,
        _ => &bins.cat_wasm,
    });
    if let Ending::ExitEarly { after, code } = case.ending {
        cmd.arg(after.to_string()).arg(code.to_string());
    }
    cmd.env_remove("SANDPIPE_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    child_setup(&mut cmd);
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawning sandpipe: {e}"))?;
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");

    let seen = Arc::new(AtomicUsize::new(0));
    let (out_tx, out_rx) = mpsc::channel();
    let reader = {
        let seen = seen.clone();
        let hang_up = match case.ending {
            Ending::ReaderGone { after } => Some(after),
            _ => None,
        };
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let want = match hang_up {
                    Some(after) if got.len() >= after => break, // drops stdout: the hang-up
                    Some(after) => (after - got.len()).min(buf.len()),
                    None => buf.len(),
                };
                match stdout.read(&mut buf[..want]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        seen.store(got.len(), Ordering::SeqCst);
                    }
                }
            }
            drop(stdout);
            let _ = out_tx.send(got);
        })
    };
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        let _ = err_tx.send(all);
    });
    // The writer stops at the signal's cut until the signal is sent.
    let cut = match case.ending {
        Ending::Signal { cut, .. } => Some(cut),
        _ => None,
    };
    let at_cut = Arc::new(AtomicBool::new(false));
    let signalled = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    // A signal forwarded to a native plugin lands a moment after sandpipe gets it; if the rest of
    // the input and its EOF went on at once, `cat` could end at that EOF first, and the signal,
    // forwarded to a process that is gone, would change nothing (as under tini or dumb-init). An
    // engine that signals and then keeps writing cannot expect the plugin to die first, so the
    // writer holds the rest back until sandpipe has ended, or FORWARD_BOUND has passed (then
    // the signal was not forwarded, and the case fails).
    let hold_after_signal = case.target == Target::Native;
    let writer = {
        let input = case.input.clone();
        let chunks = case.chunks.clone();
        let (at_cut, signalled, ended) = (at_cut.clone(), signalled.clone(), ended.clone());
        std::thread::spawn(move || {
            let mut at = 0;
            let wait_at_cut = |at: usize| {
                if cut == Some(at) {
                    at_cut.store(true, Ordering::SeqCst);
                    while !signalled.load(Ordering::SeqCst) && started.elapsed() < HANG_BOUND {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let held = Instant::now();
                    while hold_after_signal
                        && !ended.load(Ordering::SeqCst)
                        && held.elapsed() < FORWARD_BOUND
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            };
            for (len, pause) in chunks {
                if let Some(c) = cut
                    && at < c
                    && c < at + len
                {
                    // Split the chunk at the cut.
                    if stdin.write_all(&input[at..c]).is_err() {
                        return;
                    }
                    wait_at_cut(c);
                    if stdin.write_all(&input[c..at + len]).is_err() {
                        return;
                    }
                } else {
                    wait_at_cut(at);
                    std::thread::sleep(pause);
                    if stdin.write_all(&input[at..at + len]).is_err() {
                        return;
                    }
                }
                at += len;
            }
            wait_at_cut(at);
            drop(stdin);
        })
    };

    let mut hung = None;
    let mut status = None;
    if let Ending::Signal { sig, .. } = case.ending {
        // Signal once the writer is at the cut and output has begun (sandpipe is past its
        // start, with its handlers installed), unless sandpipe ended first.
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                status = Some(s);
                ended.store(true, Ordering::SeqCst);
                break;
            }
            if at_cut.load(Ordering::SeqCst) && seen.load(Ordering::SeqCst) > 0 {
                kill(pid, sig);
                break;
            }
            if started.elapsed() > HANG_BOUND {
                hung = Some("waiting for output before the signal");
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        signalled.store(true, Ordering::SeqCst);
    }
    while status.is_none() && hung.is_none() {
        match child.try_wait() {
            Ok(Some(s)) => {
                status = Some(s);
                ended.store(true, Ordering::SeqCst);
            }
            Ok(None) if started.elapsed() > HANG_BOUND => hung = Some("waiting for sandpipe"),
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("waiting for sandpipe: {e}")),
        }
    }
    if let Some(what) = hung {
        kill(pid, libc::SIGKILL);
        let _ = child.wait();
        return Err(format!("hung {what} (more than {HANG_BOUND:?})"));
    }
    let status = Status::of(status.expect("status"));
    // With sandpipe gone, its pipes close (its plugin dies with it): a pipe still open is a
    // process left behind.
    let stdout = out_rx
        .recv_timeout(HANG_BOUND)
        .map_err(|_| "stdout stayed open after sandpipe ended".to_owned())?;
    let stderr = err_rx
        .recv_timeout(HANG_BOUND)
        .map_err(|_| "stderr stayed open after sandpipe ended".to_owned())?;
    let _ = reader.join();
    let _ = writer.join();
    Ok(Outcome {
        status,
        stdout,
        stderr,
    })
}

/// The statuses `case` may end with, and whether the engine must get all of the valid output
/// (`true`) or may get a prefix of it (the ending cut the session short): the README's
/// exit-status table, applied to `cat`.
fn allowed(case: &Case) -> (Vec<Status>, bool) {
    let (_, valid) = valid_output(case.framing, &case.input);
    let at_eof = Status::Code(if valid { 0 } else { 123 });
    let native = case.target == Target::Native;
    match case.ending {
        Ending::Eof => (vec![at_eof], true),
        Ending::ExitEarly { after, code } => {
            let echoed = after.min(case.input.len());
            let (_, whole) = valid_output(case.framing, &case.input[..echoed]);
            // `cat` checks its count before it reads: past the input it sees EOF first.
            let code = if after <= case.input.len() {
                i32::from(code)
            } else {
                0
            };
            (vec![Status::Code(if whole { code } else { 123 })], true)
        }
        // Everything up to the hang-up arrives. Then the plugin's next write fails: `cat`
        // leaves with 3 on EPIPE, or had nothing more to write and ends at its EOF.
        Ending::ReaderGone { .. } => (vec![Status::Code(0), Status::Code(3), at_eof], true),
        // Forwarded to a native plugin, which dies of it: sandpipe then ends by the same
        // signal (SIGQUIT, which dumps core, is not re-raised: 128 + 3), or 123 for a bad frame
        // that came first.
        Ending::Signal { sig, .. } if native => {
            let by = if sig == libc::SIGQUIT {
                Status::Code(128 + sig)
            } else {
                Status::Signal(sig)
            };
            (vec![by, Status::Code(123)], false)
        }
        // SIGINT from a pipe is ignored for wasm: the session runs to its EOF.
        Ending::Signal { sig, .. } if sig == libc::SIGINT => (vec![at_eof], true),
        // The SIGTERM emulation closes the plugin's stdin; `cat` ends at that EOF. A stream
        // that had lost its framing may be cut mid-frame there: 123.
        Ending::Signal { .. } => (vec![Status::Code(0), Status::Code(123)], false),
    }
}

/// Check `outcome` against the invariants for `case`: no panic, a documented status, and
/// exactly the plugin's valid output, in order (a prefix of it where the ending cut it short).
pub fn check(case: &Case, outcome: &Outcome) -> Result<(), String> {
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        return Err(format!("sandpipe panicked: {stderr}"));
    }
    let (statuses, whole) = allowed(case);
    if !statuses.contains(&outcome.status) {
        return Err(format!(
            "{} is not a documented status here (expected one of {statuses:?}); stderr: {stderr}",
            outcome.status
        ));
    }
    let echoed = match case.ending {
        Ending::ExitEarly { after, .. } => &case.input[..after.min(case.input.len())],
        _ => &case.input[..],
    };
    let (valid, _) = valid_output(case.framing, echoed);
    let want: &[u8] = match case.ending {
        Ending::ReaderGone { after } => &valid[..after.min(valid.len())],
        _ => &valid,
    };
    let got = &outcome.stdout[..];
    let ok = if whole {
        got == want
    } else {
        want.starts_with(got)
    };
    if !ok {
        let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
        return Err(format!(
            "the engine got {} bytes where {} valid bytes were due ({}), first difference at \
             {at}; status {}; stderr: {stderr}",
            got.len(),
            want.len(),
            if whole { "exactly" } else { "a prefix" },
            outcome.status
        ));
    }
    Ok(())
}

/// Tallies of a run.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Cases run.
    pub cases: usize,
    /// Failures, each with its case.
    pub failures: Vec<String>,
    /// Statuses by ending.
    pub statuses: std::collections::BTreeMap<(&'static str, Status), usize>,
}

impl Tally {
    /// The statuses seen, one `ending status: count` per line.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for ((ending, status), n) in &self.statuses {
            s.push_str(&format!("  {ending:<12} {status:<10} {n}\n"));
        }
        s
    }
}

/// Run the cases of seeds `seeds` on `jobs` threads until `keep_going` says stop (checked
/// before each case), tallying statuses and failures.
pub fn run_many(
    bins: &Bins,
    seeds: impl Iterator<Item = u64> + Send,
    jobs: usize,
    keep_going: &(dyn Fn() -> bool + Sync),
) -> Tally {
    let seeds = Mutex::new(seeds);
    let tally = Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                loop {
                    if !keep_going() {
                        return;
                    }
                    let Some(seed) = seeds.lock().expect("seeds").next() else {
                        return;
                    };
                    let case = generate(seed);
                    let result = run_case(bins, &case).and_then(|o| check(&case, &o).map(|()| o));
                    let mut t = tally.lock().expect("tally");
                    t.cases += 1;
                    match result {
                        Ok(o) => {
                            *t.statuses
                                .entry((case.ending.kind(), o.status))
                                .or_default() += 1
                        }
                        Err(e) => {
                            let line = format!("{case}: {e}");
                            eprintln!("FAIL {line}");
                            t.failures.push(line);
                        }
                    }
                }
            });
        }
    });
    tally.into_inner().expect("tally")
}
