//! Scale: resident memory per idle session, the time to start N sessions, requests spread
//! over 1,000 live sessions, and start to first response with the pooling allocator.
//!
//! ```text
//!  parent (run) ─┬─ sandpipe-bench --scale-child idle ondemand|pooling|native N   one child
//!                ├─ sandpipe-bench --scale-child requests ondemand|pooling|native  process
//!                └─ sandpipe-bench --scale-child first                             each
//!        each child prints "scale <key> <value>" lines; the parent renders one markdown section
//! ```
//!
//! Each measurement runs in a fresh process, so its RSS is its own, and a run that the kernel
//! stops (the on-demand allocator at ~9,000 live sessions meets `vm.max_map_count`) is
//! reported as where it stopped, not as a failed benchmark. Children run unpinned with the
//! default multi-thread tokio runtime, as a server embedding sandpipe would.
//!
//! RSS is `VmRSS` from /proc/self/status (for native sessions, plus each child's `Pss` from
//! /proc/PID/smaps_rollup, so shared library pages are split fairly); mappings are the lines
//! of /proc/self/maps.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use sandpipe::{Host, HostOptions, Plugin, Policy, Pooling, Session};

use crate::measure::{Plan, Sampler, Stats};
use crate::report::fmt_duration;
use crate::roundtrip::{frame, session_options, session_round_trip};

/// The first argument that makes this binary a scale child.
pub const CHILD_FLAG: &str = "--scale-child";

/// Live sessions the request figures spread their requests over.
const LIVE: usize = 1_000;
/// Requests per live session in the request figures.
const PER_SESSION: usize = 100;

/// How the sessions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// wasm, wasmtime's default on-demand allocator.
    OnDemand,
    /// wasm, the pooling allocator sized to exactly the sessions measured.
    Pooling,
    /// The native build as child processes.
    Native,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::OnDemand, Kind::Pooling, Kind::Native];

    fn arg(self) -> &'static str {
        match self {
            Kind::OnDemand => "ondemand",
            Kind::Pooling => "pooling",
            Kind::Native => "native",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.arg() == s)
            .with_context(|| format!("unknown session kind {s:?}"))
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::OnDemand => "wasm, on-demand allocator",
            Kind::Pooling => "wasm, pooling allocator",
            Kind::Native => "native child processes",
        }
    }

    fn host(self, sessions: usize) -> anyhow::Result<Host> {
        let options = HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true);
        let options = match self {
            Kind::Pooling => options.pooling(Pooling::new(
                u32::try_from(sessions).context("too many sessions for a pool")?,
            )),
            Kind::OnDemand | Kind::Native => options,
        };
        Ok(Host::with_options(&options)?)
    }
}

/// Session counts of the idle figures per kind: (full run, `--quick`).
fn idle_counts(kind: Kind, quick: bool) -> &'static [usize] {
    match (kind, quick) {
        (Kind::Native, false) => &[100, 1_000],
        (_, false) => &[100, 1_000, 10_000],
        (_, true) => &[10, 50],
    }
}

/// One child's figures, by key.
type Figures = BTreeMap<String, String>;

/// Everything the scale children measured, for the report.
#[derive(Debug, Default)]
pub struct Results {
    quick: bool,
    /// (kind, N) → figures of an idle run; `status` is set when the child did not finish.
    idle: Vec<(Kind, usize, Figures)>,
    requests: Vec<(Kind, Figures)>,
    first: Figures,
}

/// The parent: run every scale child and gather what they print.
pub fn run(exe: &Path, wasm: &Path, native: &Path, quick: bool) -> anyhow::Result<Results> {
    let mut results = Results {
        quick,
        ..Results::default()
    };
    for kind in Kind::ALL {
        for &n in idle_counts(kind, quick) {
            eprintln!(
                "sandpipe-bench: scale: {n} idle sessions, {}",
                kind.describe()
            );
            let figures = child(
                exe,
                wasm,
                native,
                quick,
                &["idle", kind.arg(), &n.to_string()],
            )?;
            results.idle.push((kind, n, figures));
        }
    }
    for kind in Kind::ALL {
        eprintln!(
            "sandpipe-bench: scale: requests over live sessions, {}",
            kind.describe()
        );
        let figures = child(exe, wasm, native, quick, &["requests", kind.arg()])?;
        results.requests.push((kind, figures));
    }
    eprintln!("sandpipe-bench: scale: start to first response, both allocators");
    results.first = child(exe, wasm, native, quick, &["first"])?;
    Ok(results)
}

/// Run one child; a child that fails or is killed still gives the figures it printed, plus
/// `status`.
fn child(
    exe: &Path,
    wasm: &Path,
    native: &Path,
    quick: bool,
    what: &[&str],
) -> anyhow::Result<Figures> {
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_FLAG)
        .args(what)
        .arg("--wasm")
        .arg(wasm)
        .arg("--native")
        .arg(native)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .output()
        .with_context(|| format!("running the scale child {what:?}"))?;
    let mut figures = Figures::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut fields = line.splitn(3, '\t');
        match (fields.next(), fields.next(), fields.next()) {
            (Some("scale"), Some(key), Some(value)) => {
                figures.insert(key.to_owned(), value.to_owned());
            }
            _ => bail!("unexpected scale child output line {line:?}"),
        }
    }
    if !out.status.success() {
        figures.insert("status".to_owned(), out.status.to_string());
    }
    // The smoke run's counts are far below any limit: there, a session that fails to start
    // is a broken benchmark, not a figure.
    if quick && (figures.contains_key("status") || figures.contains_key("error")) {
        bail!("the scale child {what:?} failed: {figures:?}");
    }
    Ok(figures)
}

/// One figure on stdout, at once (a child the kernel kills keeps what it already said).
fn put(key: &str, value: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "scale\t{key}\t{value}");
    let _ = out.flush();
}

/// This process's arguments after [`CHILD_FLAG`], when it is a scale child.
pub fn child_args() -> Option<Vec<String>> {
    let mut args = std::env::args().skip(1);
    (args.next().as_deref() == Some(CHILD_FLAG)).then(|| args.collect())
}

/// The child: `--scale-child WHAT [KIND [N]] --wasm PATH --native PATH [--quick]`.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let mut positional = Vec::new();
    let (mut wasm, mut native, mut quick) = (None, None, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--wasm" => wasm = it.next().map(PathBuf::from),
            "--native" => native = it.next().map(PathBuf::from),
            "--quick" => quick = true,
            other => positional.push(other.to_owned()),
        }
    }
    let wasm = wasm.context("--scale-child needs --wasm")?;
    let native = native.context("--scale-child needs --native")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let task = async move {
        let positional: Vec<&str> = positional.iter().map(String::as_str).collect();
        match positional[..] {
            ["idle", kind, n] => {
                let kind = Kind::parse(kind)?;
                let n = n.parse().context("idle needs a session count")?;
                idle(kind, n, &wasm, &native).await
            }
            ["requests", kind] => requests(Kind::parse(kind)?, quick, &wasm, &native).await,
            ["first"] => first(quick, &wasm).await,
            _ => bail!("unknown scale child arguments {positional:?}"),
        }
    };
    // Spawned, so the driver runs on a worker thread as a server's tasks would.
    runtime
        .block_on(runtime.spawn(task))
        .context("the scale task panicked")?
}

/// Resident set of this process, in KiB.
fn rss_kib() -> anyhow::Result<u64> {
    status_field("/proc/self/status", "VmRSS:")
}

fn status_field(path: &str, name: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {name} in {path}"))
}

/// Memory mappings of this process (what `vm.max_map_count` limits).
fn mappings() -> anyhow::Result<usize> {
    Ok(std::fs::read_to_string("/proc/self/maps")
        .context("reading /proc/self/maps")?
        .lines()
        .count())
}

/// Proportional set size of a child, in KiB.
fn pss_kib(pid: u32) -> anyhow::Result<u64> {
    status_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
}

fn plugin_for(host: &Host, kind: Kind, wasm: &Path, native: &Path) -> anyhow::Result<Plugin> {
    let path = if kind == Kind::Native { native } else { wasm };
    host.load(path)
        .with_context(|| format!("loading {}", path.display()))
}

/// Start `n` sessions and keep them idle (each plugin blocked reading stdin); report the time
/// the starts took, RSS and mappings before and after.
async fn idle(kind: Kind, n: usize, wasm: &Path, native: &Path) -> anyhow::Result<()> {
    let host = kind.host(n)?;
    let plugin = plugin_for(&host, kind, wasm, native)?;
    // One session first, so one-time costs (lazy statics, the first slot's page faults) stay
    // out of the per-session figure; its slot is given back before counting starts.
    warm_up(&host, &plugin).await?;
    let (rss0, maps0) = (rss_kib()?, mappings()?);
    put("rss_before_kib", rss0);
    put("maps_before", maps0);
    let mut live: Vec<Session> = Vec::with_capacity(n);
    let started = Instant::now();
    let step = (n / 10).max(1);
    for i in 0..n {
        match host
            .start(&plugin, &Policy::default(), &session_options())
            .await
        {
            Ok(s) => live.push(s),
            Err(e) => {
                put("started", i);
                put("maps_at_failure", mappings()?);
                put("error", format!("{e}").replace(['\t', '\n'], " "));
                put("rss_after_kib", rss_kib()?);
                return Ok(());
            }
        }
        if (i + 1) % step == 0 {
            put("started", i + 1);
        }
    }
    put("start_ns", started.elapsed().as_nanos());
    // Let every guest reach its first stdin read, so the figure is an idle session's, not a
    // half-started one's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    put("rss_after_kib", rss_kib()?);
    put("maps_after", mappings()?);
    if kind == Kind::Native {
        let mut children = 0;
        for s in &live {
            let pid = s
                .control()
                .pid()
                .context("a native session without a pid")?;
            children += pss_kib(pid)?;
        }
        put("children_pss_kib", children);
    }
    // Prove they are alive and answering, then leave them to the process exit.
    let probe = frame(100)?;
    for s in live.iter_mut().step_by(step) {
        session_round_trip(s, &probe).await?;
    }
    put("done", 1);
    Ok(())
}

async fn warm_up(host: &Host, plugin: &Plugin) -> anyhow::Result<()> {
    let mut s = host
        .start(plugin, &Policy::default(), &session_options())
        .await?;
    session_round_trip(&mut s, &frame(100)?).await?;
    let exit = s.shutdown(Duration::from_secs(5)).await;
    ensure!(exit.success(), "warm-up session ended with {exit:?}");
    Ok(())
}

/// Start `LIVE` sessions, then time requests two ways: one at a time, round-robin over all
/// live sessions (the latency of one request while 1,000 sessions are live), and all
/// sessions at once, each sending its requests one after another (closed loop: 1,000
/// requests in flight, so the figure includes queueing behind the others).
async fn requests(kind: Kind, quick: bool, wasm: &Path, native: &Path) -> anyhow::Result<()> {
    let (live_n, per) = if quick { (20, 5) } else { (LIVE, PER_SESSION) };
    let host = kind.host(live_n)?;
    let plugin = plugin_for(&host, kind, wasm, native)?;
    let mut live = Vec::with_capacity(live_n);
    for _ in 0..live_n {
        live.push(
            host.start(&plugin, &Policy::default(), &session_options())
                .await?,
        );
    }
    let probe = frame(100)?;
    // Spread: M = live_n × per requests, one in flight at a time.
    let plan = Plan {
        warmup: live_n,
        iters: live_n * per,
        budget: Duration::from_secs(60),
        min_iters: live_n * per,
    };
    let mut s = Sampler::new(&plan);
    let mut next = 0;
    while s.more() {
        s.record(session_round_trip(&mut live[next], &probe).await?);
        next = (next + 1) % live_n;
    }
    emit_stats("spread", s.finish());

    // Concurrent: every session its own task, all at once.
    let started = Instant::now();
    let tasks: Vec<_> = live
        .into_iter()
        .map(|mut session| {
            let probe = probe.clone();
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(per);
                for _ in 0..per {
                    took.push(session_round_trip(&mut session, &probe).await?);
                }
                let exit = session.shutdown(Duration::from_secs(10)).await;
                ensure!(exit.success(), "session ended with {exit:?}");
                anyhow::Ok(took)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(live_n * per);
    for t in tasks {
        all.extend(t.await.context("a session task panicked")??);
    }
    let wall = started.elapsed();
    let plan = Plan::new(0, all.len(), 0);
    let mut s = Sampler::new(&plan);
    for d in all {
        s.record(d);
    }
    emit_stats("concurrent", s.finish());
    put("concurrent_wall_ns", wall.as_nanos());
    put("sessions", live_n);
    put("per_session", per);
    Ok(())
}

fn emit_stats(id: &str, stats: Stats) {
    put(&format!("{id}_n"), stats.n);
    put(&format!("{id}_p50_ns"), stats.p50.as_nanos());
    put(&format!("{id}_p99_ns"), stats.p99.as_nanos());
}

/// Start to first response with a `Plugin` in hand (start + one 100 B round trip + nothing
/// else), on-demand and pooling, in one process so both see the same machine state.
async fn first(quick: bool, wasm: &Path) -> anyhow::Result<()> {
    let plan = if quick {
        Plan::new(1, 5, 2_000)
    } else {
        Plan::new(50, 2_000, 3_000)
    };
    let probe = frame(100)?;
    for kind in [Kind::OnDemand, Kind::Pooling] {
        let host = kind.host(16)?;
        let plugin = host.load(wasm)?;
        let mut s = Sampler::new(&plan);
        while s.more() {
            let t = Instant::now();
            let mut session = host
                .start(&plugin, &Policy::default(), &session_options())
                .await?;
            session_round_trip(&mut session, &probe).await?;
            s.record(t.elapsed());
            let exit = session.shutdown(Duration::from_secs(5)).await;
            ensure!(exit.success(), "session ended with {exit:?}");
        }
        emit_stats(&format!("first_{}", kind.arg()), s.finish());
    }
    Ok(())
}

fn num<T: std::str::FromStr>(f: &Figures, key: &str) -> Option<T> {
    f.get(key).and_then(|v| v.parse().ok())
}

fn ns(f: &Figures, key: &str) -> Option<Duration> {
    num::<u64>(f, key).map(Duration::from_nanos)
}

fn fmt_kib(kib: f64) -> String {
    if kib >= 1024.0 * 1024.0 {
        format!("{:.2} GiB", kib / 1024.0 / 1024.0)
    } else if kib >= 1024.0 {
        format!("{:.1} MiB", kib / 1024.0)
    } else {
        format!("{kib:.0} KiB")
    }
}

/// How an idle run ended, for the table.
fn idle_outcome(f: &Figures, n: usize) -> String {
    if let Some(error) = f.get("error") {
        let at = f.get("started").map_or("?", String::as_str);
        return format!("**stopped after {at} of {n}**: {error}");
    }
    if let Some(status) = f.get("status") {
        let at = f.get("started").map_or("?", String::as_str);
        return format!("**child died after ~{at} of {n} ({status})**");
    }
    if f.contains_key("done") {
        "all started, answering".to_owned()
    } else {
        "incomplete".to_owned()
    }
}

/// The markdown section for BENCHMARKS.md.
pub fn render(r: &Results) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n## Scale\n");
    if r.quick {
        let _ = writeln!(
            w,
            "**Smoke run: tiny session counts; the figures only show that every measurement \
             runs.**\n"
        );
    }
    let _ = writeln!(
        w,
        "Each row ran in a fresh child process of the bench (unpinned, multi-thread tokio \
         runtime, `echo-lines`, `Policy::default()`), so its RSS is its own. Sessions are \
         started one after another and left idle (each plugin blocked reading stdin). \
         Per-session figures are the growth over N sessions divided by N, after one warm-up \
         session. Mappings count /proc/self/maps lines; the kernel's `vm.max_map_count` is \
         {}. The pool is sized to exactly N sessions.\n",
        max_map_count().map_or_else(|| "unknown".to_owned(), |m| m.to_string())
    );
    let _ = writeln!(
        w,
        "| sessions | N | time to start N | per start | RSS at N | RSS per idle session | \
         mappings per session | outcome |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---|");
    for (kind, n, f) in &r.idle {
        let start = ns(f, "start_ns");
        let before: Option<u64> = num(f, "rss_before_kib");
        let after: Option<u64> = num(f, "rss_after_kib");
        let children: u64 = num(f, "children_pss_kib").unwrap_or(0);
        let total = after.map(|a| a + children);
        let per = match (before, total) {
            (Some(b), Some(t)) => Some(t.saturating_sub(b) as f64 / *n as f64),
            _ => None,
        };
        let maps_after: Option<usize> = num(f, "maps_after");
        let maps_before: Option<usize> = num(f, "maps_before");
        let maps = match (maps_before, maps_after) {
            (Some(b), Some(a)) => format!("{:.1}", a.saturating_sub(b) as f64 / *n as f64),
            _ => "—".to_owned(),
        };
        let dash = || "—".to_owned();
        let _ = writeln!(
            w,
            "| {} | {n} | {} | {} | {}{} | {} | {maps} | {} |",
            kind.describe(),
            start.map_or_else(dash, fmt_duration),
            start.map_or_else(dash, |d| fmt_duration(d / *n as u32)),
            total.map_or_else(dash, |t| fmt_kib(t as f64)),
            if *kind == Kind::Native && children > 0 {
                " (host + children's Pss)"
            } else {
                ""
            },
            per.map_or_else(dash, fmt_kib),
            idle_outcome(f, *n),
        );
    }

    let _ = writeln!(
        w,
        "\nRequests over live sessions (100 B JSON Lines echo). **spread**: M = sessions × \
         requests-per-session round trips, one in flight at a time, round-robin over every \
         live session. **concurrent**: every session in its own task, each sending its \
         requests one after another, all at once (as many requests in flight as sessions, so \
         each includes the wait behind the others on 2 CPUs).\n"
    );
    let _ = writeln!(
        w,
        "| sessions | live | M | spread p50 | spread p99 | concurrent p50 | concurrent p99 | \
         concurrent throughput |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (kind, f) in &r.requests {
        let dash = || "—".to_owned();
        let cell = |key: &str| ns(f, key).map_or_else(dash, fmt_duration);
        let live: Option<usize> = num(f, "sessions");
        let per: Option<usize> = num(f, "per_session");
        let m = live.zip(per).map(|(l, p)| l * p);
        let throughput = match (m, ns(f, "concurrent_wall_ns")) {
            (Some(m), Some(wall)) if !wall.is_zero() => {
                format!("{:.0} req/s", m as f64 / wall.as_secs_f64())
            }
            _ => f
                .get("status")
                .map_or_else(dash, |s| format!("child failed ({s})")),
        };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {throughput} |",
            kind.describe(),
            live.map_or_else(dash, |l| l.to_string()),
            m.map_or_else(dash, |m| m.to_string()),
            cell("spread_p50_ns"),
            cell("spread_p99_ns"),
            cell("concurrent_p50_ns"),
            cell("concurrent_p99_ns"),
        );
    }

    let _ = writeln!(
        w,
        "\nStart to first response with a `Plugin` in hand (`Host::start` + one 100 B round \
         trip), both allocators in one process:\n"
    );
    let _ = writeln!(w, "| allocator | n | p50 | p99 |");
    let _ = writeln!(w, "|---|---:|---:|---:|");
    for kind in [Kind::OnDemand, Kind::Pooling] {
        let key = |s: &str| format!("first_{}_{s}", kind.arg());
        let dash = || "—".to_owned();
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} |",
            kind.describe(),
            r.first.get(&key("n")).cloned().unwrap_or_else(dash),
            ns(&r.first, &key("p50_ns")).map_or_else(dash, fmt_duration),
            ns(&r.first, &key("p99_ns")).map_or_else(dash, fmt_duration),
        );
    }

    let _ = writeln!(w, "\n### Scale targets\n");
    let _ = writeln!(w, "| target | measured | goal | ratio | result |");
    let _ = writeln!(w, "|---|---:|---:|---:|---|");
    let gib = 1024.0 * 1024.0;
    for kind in [Kind::OnDemand, Kind::Pooling] {
        let row = r
            .idle
            .iter()
            .find(|(k, n, _)| *k == kind && *n == 10_000)
            .map(|(_, _, f)| f);
        let (measured, ratio, result) = match row {
            None if r.quick => (
                "smoke run: 10,000 not started".to_owned(),
                "—".to_owned(),
                "skipped (smoke run)",
            ),
            None => ("not measured".to_owned(), "—".to_owned(), "not measured"),
            Some(f) if !f.contains_key("done") => (
                idle_outcome(f, 10_000),
                "—".to_owned(),
                "**missed** (did not reach 10,000)",
            ),
            Some(f) => match num::<u64>(f, "rss_after_kib") {
                Some(kib) => {
                    let ratio = kib as f64 / gib;
                    (
                        fmt_kib(kib as f64),
                        format!("{ratio:.2}×"),
                        if ratio < 1.0 { "met" } else { "**missed**" },
                    )
                }
                None => ("not measured".to_owned(), "—".to_owned(), "not measured"),
            },
        };
        let _ = writeln!(
            w,
            "| 10,000 idle sessions, {}: process RSS | {measured} | < 1 GiB | {ratio} | {result} |",
            kind.describe()
        );
    }
    let limit = Duration::from_millis(1);
    for (kind, f) in r.requests.iter().filter(|(k, _)| *k != Kind::Native) {
        for (how, key) in [
            ("spread", "spread_p99_ns"),
            ("concurrent", "concurrent_p99_ns"),
        ] {
            let live: Option<usize> = num(f, "sessions");
            let per: Option<usize> = num(f, "per_session");
            let (measured, ratio, result) = match ns(f, key) {
                Some(p99) => {
                    let ratio = p99.as_secs_f64() / limit.as_secs_f64();
                    (
                        fmt_duration(p99),
                        format!("{ratio:.2}×"),
                        if p99 < limit { "met" } else { "**missed**" },
                    )
                }
                None => ("not measured".to_owned(), "—".to_owned(), "not measured"),
            };
            let _ = writeln!(
                w,
                "| {} sessions × {} requests, {how}, {}: p99 | {measured} | < 1 ms | {ratio} | {result} |",
                live.map_or_else(|| "?".to_owned(), |l| l.to_string()),
                per.map_or_else(|| "?".to_owned(), |p| p.to_string()),
                kind.describe()
            );
        }
    }
    out
}

fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}
