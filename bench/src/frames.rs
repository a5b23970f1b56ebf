//! Large frames: `sandpipe-bench --frames` times 100 B and 64 KiB round trips and a 64 KiB
//! stream through `sandpipe run` against the native plugin run directly, the pass-through relay
//! and the wasmtime CLI (when installed); `sandpipe-bench --profile-frames` says where a 64 KiB
//! round trip's time goes: system calls and bytes per call on each side (`strace`), the large
//! user-space copies in each process (`bench/copy-count`, preloaded), and the guest's wasm
//! operators per byte (fuel, counted by wasmtime), with and without `simd128`.
//!
//! ```text
//!  sandpipe-bench --frames   (the process and every child pinned to CPU 0)
//!    ├─ echo-X                               native plugin, direct
//!    ├─ sandpipe run [--framing F] echo-X.wasm
//!    ├─ sandpipe run [--framing F] echo-X    native fallback
//!    ├─ sandpipe-bench --relay-floor echo-X  pass-through relay
//!    └─ wasmtime run --allow-precompiled echo-lines.cwasm   (raw only; inherited stdio)
//! ```
//!
//! Every contender of a row is alive at once and timed in blocks in turn (as in the process
//! section), so the machine's swings fall on each alike; ratios divide p50s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, ensure};
use sandpipe_proto::frame::Framing;

use crate::framings::{frame_for, sibling};
use crate::measure::{Plan, Sampler, Stats, run_sync};
use crate::process::{Peer, plans, relay_cmd, run_cmd, stream, warm, wire};
use crate::report::fmt_duration;

/// The wasmtime version sandpipe links, and so the CLI worth comparing with.
const WASMTIME_VERSION: &str = "48.0.8";
pub(crate) const KIB64: usize = 64 * 1024;
const SIZES: [usize; 2] = [100, KIB64];
/// The framings of the issue's targets: raw bytes (JSON Lines on the wire), JSON Lines, CBOR.
const MODES: [(&str, Framing, &str); 3] = [
    ("raw", Framing::JsonLines, "echo-lines"),
    ("lines", Framing::JsonLines, "echo-lines"),
    ("cbor", Framing::CborSeq, "echo-cbor"),
];
/// One row of `--frames`' target table.
#[derive(Debug)]
struct Target {
    name: String,
    ratio: Option<f64>,
    goal: Goal,
    /// The last column: what sandpipe's checks cost and may cost, or where to look instead.
    why: Option<String>,
}

/// A target's goal for its ratio.
#[derive(Debug, Clone, Copy)]
enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtMost(limit) => ratio <= limit,
            Goal::AtLeast(limit) => ratio >= limit,
        }
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Goal::AtMost(limit) => write!(f, "≤ {limit}×"),
            Goal::AtLeast(limit) => write!(f, "≥ {limit}×"),
        }
    }
}

/// The last column of a raw target, which has no checks to take out.
const RAW_WHY: &str =
    "none: raw bytes are not checked; their copies and system calls: `--profile-frames`";
const DIRECT: &str = "native direct";
const RUN_WASM: &str = "`sandpipe run` wasm";
const RUN_NATIVE: &str = "`sandpipe run` native";
const RELAY: &str = "pass-through relay";
const CLI: &str = "wasmtime CLI";

/// The wasmtime CLI at sandpipe's version, or why it is not a contender.
fn wasmtime_cli() -> Result<PathBuf, String> {
    let candidates = [
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/wasmtime")),
        Some(PathBuf::from("wasmtime")),
    ];
    for exe in candidates.into_iter().flatten() {
        let Ok(out) = Command::new(&exe).arg("--version").output() else {
            continue;
        };
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if version.split_whitespace().nth(1) == Some(WASMTIME_VERSION) {
            return Ok(exe);
        }
        return Err(format!(
            "{} is {version:?}, not wasmtime {WASMTIME_VERSION} (`cargo install --locked wasmtime-cli@{WASMTIME_VERSION}`)",
            exe.display()
        ));
    }
    Err(format!(
        "the wasmtime CLI is not installed (`cargo install --locked wasmtime-cli@{WASMTIME_VERSION}`)"
    ))
}

/// Precompile `wasm` with the CLI (its own default engine) into `dir`.
fn precompile(cli: &Path, wasm: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let out = dir.join("echo-lines.cwasm");
    let status = Command::new(cli)
        .arg("compile")
        .arg(wasm)
        .arg("-o")
        .arg(&out)
        .status()
        .context("running wasmtime compile")?;
    ensure!(status.success(), "wasmtime compile failed ({status})");
    Ok(out)
}

fn cli_cmd(cli: &Path, cwasm: &Path) -> Command {
    let mut cmd = Command::new(cli);
    cmd.args(["run", "--allow-precompiled"]).arg(cwasm);
    cmd
}

/// What `--frames` needs: the `sandpipe` binary and the echo plugins' two builds.
#[derive(Debug)]
pub struct Inputs {
    pub sandpipe: PathBuf,
    /// `echo-lines.wasm`; `echo-cbor.wasm` is its sibling.
    pub wasm: PathBuf,
    /// The native `echo-lines`.
    pub native: PathBuf,
}

/// Round trips of one framing and size, every contender alive, timed in blocks in turn.
fn round_trips(
    inputs: &Inputs,
    mode: &str,
    framing: Framing,
    bin: &str,
    size: usize,
    cli: Option<(&Path, &Path)>,
    cache: &Path,
) -> anyhow::Result<Vec<(&'static str, Stats)>> {
    let (plugin_wasm, plugin_native) = (sibling(&inputs.wasm, bin), sibling(&inputs.native, bin));
    let frame = frame_for(framing, size)?;
    let wire = wire(framing, &frame);
    let (plan, block) = plans(false, size);
    let mut peers = vec![
        (
            DIRECT,
            Peer::spawn(Command::new(&plugin_native), framing, cache)?,
        ),
        (
            RUN_WASM,
            Peer::spawn(
                run_cmd(&inputs.sandpipe, mode, &plugin_wasm),
                framing,
                cache,
            )?,
        ),
        (
            RUN_NATIVE,
            Peer::spawn(
                run_cmd(&inputs.sandpipe, mode, &plugin_native),
                framing,
                cache,
            )?,
        ),
        (
            RELAY,
            Peer::spawn(relay_cmd(&plugin_native)?, framing, cache)?,
        ),
    ];
    if let (Some((cli, cwasm)), "raw") = (cli, mode) {
        peers.push((CLI, Peer::spawn(cli_cmd(cli, cwasm), framing, cache)?));
    }
    let mut samplers: Vec<Sampler> = peers.iter().map(|_| Sampler::new(&plan)).collect();
    while samplers.iter_mut().all(Sampler::more) {
        for ((_, peer), s) in peers.iter_mut().zip(&mut samplers) {
            for _ in 0..block {
                let t = std::time::Instant::now();
                let got = peer.echo(&wire, frame.len())?;
                s.record(t.elapsed());
                ensure!(got == frame.len(), "echoed {got} bytes of {}", frame.len());
            }
        }
    }
    let mut out = Vec::new();
    for ((who, peer), s) in peers.into_iter().zip(samplers) {
        peer.finish()?;
        let stats = s.finish();
        eprintln!(
            "  {mode} {size} {who}: p50 {} p99 {}",
            fmt_duration(stats.p50),
            fmt_duration(stats.p99)
        );
        out.push((who, stats));
    }
    Ok(out)
}

/// Makes a fresh command for one contender's run.
type MakeCommand<'a> = Box<dyn Fn() -> Command + 'a>;

/// 64 KiB raw frames streamed back to back: MB/s of each contender, the median of 3 runs,
/// contenders alternated run by run.
fn streams(
    inputs: &Inputs,
    cli: Option<(&Path, &Path)>,
    cache: &Path,
) -> anyhow::Result<Vec<(&'static str, f64)>> {
    const FRAMES: u64 = 500;
    let frame = frame_for(Framing::JsonLines, KIB64)?;
    let wire = wire(Framing::JsonLines, &frame);
    let mut contenders: Vec<(&'static str, MakeCommand<'_>)> = vec![
        (DIRECT, Box::new(|| Command::new(&inputs.native))),
        (
            RUN_WASM,
            Box::new(|| run_cmd(&inputs.sandpipe, "raw", &inputs.wasm)),
        ),
        (
            RUN_NATIVE,
            Box::new(|| run_cmd(&inputs.sandpipe, "raw", &inputs.native)),
        ),
    ];
    if let Some((cli, cwasm)) = cli {
        contenders.push((CLI, Box::new(move || cli_cmd(cli, cwasm))));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
    for _ in 0..3 {
        for ((_, cmd), t) in contenders.iter().zip(&mut times) {
            let mut peer = Peer::spawn(cmd(), Framing::JsonLines, cache)?;
            peer.echo(&wire, frame.len())?;
            t.push(stream(&mut peer, &wire, frame.len(), FRAMES)?);
            let status = peer.child.wait()?;
            ensure!(status.success(), "plugin process ended with {status}");
        }
    }
    Ok(contenders
        .iter()
        .zip(times)
        .map(|((who, _), mut t)| {
            t.sort_unstable();
            let median = t[t.len() / 2];
            let mbs = (FRAMES * KIB64 as u64) as f64 / median.as_secs_f64().max(1e-9) / 1e6;
            eprintln!("  stream 64 KiB {who}: {mbs:.1} MB/s");
            (*who, mbs)
        })
        .collect())
}

/// What sandpipe's own checks cost on one 64 KiB frame of `framing`, in-process on this thread
/// (the median of [`CHECK_PASSES`] passes): the session's decode of the plugin's reply, which
/// validates it, and `EngineSplitter`'s split of the engine's frame, which finds where it ends.
fn checks(framing: Framing) -> anyhow::Result<(Duration, Duration)> {
    use sandpipe_proto::frame::{BytesMut, EngineSplitter, FrameLimits, Framer, Piece};
    let frame = frame_for(framing, KIB64)?;
    let wire = wire(framing, &frame);
    let limits = FrameLimits::default();
    // Every pass timed, none dropped: the figure is the median of `CHECK_PASSES`.
    let plan = Plan {
        warmup: 0,
        iters: CHECK_PASSES,
        budget: Duration::MAX,
        min_iters: CHECK_PASSES,
    };
    let median = |pass: &mut dyn FnMut(BytesMut) -> bool| -> anyhow::Result<Duration> {
        let stats = run_sync(&plan, || {
            let buf = BytesMut::from(&wire[..]);
            let start = std::time::Instant::now();
            let whole = pass(std::hint::black_box(buf));
            let took = start.elapsed();
            ensure!(
                whole,
                "the bench's own {framing:?} frame did not come out whole"
            );
            Ok(took)
        })?;
        Ok(stats.p50)
    };
    let reply = median(
        &mut |mut buf| matches!(framing.framer(limits).decode(&mut buf), Ok(Some(f)) if f.len() == frame.len()),
    )?;
    let split = median(&mut |mut buf| {
        matches!(
            EngineSplitter::new(framing, limits).next(&mut buf, false),
            Some(Piece::Frame { frame: f, .. }) if f.len() == frame.len()
        )
    })?;
    Ok((reply, split))
}

/// The hidden flag that makes the bench a [`checks`] child: `--time-checks <framing>`.
pub const CHECKS_FLAG: &str = "--time-checks";
/// Processes that time the checks: the figure can differ from one process to the next on the
/// same CPU (on some virtual machines the JSON check is bimodal across processes), so one
/// process's figure is not enough to subtract from another's.
const CHECK_PROCESSES: usize = 5;

/// A [`checks`] child: print the two medians in nanoseconds.
pub fn checks_child(args: &[String]) -> anyhow::Result<()> {
    let [framing] = args else {
        anyhow::bail!("usage: sandpipe-bench {CHECKS_FLAG} <framing>");
    };
    let framing: Framing = framing.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (reply, split) = checks(framing)?;
    println!("{} {}", reply.as_nanos(), split.as_nanos());
    Ok(())
}

/// What sandpipe's checks cost, timed by [`checks`] in [`CHECK_PROCESSES`] processes (each
/// inherits this one's CPU): the process with the median total, and the least and most total.
#[derive(Debug, Clone, Copy)]
struct Checked {
    reply: Duration,
    split: Duration,
    least: Duration,
    most: Duration,
}

fn checks_across(framing: Framing) -> anyhow::Result<Checked> {
    let exe = std::env::current_exe().context("finding the bench binary")?;
    let mut runs = Vec::with_capacity(CHECK_PROCESSES);
    for _ in 0..CHECK_PROCESSES {
        let out = Command::new(&exe)
            .arg(CHECKS_FLAG)
            .arg(framing.name())
            .stderr(Stdio::inherit())
            .output()
            .context("running a checks child")?;
        ensure!(
            out.status.success(),
            "a checks child ended with {}",
            out.status
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let ns: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("a checks child printed {text:?}"))?;
        let [reply, split] = ns[..] else {
            anyhow::bail!("a checks child printed {text:?}");
        };
        runs.push((Duration::from_nanos(reply), Duration::from_nanos(split)));
    }
    runs.sort_by_key(|(r, s)| *r + *s);
    let total = |i: usize| runs[i].0 + runs[i].1;
    let (reply, split) = runs[runs.len() / 2];
    Ok(Checked {
        reply,
        split,
        least: total(0),
        most: total(runs.len() - 1),
    })
}

/// Passes of each check in [`checks`].
const CHECK_PASSES: usize = 31;

fn cell(s: Option<&Stats>) -> String {
    s.map_or("—".to_owned(), |s| {
        format!("{} / {}", fmt_duration(s.p50), fmt_duration(s.p99))
    })
}

fn ratio(a: Option<&Stats>, b: Option<&Stats>) -> Option<f64> {
    Some(a?.p50.as_secs_f64() / b?.p50.as_secs_f64().max(1e-12))
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("—".to_owned(), |r| format!("{r:.2}×"))
}

/// `--frames`: measure, then print the markdown section.
pub fn run(inputs: &Inputs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("sandpipe-bench-frames-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = measure(inputs, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{}", result?);
    Ok(())
}

fn measure(inputs: &Inputs, scratch: &Path) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let cache = scratch.join("cache");
    let cli = wasmtime_cli();
    let cli = match cli {
        Ok(exe) => Ok((exe.clone(), precompile(&exe, &inputs.wasm, scratch)?)),
        Err(why) => {
            eprintln!("sandpipe-bench: wasmtime CLI rows skipped: {why}");
            Err(why)
        }
    };
    let cli_ref = cli.as_ref().ok().map(|(e, c)| (e.as_path(), c.as_path()));
    crate::pin::to_cpu0().context("pinning to CPU 0")?;
    let load1 = crate::machine::load1();
    let before = crate::machine::CpuTicks::now();
    let mut rows: BTreeMap<(usize, usize), Vec<(&'static str, Stats)>> = BTreeMap::new();
    for (m, (mode, framing, bin)) in MODES.into_iter().enumerate() {
        warm(
            &inputs.sandpipe,
            mode,
            &sibling(&inputs.wasm, bin),
            framing,
            &cache,
        )?;
        for (s, size) in SIZES.into_iter().enumerate() {
            eprintln!("sandpipe-bench: frames: {mode} {size} B");
            rows.insert(
                (m, s),
                round_trips(inputs, mode, framing, bin, size, cli_ref, &cache)?,
            );
        }
    }
    eprintln!("sandpipe-bench: frames: streaming 64 KiB raw");
    let rates = streams(inputs, cli_ref, &cache)?;
    let after = crate::machine::CpuTicks::now();
    let other = before
        .zip(after)
        .and_then(|(b, a)| b.other_load(&a, crate::machine::cpus()));

    let mut o = String::new();
    let _ = writeln!(
        o,
        "Printed by `sandpipe-bench --frames` (`bench/src/frames.rs`): the bench process and every process it starts on CPU 0; every contender of a row alive at once, timed in blocks in turn (200 round trips at 100 B, 8 at 64 KiB); ratios divide p50s. `sandpipe` binary: `{}`. The wasmtime CLI runs the same `echo-lines` component, precompiled by `wasmtime compile` (its default engine: no fuel, no epochs) with `wasmtime run --allow-precompiled`, its stdio inherited from the driver's pipes; it speaks raw bytes only.\n",
        inputs.sandpipe.display()
    );
    let _ = writeln!(
        o,
        "- 1-minute load average before: {}; other processes' CPU use while it ran: {}",
        load1.map_or("unknown".to_owned(), |l| format!("{l:.2}")),
        other.map_or("unknown".to_owned(), |l| format!("{l:.2} CPUs"))
    );
    if let Err(why) = &cli {
        let _ = writeln!(o, "- wasmtime CLI rows **not measured**: {why}");
    }
    let _ = writeln!(
        o,
        "\n| framing | frame | {DIRECT} p50 / p99 | {RUN_WASM} p50 / p99 | wasm / direct | {RUN_NATIVE} p50 / p99 | {RELAY} p50 / p99 | `run` native / relay | {CLI} p50 / p99 | `run` wasm / CLI |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let get = |row: &[(&'static str, Stats)], who: &str| {
        row.iter().find(|(w, _)| *w == who).map(|(_, s)| *s)
    };
    let mut targets: Vec<Target> = Vec::new();
    for (m, (mode, framing, _)) in MODES.into_iter().enumerate() {
        // What sandpipe's own checks cost in a 64 KiB round trip (none for raw bytes): the
        // ratio without them, and what they may cost at the goal, given the rest.
        let checked = (mode != "raw")
            .then(|| checks_across(framing))
            .transpose()?;
        let budget = |who: Option<&Stats>, over: Option<&Stats>, goal: f64| {
            let (c, who, over) = (checked?, who?.p50, over?.p50);
            let checks = (c.reply + c.split).as_secs_f64();
            let rest = who.as_secs_f64() - checks;
            let over = over.as_secs_f64().max(1e-12);
            let allowed = goal * over - rest;
            Some(format!(
                "{} ({} + {}; {}–{} in {CHECK_PROCESSES} processes): {:.2}× without them; {}",
                fmt_duration(c.reply + c.split),
                fmt_duration(c.reply),
                fmt_duration(c.split),
                fmt_duration(c.least),
                fmt_duration(c.most),
                rest / over,
                if allowed > 0.0 {
                    format!(
                        "at the goal they may take {}",
                        fmt_duration(Duration::from_secs_f64(allowed))
                    )
                } else {
                    "over the goal without them".to_owned()
                }
            ))
        };
        for (s, size) in SIZES.into_iter().enumerate() {
            let row = &rows[&(m, s)];
            let (d, w, n, r, c) = (
                get(row, DIRECT),
                get(row, RUN_WASM),
                get(row, RUN_NATIVE),
                get(row, RELAY),
                get(row, CLI),
            );
            let name = if size == KIB64 { "64 KiB" } else { "100 B" };
            let _ = writeln!(
                o,
                "| {mode} | {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(d.as_ref()),
                cell(w.as_ref()),
                fmt_ratio(ratio(w.as_ref(), d.as_ref())),
                cell(n.as_ref()),
                cell(r.as_ref()),
                fmt_ratio(ratio(n.as_ref(), r.as_ref())),
                cell(c.as_ref()),
                fmt_ratio(ratio(w.as_ref(), c.as_ref())),
            );
            if size == KIB64 {
                let limit = if mode == "raw" { 1.3 } else { 1.5 };
                targets.push(Target {
                    name: format!("64 KiB {mode}, `run` wasm / native direct"),
                    ratio: ratio(w.as_ref(), d.as_ref()),
                    goal: Goal::AtMost(limit),
                    why: if mode == "raw" {
                        Some(RAW_WHY.to_owned())
                    } else {
                        budget(w.as_ref(), d.as_ref(), limit)
                    },
                });
                if mode != "raw" {
                    targets.push(Target {
                        name: format!("64 KiB {mode}, `run` native / pass-through relay"),
                        ratio: ratio(n.as_ref(), r.as_ref()),
                        goal: Goal::AtMost(1.2),
                        why: budget(n.as_ref(), r.as_ref(), 1.2),
                    });
                }
            }
            if mode == "raw" {
                targets.push(Target {
                    name: format!("{name} raw, `run` wasm / wasmtime CLI"),
                    ratio: ratio(w.as_ref(), c.as_ref()),
                    goal: Goal::AtMost(1.0),
                    why: None,
                });
            }
        }
    }
    let _ = writeln!(
        o,
        "\nStreaming 64 KiB raw frames: a writer thread sends 500 frames back to back while the driver reads the echoes; the median of 3 runs per contender, alternated; MB/s counts payload one way.\n\n| contender | MB/s | vs native direct |\n|---|---:|---:|"
    );
    let direct_rate = rates.iter().find(|(w, _)| *w == DIRECT).map(|(_, r)| *r);
    for (who, mbs) in &rates {
        let rel = direct_rate.map(|d| mbs / d.max(1e-9));
        let _ = writeln!(o, "| {who} | {mbs:.1} | {} |", fmt_ratio(rel));
        if *who == RUN_WASM {
            targets.push(Target {
                name: "streaming 64 KiB raw, `run` wasm / native direct".to_owned(),
                ratio: rel,
                goal: Goal::AtLeast(0.8),
                why: Some(RAW_WHY.to_owned()),
            });
        }
    }
    let _ = writeln!(
        o,
        "\nsandpipe's own checks of a 64 KiB frame, where the framing has them, each timed on the bench's own frame in {CHECK_PROCESSES} child processes of the bench on its CPU (the median of {CHECK_PASSES} passes in each; the process with the median total is used, and the least and most totals are shown, since the figure can differ from one process to the next): the session's decode of the plugin's reply (JSON Lines: the line validated as JSON; CBOR: its items walked), plus `EngineSplitter`'s split of the engine's frame (JSON Lines: a newline search; CBOR: its items walked). The last column takes them out of the contender's p50 to give the ratio without them, and says what they may cost for the target to be met, all else as measured.\n\n| target | ratio | goal | result | sandpipe's checks (reply + engine frame) |\n|---|---:|---:|---|---|"
    );
    for t in targets {
        let result = match t.ratio {
            None => "not measured",
            Some(r) if t.goal.met(r) => "met",
            Some(_) => "**missed**",
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {result} | {} |",
            t.name,
            fmt_ratio(t.ratio),
            t.goal,
            t.why.as_deref().unwrap_or("—"),
        );
    }
    Ok(o)
}

/// `--profile-frames`: system calls per 64 KiB round trip through `sandpipe run` (strace), the
/// large user-space copies per frame byte in each process (`bench/copy-count`), and the guest's
/// wasm operators per byte (fuel) with and without `simd128`.
pub fn profile(
    inputs: &Inputs,
    nosimd_wasm: Result<PathBuf, String>,
    copy_lib: Result<PathBuf, String>,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let scratch = std::env::temp_dir().join(format!("sandpipe-bench-prof-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let cache = scratch.join("cache");
    // Compile each wasm contender into the cache once, for every table below.
    for c in PROFILED {
        if let (true, Some(mode)) = (c.wasm, c.run) {
            warm(&inputs.sandpipe, mode, &c.plugin(inputs), c.framing, &cache)?;
        }
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Printed by `sandpipe-bench --profile-frames` (`bench/src/frames.rs`).\n\nSystem calls per 64 KiB round trip (`strace -f`, the difference between a run of {} and one of {} round trips, divided by {}): sandpipe's reads of its stdin and writes (`write` or `writev`) to its stdout (the engine's side), every other `read`/`write`/`writev` (a native plugin's side), `futex` wakes (hand-offs between threads), `epoll_wait` (the reactor parking) and every system call.\n",
        PROFILE_FRAMES.1,
        PROFILE_FRAMES.0,
        PROFILE_FRAMES.1 - PROFILE_FRAMES.0
    );
    match which("strace") {
        None => {
            let _ = writeln!(o, "strace rows **not measured**: strace is not installed.");
        }
        Some(strace) => {
            let _ = writeln!(
                o,
                "| contender | engine reads | bytes a read | engine writes | bytes a write | other reads | other writes | futex wakes | epoll_wait | all calls |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            );
            for (i, c) in PROFILED.iter().enumerate() {
                let frame = frame_for(c.framing, KIB64)?;
                let wire = wire(c.framing, &frame);
                let mut counts = Vec::new();
                for frames in [PROFILE_FRAMES.0, PROFILE_FRAMES.1] {
                    let trace = scratch.join(format!("trace-{i}-{frames}"));
                    let run = c.command(inputs);
                    let mut cmd = Command::new(&strace);
                    cmd.args([
                        "-f",
                        "-qq",
                        "-s",
                        "0",
                        "-e",
                        "trace=read,write,writev,futex,epoll_wait",
                    ])
                    .arg("-o")
                    .arg(&trace)
                    .arg(run.get_program())
                    .args(run.get_args());
                    let mut peer = Peer::spawn(cmd, c.framing, &cache)?;
                    for _ in 0..frames {
                        peer.echo(&wire, frame.len())?;
                    }
                    peer.finish()?;
                    counts.push(count_trace(&std::fs::read_to_string(&trace)?));
                }
                let per = |f: fn(&Counts) -> u64| {
                    (f(&counts[1]) as f64 - f(&counts[0]) as f64)
                        / (PROFILE_FRAMES.1 - PROFILE_FRAMES.0) as f64
                };
                let per_call = |bytes: fn(&Counts) -> u64, calls: fn(&Counts) -> u64| {
                    let c = per(calls);
                    if c > 0.0 {
                        format!("{:.0}", per(bytes) / c)
                    } else {
                        "—".to_owned()
                    }
                };
                let _ = writeln!(
                    o,
                    "| {} | {:.1} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    c.label,
                    per(|c| c.engine_reads),
                    per_call(|c| c.engine_read_bytes, |c| c.engine_reads),
                    per(|c| c.engine_writes),
                    per_call(|c| c.engine_write_bytes, |c| c.engine_writes),
                    per(|c| c.other_reads),
                    per(|c| c.other_writes),
                    per(|c| c.futex_wakes),
                    per(|c| c.epoll_waits),
                    per(|c| c.all),
                );
            }
        }
    }
    copies(&mut o, inputs, copy_lib, &scratch, &cache)?;
    let _ = writeln!(
        o,
        "\nThe guest's own work per byte: wasm operators the echo component executes (wasmtime's fuel, one unit per operator) per byte of a frame, from the difference between {} frames and none in one instance fed from memory: the guest SDK's framer (read, then a newline search for JSON Lines (the JSON is left to the handler), a CBOR item scan, a `Content-Length` header), the handler's reply and the encoder: `echo-content-length` is the floor of moving the bytes. `simd128`: the workspace's build (`.cargo/config.toml`); without: the same source built with `-C target-feature=-simd128`.\n\n| plugin | frame | build | wasm operators a byte |\n|---|---|---|---:|",
        FUEL_FRAMES
    );
    let builds = [
        ("simd128", Ok(inputs.wasm.clone())),
        ("no simd128", nosimd_wasm),
    ];
    for (build, wasm) in builds {
        let wasm = match wasm {
            Ok(w) => w,
            Err(why) => {
                let _ = writeln!(o, "| echo | 64 KiB | {build} | not measured: {why} |");
                continue;
            }
        };
        for (bin, framing) in [
            ("echo-lines", Framing::JsonLines),
            ("echo-cbor", Framing::CborSeq),
            ("echo-content-length", Framing::ContentLength),
        ] {
            let frame = frame_for(framing, KIB64)?;
            let wire = wire(framing, &frame);
            let per_byte =
                crate::fuel::operators_per_byte(&sibling(&wasm, bin), &wire, FUEL_FRAMES)?;
            let _ = writeln!(o, "| `{bin}` | 64 KiB | {build} | {per_byte:.2} |");
        }
    }
    let _ = writeln!(
        o,
        "\nOne 64 KiB copy on this machine by where its destination lies past its source, modulo 4096 (`bench/src/aliasing.rs`; the median of {} batches): why sandpipe starts the read of a large frame on a 64-byte boundary (`host/src/run/read_room.rs`). A pipe's pages are filled from their start; a buffer as large as a frame comes from `mmap`, 16 bytes into a page.\n\n| copy | destination past the source | per copy |\n|---|---:|---:|",
        crate::aliasing::BATCHES
    );
    for row in crate::aliasing::measure()? {
        let _ = writeln!(
            o,
            "| {} | {} B | {} |",
            row.what,
            row.distance,
            fmt_duration(row.per_copy)
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{o}");
    Ok(())
}

/// `--profile-frames`' user-space copies per 64 KiB round trip, in each process of each
/// contender, the native plugin run directly first (see [`crate::copies`]).
fn copies(
    o: &mut String,
    inputs: &Inputs,
    copy_lib: Result<PathBuf, String>,
    scratch: &Path,
    cache: &Path,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let rounds = PROFILE_FRAMES.1 - PROFILE_FRAMES.0;
    let _ = writeln!(
        o,
        "\nUser-space copies per 64 KiB round trip: every `memcpy` and `memmove` of {} bytes or more, counted in each process by `bench/copy-count` (preloaded with `LD_PRELOAD`), the difference between a run of {} and one of {} round trips, divided by {rounds}. Bytes are per byte of the frame: a frame copied once on its way in and once on its way out reads 2.0. A wasm plugin's own copies (its `memory.copy`, the lowering into its memory and the lifting out) are in sandpipe's process. Not in it: copies the compiler inlined, and the kernel's copies into and out of pipes (the system calls above). A native plugin under `sandpipe run` shows up only if its environment kept `LD_PRELOAD`.\n",
        crate::copies::LARGE,
        PROFILE_FRAMES.1,
        PROFILE_FRAMES.0,
    );
    let lib = match copy_lib {
        Ok(lib) => lib,
        Err(why) => {
            let _ = writeln!(o, "Copy rows **not measured**: {why}.");
            return Ok(());
        }
    };
    let _ = writeln!(
        o,
        "| contender | process | large copies a round trip | `memcpy` bytes a frame byte | `memmove` bytes a frame byte | all copied bytes a frame byte |\n|---|---|---:|---:|---:|---:|"
    );
    let dir = scratch.join("copies");
    for c in DIRECT_PROFILED.iter().chain(&PROFILED) {
        let count =
            |frames| crate::copies::count(&lib, &dir, c.command(inputs), c.framing, frames, cache);
        let (short, long) = (count(PROFILE_FRAMES.0)?, count(PROFILE_FRAMES.1)?);
        for (exe, l) in &long {
            let s = short.get(exe).copied().unwrap_or_default();
            let per = |l: u64, s: u64| (l as f64 - s as f64) / rounds as f64;
            let per_byte = |l: u64, s: u64| per(l, s) / KIB64 as f64;
            let _ = writeln!(
                o,
                "| {} | `{exe}` | {:.1} | {:.2} | {:.2} | {:.2} |",
                c.label,
                per(
                    l.memcpy_calls + l.memmove_calls,
                    s.memcpy_calls + s.memmove_calls
                ),
                per_byte(l.memcpy_bytes, s.memcpy_bytes),
                per_byte(l.memmove_bytes, s.memmove_bytes),
                per_byte(
                    l.memcpy_bytes + l.memmove_bytes,
                    s.memcpy_bytes + s.memmove_bytes
                ),
            );
        }
    }
    Ok(())
}

/// Round trips of the short and the long strace run.
const PROFILE_FRAMES: (u64, u64) = (10, 50);
/// A `--profile-frames` contender: an echo plugin, wasm or native, behind `sandpipe run` or
/// run directly.
#[derive(Debug, Clone, Copy)]
struct Profiled {
    label: &'static str,
    /// `sandpipe run`'s mode (raw, lines or cbor), or `None` for the plugin run directly.
    run: Option<&'static str>,
    framing: Framing,
    bin: &'static str,
    wasm: bool,
}

impl Profiled {
    fn plugin(&self, inputs: &Inputs) -> PathBuf {
        let build = if self.wasm {
            &inputs.wasm
        } else {
            &inputs.native
        };
        sibling(build, self.bin)
    }

    fn command(&self, inputs: &Inputs) -> Command {
        let plugin = self.plugin(inputs);
        match self.run {
            Some(mode) => run_cmd(&inputs.sandpipe, mode, &plugin),
            None => Command::new(plugin),
        }
    }
}

/// The baselines of the copy rows: the native echo plugins run directly.
const DIRECT_PROFILED: [Profiled; 2] = [
    Profiled {
        label: "native direct, lines",
        run: None,
        framing: Framing::JsonLines,
        bin: "echo-lines",
        wasm: false,
    },
    Profiled {
        label: "native direct, cbor",
        run: None,
        framing: Framing::CborSeq,
        bin: "echo-cbor",
        wasm: false,
    },
];
/// `sandpipe run`'s contenders in every `--profile-frames` table.
const PROFILED: [Profiled; 5] = [
    Profiled {
        label: "`sandpipe run` wasm, raw",
        run: Some("raw"),
        framing: Framing::JsonLines,
        bin: "echo-lines",
        wasm: true,
    },
    Profiled {
        label: "`sandpipe run` wasm, lines",
        run: Some("lines"),
        framing: Framing::JsonLines,
        bin: "echo-lines",
        wasm: true,
    },
    Profiled {
        label: "`sandpipe run` wasm, cbor",
        run: Some("cbor"),
        framing: Framing::CborSeq,
        bin: "echo-cbor",
        wasm: true,
    },
    Profiled {
        label: "`sandpipe run` native, lines",
        run: Some("lines"),
        framing: Framing::JsonLines,
        bin: "echo-lines",
        wasm: false,
    },
    Profiled {
        label: "`sandpipe run` native, cbor",
        run: Some("cbor"),
        framing: Framing::CborSeq,
        bin: "echo-cbor",
        wasm: false,
    },
];
/// Frames fed to one guest instance for the fuel count.
const FUEL_FRAMES: usize = 20;

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[derive(Debug, Default)]
struct Counts {
    engine_reads: u64,
    engine_read_bytes: u64,
    engine_writes: u64,
    engine_write_bytes: u64,
    other_reads: u64,
    other_writes: u64,
    futex_wakes: u64,
    epoll_waits: u64,
    all: u64,
}

/// Count an `strace -f -s 0` trace. `sandpipe run` bridges on a current-thread runtime, so its
/// reads of the engine's stdin and writes to its stdout are descriptors 0 and 1 of the first pid
/// in the trace (a wasm guest runs on that thread too); every other `read` and `write` (a native
/// plugin's own stdio, an eventfd, another thread) is counted as other.
fn count_trace(trace: &str) -> Counts {
    let mut c = Counts::default();
    let first = trace.split_whitespace().next();
    for line in trace.lines() {
        let Some((pid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if call.starts_with("<...") || call.starts_with("+++") || call.starts_with("---") {
            continue;
        }
        c.all += 1;
        let result = call
            .rsplit_once("= ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|r| r.parse::<u64>().ok());
        let ours = Some(pid) == first;
        if let Some(args) = call.strip_prefix("read(") {
            if ours && args.starts_with("0,") {
                c.engine_reads += 1;
                c.engine_read_bytes += result.unwrap_or(0);
            } else {
                c.other_reads += 1;
            }
        } else if let Some(args) = call
            .strip_prefix("write(")
            .or_else(|| call.strip_prefix("writev("))
        {
            if ours && args.starts_with("1,") {
                c.engine_writes += 1;
                c.engine_write_bytes += result.unwrap_or(0);
            } else {
                c.other_writes += 1;
            }
        } else if call.starts_with("futex(") && call.contains("FUTEX_WAKE") {
            c.futex_wakes += 1;
        } else if call.starts_with("epoll_wait(") {
            c.epoll_waits += 1;
        }
    }
    c
}

/// Build `echo-lines.wasm` and `echo-cbor.wasm` without `simd128` into `target`.
pub fn build_without_simd(target: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(sandpipe_tests::workspace_root())
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "sandpipe-example-echo",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target)
        .env("RUSTFLAGS", "-C target-feature=-simd128")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the echo plugins without simd128 failed ({status})"
        ));
    }
    let wasm = target.join("wasm32-wasip2/release/echo-lines.wasm");
    if !wasm.is_file() {
        return Err(format!("{} was not built", wasm.display()));
    }
    Ok(wasm)
}
