//! Draining a plugin's stderr: continuously (so the plugin never blocks on a full pipe),
//! into the log or the host's own stderr, keeping the last lines for error reports.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Where a plugin's stderr goes besides the tail kept for error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StderrMode {
    /// Each line is logged with `tracing` at `INFO`, target `sandpipe::plugin`.
    #[default]
    Log,
    /// Bytes are copied to the host process's stderr as they arrive (what a plugin binary
    /// run directly would do). Used by `sandpipe run`.
    Inherit,
    /// Only the tail is kept.
    Discard,
}

/// The last lines a plugin wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail {
    inner: Arc<Mutex<TailInner>>,
}

#[derive(Debug, Default)]
struct TailInner {
    lines: VecDeque<String>,
    partial: Vec<u8>,
    max_lines: usize,
    total_bytes: u64,
}

/// Longest line kept; longer lines are cut (a flood of one endless line stays bounded).
const MAX_LINE_BYTES: usize = 1024;

impl StderrTail {
    /// A tail that keeps `max_lines` lines.
    pub fn new(max_lines: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(TailInner {
                max_lines,
                ..TailInner::default()
            })),
        }
    }

    /// The kept lines, oldest first, including an unterminated last line.
    pub fn lines(&self) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = inner.lines.iter().cloned().collect();
        if !inner.partial.is_empty() {
            out.push(String::from_utf8_lossy(&inner.partial).into_owned());
        }
        out
    }

    /// Bytes seen in all.
    pub fn total_bytes(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total_bytes
    }

    /// Feed bytes; returns the lines completed by them (for logging).
    pub(crate) fn push(&self, mut bytes: &[u8]) -> Vec<String> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.total_bytes += bytes.len() as u64;
        let mut done = Vec::new();
        while !bytes.is_empty() {
            match memchr_nl(bytes) {
                Some(i) => {
                    let room = MAX_LINE_BYTES.saturating_sub(inner.partial.len());
                    inner.partial.extend_from_slice(&bytes[..i.min(room)]);
                    let mut line = std::mem::take(&mut inner.partial);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    let line = String::from_utf8_lossy(&line).into_owned();
                    done.push(line.clone());
                    inner.lines.push_back(line);
                    while inner.lines.len() > inner.max_lines {
                        inner.lines.pop_front();
                    }
                    bytes = &bytes[i + 1..];
                }
                None => {
                    let room = MAX_LINE_BYTES.saturating_sub(inner.partial.len());
                    inner
                        .partial
                        .extend_from_slice(&bytes[..bytes.len().min(room)]);
                    bytes = &[];
                }
            }
        }
        done
    }

    /// Read `stream` to EOF, keeping the tail and sending the bytes where `mode` says.
    pub(crate) async fn drain(
        self,
        mut stream: impl AsyncRead + Unpin,
        mode: StderrMode,
        plugin: String,
    ) {
        let mut buf = vec![0u8; 8 * 1024];
        let mut host_stderr = tokio::io::stderr();
        loop {
            let n = match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let lines = self.push(&buf[..n]);
            match mode {
                StderrMode::Log => {
                    for line in lines {
                        tracing::info!(target: "sandpipe::plugin", plugin = %plugin, "{line}");
                    }
                }
                StderrMode::Inherit => {
                    // The host's stderr going away must not stop the drain: the plugin would
                    // then block on a full pipe.
                    let _ = host_stderr.write_all(&buf[..n]).await;
                }
                StderrMode::Discard => {}
            }
        }
        let _ = host_stderr.flush().await;
    }
}

fn memchr_nl(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_last_lines_and_partial() {
        let tail = StderrTail::new(2);
        tail.push(b"one\ntwo\r\nthr");
        tail.push(b"ee\nfour");
        assert_eq!(tail.lines(), vec!["two", "three", "four"]);
        assert_eq!(tail.total_bytes(), 19);
    }

    #[test]
    fn long_lines_are_cut() {
        let tail = StderrTail::new(4);
        tail.push(&vec![b'x'; 10_000]);
        tail.push(b"\n");
        assert_eq!(tail.lines()[0].len(), MAX_LINE_BYTES);
    }
}
