//! Round trip of one JSON Lines frame, four ways: the plain-function floor, a hand-written
//! blocking-pipe child, sandpipe's native fallback and sandpipe's wasm sandbox.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::BytesMut;
use sandpipe::{Host, Policy, Session, SessionOptions, StderrMode};
use sandpipe_proto::frame::{AnyFramer, FrameLimits, Framer, Framing};

use crate::measure::{Plan, Sampler, Stats, run_sync};

/// A JSON-RPC-shaped request of exactly `size` bytes (no newline): small objects while they
/// fit, then a padding string, so large frames exercise the parser, not only a string scan.
pub fn frame(size: usize) -> anyhow::Result<Vec<u8>> {
    const HEAD: &str = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"items":["#;
    const PAD_OPEN: &str = r#"],"pad":""#;
    const TAIL: &str = r#""}}"#;
    let mut out = String::with_capacity(size);
    out.push_str(HEAD);
    let fixed = PAD_OPEN.len() + TAIL.len();
    for i in 0.. {
        let item = format!(
            r#"{}{{"key":"k{i:05}","value":{},"ok":true}}"#,
            if i == 0 { "" } else { "," },
            i * 7919 % 100_000,
        );
        if out.len() + item.len() + fixed > size {
            break;
        }
        out.push_str(&item);
    }
    out.push_str(PAD_OPEN);
    let pad = size
        .checked_sub(out.len() + TAIL.len())
        .with_context(|| format!("a {size} B frame is too small for the request shape"))?;
    out.extend(std::iter::repeat_n('x', pad));
    out.push_str(TAIL);
    ensure!(
        out.len() == size,
        "built {} bytes, wanted {size}",
        out.len()
    );
    serde_json::from_str::<serde_json::Value>(&out).context("the bench frame is not JSON")?;
    Ok(out.into_bytes())
}

/// Everything a sandpipe round trip computes, minus transport and sandbox: the host framer
/// encodes, the plugin's framer decodes, the echo handler copies, the plugin's framer encodes,
/// the host framer decodes (each JSON Lines step validates the line as JSON).
#[derive(Debug)]
pub struct Floor {
    host_out: AnyFramer,
    plugin_in: AnyFramer,
    plugin_out: AnyFramer,
    host_in: AnyFramer,
    wire: BytesMut,
    back: BytesMut,
}

impl Floor {
    pub fn new() -> Floor {
        let framer = || Framing::JsonLines.framer(FrameLimits::default());
        Floor {
            host_out: framer(),
            plugin_in: framer(),
            plugin_out: framer(),
            host_in: framer(),
            wire: BytesMut::new(),
            back: BytesMut::new(),
        }
    }

    pub fn round_trip(&mut self, frame: &[u8]) -> anyhow::Result<usize> {
        self.wire.clear();
        self.host_out.encode(frame, &mut self.wire)?;
        let request = self.plugin_in.decode(&mut self.wire)?.context("no frame")?;
        let reply = request.to_vec();
        self.back.clear();
        self.plugin_out.encode(&reply, &mut self.back)?;
        let answer = self.host_in.decode(&mut self.back)?.context("no reply")?;
        Ok(answer.len())
    }
}

pub fn floor(plan: &Plan, frame: &[u8]) -> anyhow::Result<Stats> {
    let mut floor = Floor::new();
    run_sync(plan, || {
        let t = Instant::now();
        let n = floor.round_trip(black_box(frame))?;
        let took = t.elapsed();
        ensure!(
            n == frame.len(),
            "floor echoed {n} bytes of {}",
            frame.len()
        );
        Ok(took)
    })
}

/// The literal "parse and re-serialize" reading of the echo: `serde_json::Value` both ways.
pub fn value_floor(plan: &Plan, frame: &[u8]) -> anyhow::Result<Stats> {
    run_sync(plan, || {
        let t = Instant::now();
        let value: serde_json::Value = serde_json::from_slice(black_box(frame))?;
        let out = serde_json::to_vec(&value)?;
        let took = t.elapsed();
        black_box(out);
        Ok(took)
    })
}

/// The native plugin behind std pipes, written and read with blocking calls.
pub struct Baseline {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
}

impl Baseline {
    fn spawn(program: &Path) -> anyhow::Result<Baseline> {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawning {}", program.display()))?;
        let stdin = child.stdin.take().context("no stdin pipe")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        Ok(Baseline {
            child,
            stdin: Some(stdin),
            stdout: BufReader::with_capacity(128 * 1024, stdout),
            line: Vec::new(),
        })
    }

    fn round_trip(&mut self, wire: &[u8]) -> anyhow::Result<Duration> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        let t = Instant::now();
        stdin.write_all(wire)?;
        self.line.clear();
        self.stdout.read_until(b'\n', &mut self.line)?;
        let took = t.elapsed();
        ensure!(
            self.line.len() == wire.len(),
            "baseline child echoed {} bytes of {}",
            self.line.len(),
            wire.len()
        );
        Ok(took)
    }

    fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        ensure!(status.success(), "baseline child ended with {status}");
        Ok(())
    }
}

pub fn baseline(plan: &Plan, program: &Path, frame: &[u8]) -> anyhow::Result<Stats> {
    let mut wire = frame.to_vec();
    wire.push(b'\n');
    let mut child = Baseline::spawn(program)?;
    let stats = run_sync(plan, || child.round_trip(&wire))?;
    child.finish()?;
    Ok(stats)
}

pub fn session_options() -> SessionOptions {
    SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard)
}

/// One timed send + recv on a started session.
pub async fn session_round_trip(session: &mut Session, frame: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    session.send(frame).await?;
    let reply = session.recv().await?;
    let took = t.elapsed();
    let got = reply.context("the plugin closed stdout")?.len();
    ensure!(
        got == frame.len(),
        "plugin echoed {got} bytes of {}",
        frame.len()
    );
    Ok(took)
}

/// `Host::load` and `Host::start` on `plugin` under the default policy.
pub async fn start_session(
    host: &Host,
    plugin: &Path,
    options: &SessionOptions,
) -> anyhow::Result<Session> {
    let plugin = host
        .load(plugin)
        .with_context(|| format!("loading {}", plugin.display()))?;
    Ok(host.start(&plugin, &Policy::default(), options).await?)
}

/// Close the session's stdin and require a clean exit.
pub async fn end_session(session: Session) -> anyhow::Result<()> {
    let exit = session.shutdown(Duration::from_secs(2)).await;
    ensure!(exit.success(), "plugin ended with {exit:?}");
    Ok(())
}

/// Round trips of `frame` on one session of `plugin` started with `options`.
pub async fn round_trips(
    plan: &Plan,
    host: &Host,
    plugin: &Path,
    options: &SessionOptions,
    frame: &[u8],
) -> anyhow::Result<Stats> {
    let mut session = start_session(host, plugin, options).await?;
    let mut s = Sampler::new(plan);
    while s.more() {
        s.record(session_round_trip(&mut session, frame).await?);
    }
    end_session(session).await?;
    Ok(s.finish())
}

/// `Host::start` on `plugin` (the native build gives the native fallback, the wasm build the
/// sandbox), then JSON Lines round trips on that one session.
pub async fn sandpipe(
    plan: &Plan,
    host: &Host,
    plugin: &Path,
    frame: &[u8],
) -> anyhow::Result<Stats> {
    round_trips(plan, host, plugin, &session_options(), frame).await
}

/// One side of an in-blocks comparison: the hand-written child or a sandpipe session.
pub enum Contestant {
    Child(Baseline, Vec<u8>),
    Session(Box<Session>),
}

impl Contestant {
    /// The hand-written baseline child for `frame`.
    pub fn child(program: &Path, frame: &[u8]) -> anyhow::Result<Contestant> {
        let mut wire = frame.to_vec();
        wire.push(b'\n');
        Ok(Contestant::Child(Baseline::spawn(program)?, wire))
    }

    /// A session of `plugin` started on `host`.
    pub async fn session(host: &Host, plugin: &Path) -> anyhow::Result<Contestant> {
        let session = start_session(host, plugin, &session_options()).await?;
        Ok(Contestant::Session(Box::new(session)))
    }

    async fn round_trip(&mut self, frame: &[u8]) -> anyhow::Result<Duration> {
        match self {
            Contestant::Child(child, wire) => child.round_trip(wire),
            Contestant::Session(session) => session_round_trip(session, frame).await,
        }
    }

    async fn finish(self) -> anyhow::Result<()> {
        match self {
            Contestant::Child(child, _) => child.finish(),
            Contestant::Session(session) => end_session(*session).await,
        }
    }
}

/// Round trips on every contestant, `block` at a time each, in turn, until every one has
/// its plan's samples (or the plan's time runs out). All of them are alive throughout.
///
/// Why: on this VM the machine's own speed swings by up to a third over seconds (one 64 KiB
/// session's p50 per 500 round trips went 400 <-> 720 us), so two figures measured one after
/// the other can differ by that much for nothing. Blocks spread every contestant over the
/// same stretch of time; within a block each runs warm, as a busy plugin does (alternating
/// single round trips instead thrashed the caches and doubled every figure).
pub async fn in_blocks(
    plan: &Plan,
    block: usize,
    contestants: Vec<Contestant>,
    frame: &[u8],
) -> anyhow::Result<Vec<Stats>> {
    let mut contestants = contestants;
    let mut samplers: Vec<Sampler> = contestants.iter().map(|_| Sampler::new(plan)).collect();
    while samplers.iter_mut().all(Sampler::more) {
        for (c, s) in contestants.iter_mut().zip(&mut samplers) {
            for _ in 0..block {
                s.record(c.round_trip(frame).await?);
            }
        }
    }
    for c in contestants {
        c.finish().await?;
    }
    Ok(samplers.into_iter().map(Sampler::finish).collect())
}

/// Round trips per block for a frame of `size` bytes: a few milliseconds of work each.
pub fn block_for(size: usize) -> usize {
    if size <= 1024 { 200 } else { 8 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_the_exact_size_and_echo_through_the_floor() {
        let mut floor = Floor::new();
        for size in [100, 1000, 64 * 1024] {
            let f = frame(size).expect("frame builds");
            assert_eq!(f.len(), size);
            assert_eq!(floor.round_trip(&f).expect("echo"), size);
        }
        assert!(frame(10).is_err());
    }
}
