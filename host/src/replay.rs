//! Replaying a recorded transcript: check a plugin against it, or stand in for the plugin.
//!
//! - [`check`] feeds the recorded host→plugin frames to a plugin, in order, and compares every
//!   plugin→host frame byte for byte; the first difference is a [`Divergence`] naming its
//!   index. Under `--deterministic` (a `# seed:` header) a wasm plugin reproduces its session
//!   exactly; a native plugin only if it is deterministic by itself.
//! - [`serve`] acts as the plugin: it answers each incoming frame with the recorded response,
//!   strictly in order ([`MatchMode::Strict`]) or by JSON-RPC request id
//!   ([`MatchMode::ById`], for protocols whose responses may come out of order).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::BytesMut;
use sandpipe_proto::frame::{FrameLimits, Framer, Framing};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::Exit;
use crate::policy::document::Dir;
use crate::policy::value::Cap;
use crate::policy::{Policy, PolicyDocument};
use crate::run::read_room::reserve_read_room;
use crate::run::session::Session;
use crate::speak::protocols::Protocol;

/// Where a replay first differs from its recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the transcript entry (0-based, counting both directions).
    pub index: usize,
    /// The recorded frame, if the transcript had one there.
    pub expected: Option<Vec<u8>>,
    /// What the plugin sent instead, if anything.
    pub got: Option<Vec<u8>>,
    /// What happened, in words.
    pub reason: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "first divergence at frame {}: {}",
            self.index, self.reason
        )?;
        if let Some(e) = &self.expected {
            writeln!(f, "- {}", show(e))?;
        }
        if let Some(g) = &self.got {
            writeln!(f, "+ {}", show(g))?;
        }
        Ok(())
    }
}

fn show(frame: &[u8]) -> String {
    match std::str::from_utf8(frame) {
        Ok(s) if !s.contains(['\n', '\r']) => s.to_owned(),
        _ => format!(
            "x {} ; {}",
            frame.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            crate::run::cbor_note::render(frame)
        ),
    }
}

/// The framing a transcript declares (`# framing:`; JSON Lines when absent).
pub fn framing_of(t: &Transcript) -> Result<Framing, String> {
    t.header("framing").unwrap_or("lines").parse()
}

/// The protocol from `# protocol:`, when the recording names one sandpipe speaks.
pub fn protocol_of(t: &Transcript) -> Option<Protocol> {
    t.header("protocol")?.parse().ok()
}

/// The policy a transcript was recorded under, as data: its `# policy:` header, or, for a
/// recording written before the header held the whole policy, its `# args:`, `# preopen:`,
/// `# seed:`, `# fuel:`, `# max-memory:` and `# timeout-ms:` lines.
pub fn document_of(t: &Transcript) -> Result<PolicyDocument, String> {
    if let Some(json) = t.header("policy") {
        return PolicyDocument::from_json(json).map_err(|e| format!("header policy: {e}"));
    }
    let mut doc = PolicyDocument::default();
    let num = |key: &str| -> Result<Option<u64>, String> {
        t.header(key)
            .map(|v| v.parse::<u64>().map_err(|e| format!("header {key}: {e}")))
            .transpose()
    };
    doc.seed = num("seed")?;
    doc.limits.fuel = num("fuel")?;
    doc.limits.max_memory = match t.header("max-memory") {
        Some("none") => Some(Cap(None)),
        Some(_) => num("max-memory")?.map(|n| Cap(Some(n))),
        None => None,
    };
    doc.limits.timeout = num("timeout-ms")?.map(Duration::from_millis);
    if let Some(raw) = t.header("args") {
        doc.args = match serde_json::from_str::<Vec<String>>(raw) {
            Ok(v) if raw.starts_with('[') => v,
            _ => raw.split_whitespace().map(str::to_owned).collect(),
        };
    }
    let preopens = t.headers.iter().filter(|(k, _)| k == "preopen");
    for (_, v) in preopens {
        let mut words = v.split_whitespace();
        let guest = words.next().unwrap_or_default().to_owned();
        let read_only = words.next() == Some("ro");
        doc.grants.dirs.push(Dir {
            host: PathBuf::from(&guest),
            guest,
            read_only,
        });
    }
    doc.grants.env = t
        .headers
        .iter()
        .filter(|(k, _)| k == "env")
        .map(|(_, v)| v.clone())
        .collect();
    Ok(doc)
}

/// The policy a transcript was recorded under (see [`document_of`]). `host_dir(guest)` gives
/// the host directory for each recorded preopen (replay uses fresh directories unless told
/// otherwise). A native plugin sees a preopen at its host path (Landlock grants it there), so
/// an argument equal to a guest path becomes the host directory.
///
/// Environment variables and HTTP header values are taken from the replaying process's own
/// environment, by the names recorded, as `--env NAME` does. The recording's audit log is not
/// appended to: a replay writes no audit trail unless its caller sets one.
pub fn recorded_policy(
    t: &Transcript,
    native: bool,
    host_dir: &dyn Fn(&str) -> PathBuf,
) -> Result<Policy, String> {
    let mut doc = document_of(t)?;
    doc.audit = None;
    let guests: Vec<String> = doc.grants.dirs.iter().map(|d| d.guest.clone()).collect();
    for d in &mut doc.grants.dirs {
        d.host = host_dir(&d.guest);
        if native {
            d.guest = d.host.display().to_string();
        }
    }
    if native {
        for arg in &mut doc.args {
            if guests.contains(arg) {
                *arg = host_dir(arg).display().to_string();
            }
        }
    }
    Policy::from_document(&doc, &|name| std::env::var(name).ok()).map_err(|e| e.to_string())
}

/// Replay `t` against a running session: send each recorded `>` frame, expect each `<` frame
/// (each within `wait`: a plugin waiting for something the recording does not send is a
/// divergence, not a hang). Then close stdin: the plugin must send nothing more. Returns how
/// the plugin ended.
///
/// Each `>` frame begins a request ([`crate::SessionControl::begin_request`]), so per-request
/// fuel is re-armed for it as the supervisor re-armed it for each request it forwarded (a
/// notification re-arms it too: replay does not speak the protocol).
pub async fn check(
    session: &mut Session,
    t: &Transcript,
    wait: Duration,
) -> Result<Exit, Divergence> {
    for (index, entry) in t.entries.iter().enumerate() {
        match entry.dir {
            Direction::ToPlugin => {
                session.control().begin_request();
                if let Err(e) = session.send(&entry.frame).await {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: format!(
                            "the plugin stopped reading: {e} ({})",
                            session.wait().await
                        ),
                    });
                }
            }
            Direction::FromPlugin => match recv_within(session, wait, |d| {
                format!("no frame from the plugin within {d}")
            })
            .await
            {
                Ok(Some(got)) if got[..] == entry.frame[..] => {}
                Ok(Some(got)) => {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: Some(got.to_vec()),
                        reason: "the plugin sent a different frame".into(),
                    });
                }
                Ok(None) => {
                    let exit = session.wait().await;
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: format!("the plugin ended first ({exit})"),
                    });
                }
                Err(e) => {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: e.to_string(),
                    });
                }
            },
        }
    }
    session.close_stdin().await;
    let index = t.entries.len();
    let last = recv_within(session, wait, |d| {
        format!("the plugin did not end within {d} of its stdin closing")
    })
    .await;
    match last {
        Ok(None) => Ok(session.wait().await),
        Ok(Some(extra)) => Err(Divergence {
            index,
            expected: None,
            got: Some(extra.to_vec()),
            reason: "the plugin sent a frame the recording does not have".into(),
        }),
        Err(e) => Err(Divergence {
            index,
            expected: None,
            got: None,
            reason: e.to_string(),
        }),
    }
}

/// How [`serve`] matches incoming frames to the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MatchMode {
    /// Each incoming frame must be the next recorded `>` frame, byte for byte; the `<` frames
    /// that follow it are sent back.
    Strict,
    /// A JSON-RPC request is matched to the recorded request with the same id (in any order);
    /// the recorded frames that answered it (notifications in between, then the response with
    /// that id) are sent back. Notifications are matched by bytes, in order.
    ById,
}

/// What [`serve`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeReport {
    /// Incoming frames that matched.
    pub matched: usize,
    /// Incoming frames that did not (each got the protocol's error).
    pub unexpected: usize,
}

/// The plugin's next frame (or its end), or a timed-out error whose message `what` words
/// from `wait`.
async fn recv_within(
    session: &mut Session,
    wait: Duration,
    what: impl FnOnce(humantime::FormattedDuration) -> String,
) -> Result<Option<bytes::Bytes>, crate::SessionError> {
    tokio::time::timeout(wait, session.recv())
        .await
        .unwrap_or_else(|_| {
            Err(crate::SessionError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                what(humantime::format_duration(wait)),
            )))
        })
}

/// Act as the plugin of `t` on `input`/`output` until `input` ends.
pub async fn serve(
    t: &Transcript,
    mode: MatchMode,
    mut input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> std::io::Result<ServeReport> {
    let framing = framing_of(t).map_err(std::io::Error::other)?;
    // An unknown protocol is answered as plain JSON-RPC.
    let protocol = protocol_of(t).unwrap_or(Protocol::JsonRpc);
    let mut decoder = framing.framer(FrameLimits::default());
    let mut encoder = framing.framer(FrameLimits::default());
    let mut inbuf = BytesMut::new();
    let mut report = ServeReport::default();
    let plan = Plan::new(t);
    let mut cursor = 0usize;
    let mut used = vec![false; t.entries.len()];

    // What the plugin said before the host said anything (an oracle's `ready`).
    let leading: Vec<&Entry> = t
        .entries
        .iter()
        .take_while(|e| e.dir == Direction::FromPlugin)
        .collect();
    for e in &leading {
        send(&mut encoder, &mut output, &e.frame).await?;
    }
    cursor += leading.len();

    let mut eof = false;
    loop {
        let next = if eof {
            decoder.decode_eof(&mut inbuf)
        } else {
            decoder.decode(&mut inbuf)
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) if eof => return Ok(report),
            Ok(None) => {
                reserve_read_room(&mut inbuf, 64 * 1024);
                if input.read_buf(&mut inbuf).await? == 0 {
                    eof = true;
                }
                continue;
            }
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        };
        let replies: Option<Vec<usize>> = match mode {
            MatchMode::Strict => match t.entries.get(cursor) {
                Some(e) if e.dir == Direction::ToPlugin && e.frame[..] == frame[..] => {
                    let start = cursor + 1;
                    let end = t.entries[start..]
                        .iter()
                        .position(|e| e.dir == Direction::ToPlugin)
                        .map_or(t.entries.len(), |p| start + p);
                    cursor = end;
                    Some((start..end).collect())
                }
                _ => None,
            },
            MatchMode::ById => plan.replies_for(&frame, &mut used),
        };
        match replies {
            Some(indexes) => {
                report.matched += 1;
                for i in indexes {
                    send(&mut encoder, &mut output, &t.entries[i].frame).await?;
                }
            }
            None => {
                report.unexpected += 1;
                let expected = match mode {
                    MatchMode::Strict => t
                        .entries
                        .get(cursor)
                        .map(|e| show(&e.frame))
                        .unwrap_or_else(|| "nothing more".into()),
                    MatchMode::ById => "a recorded request with the same id".into(),
                };
                let message = format!(
                    "replay: unexpected frame {}; expected {expected}",
                    show(&frame)
                );
                eprintln!("sandpipe: {message}");
                if let Some(error) = protocol_error(protocol, &frame, &message) {
                    send(&mut encoder, &mut output, &error).await?;
                }
            }
        }
    }
}

async fn send(
    encoder: &mut impl Framer,
    output: &mut (impl AsyncWrite + Unpin),
    frame: &[u8],
) -> std::io::Result<()> {
    let mut buf = BytesMut::new();
    encoder
        .encode(frame, &mut buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    output.write_all(&buf).await?;
    output.flush().await
}

/// For [`MatchMode::ById`]: which recorded frames answer which request.
struct Plan {
    /// Recorded `>` requests by id: the indexes of the frames that answered each.
    by_id: HashMap<String, Vec<usize>>,
    /// Recorded `>` frames without an id (notifications), with the `<` frames that follow them
    /// up to the next `>`.
    others: Vec<(usize, Vec<usize>)>,
}

fn id_of(frame: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(frame).ok()?;
    v.get("id").filter(|id| !id.is_null()).map(Value::to_string)
}

fn is_response(frame: &[u8]) -> bool {
    serde_json::from_slice::<Value>(frame)
        .is_ok_and(|v| v.get("result").is_some() || v.get("error").is_some())
}

impl Plan {
    fn new(t: &Transcript) -> Self {
        let mut by_id = HashMap::new();
        let mut others = Vec::new();
        for (i, e) in t.entries.iter().enumerate() {
            if e.dir != Direction::ToPlugin {
                continue;
            }
            match id_of(&e.frame) {
                Some(id) if !is_response(&e.frame) => {
                    // The response with this id, and the plugin's notifications sent after the
                    // request and before that response.
                    let mut replies = Vec::new();
                    for (j, r) in t.entries.iter().enumerate().skip(i + 1) {
                        if r.dir != Direction::FromPlugin {
                            continue;
                        }
                        let rid = id_of(&r.frame);
                        if rid.as_deref() == Some(id.as_str()) && is_response(&r.frame) {
                            replies.push(j);
                            break;
                        }
                        if rid.is_none() {
                            replies.push(j);
                        }
                    }
                    by_id.insert(id, replies);
                }
                _ => {
                    let replies = t.entries[i + 1..]
                        .iter()
                        .take_while(|r| r.dir == Direction::FromPlugin)
                        .enumerate()
                        .map(|(k, _)| i + 1 + k)
                        .collect();
                    others.push((i, replies));
                }
            }
        }
        Plan { by_id, others }
    }

    fn replies_for(&self, frame: &[u8], used: &mut [bool]) -> Option<Vec<usize>> {
        if let Some(id) = id_of(frame).filter(|_| !is_response(frame)) {
            let replies = self.by_id.get(&id)?;
            // Notifications are sent only once, whichever request claims them first.
            let out: Vec<usize> = replies
                .iter()
                .copied()
                .filter(|&i| !std::mem::replace(&mut used[i], true))
                .collect();
            return Some(out);
        }
        let t_index = self.others.iter().find(|(i, _)| !used[*i])?;
        let (i, replies) = t_index;
        used[*i] = true;
        let _ = frame;
        Some(
            replies
                .iter()
                .copied()
                .filter(|&r| !std::mem::replace(&mut used[r], true))
                .collect(),
        )
    }
}

/// The protocol's error answer to an unexpected request, when the frame is one: the
/// recording will never answer it ([`Protocol::stopped_answer`]).
fn protocol_error(protocol: Protocol, frame: &[u8], message: &str) -> Option<Vec<u8>> {
    protocol.stopped_answer(frame, &crate::Stopped::by_host(message, Vec::new()))
}

/// Fresh directories for a transcript's preopens, removed when dropped.
#[derive(Debug)]
pub struct ScratchDirs {
    root: PathBuf,
}

impl ScratchDirs {
    /// Create a scratch root under the system temp dir.
    pub fn new() -> std::io::Result<Self> {
        let root = std::env::temp_dir().join(format!(
            "sandpipe-replay-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&root)?;
        Ok(Self { root })
    }

    /// The (created) directory standing in for `guest`.
    pub fn dir_for(&self, guest: &str) -> PathBuf {
        let name: String = guest
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = self.root.join(name);
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    /// The root.
    pub fn path(&self) -> &Path {
        &self.root
    }
}

impl Drop for ScratchDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
