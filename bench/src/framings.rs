//! Round trips and streaming throughput for each framing (the echo plugins of
//! `examples/echo`), and what fuel metering and epoch checks cost.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use sandpipe::{Host, HostOptions, Metering, Policy, SessionOptions, StderrMode};
use sandpipe_proto::frame::Framing;

use crate::measure::{Plan, Stats};
use crate::roundtrip::frame;

/// Every framing, with its echo plugin's binary name and the short name used in figure ids.
pub const FRAMINGS: [(Framing, &str); 3] = [
    (Framing::JsonLines, "echo-lines"),
    (Framing::CborSeq, "echo-cbor"),
    (Framing::ContentLength, "echo-content-length"),
];

/// The echo plugin `bin` next to the `echo-lines` build at `lines` (same target, same dir).
pub fn sibling(lines: &Path, bin: &str) -> PathBuf {
    let name = match lines.extension() {
        Some(ext) => format!("{bin}.{}", ext.to_string_lossy()),
        None => bin.to_owned(),
    };
    lines.with_file_name(name)
}

/// A frame of exactly `size` bytes that `framing` accepts: the JSON request of
/// [`frame`] for JSON Lines and Content-Length; for CBOR, a map holding an array of small maps
/// and a padding byte string, sized to the byte.
pub fn frame_for(framing: Framing, size: usize) -> anyhow::Result<Vec<u8>> {
    match framing {
        Framing::CborSeq => cbor_frame(size),
        _ => frame(size),
    }
}

fn cbor_frame(size: usize) -> anyhow::Result<Vec<u8>> {
    use ciborium::value::Value;
    let encode = |items: &[Value], pad: usize| -> anyhow::Result<Vec<u8>> {
        let v = Value::Map(vec![
            (Value::Text("id".into()), Value::Integer(1.into())),
            (Value::Text("items".into()), Value::Array(items.to_vec())),
            (Value::Text("pad".into()), Value::Bytes(vec![b'x'; pad])),
        ]);
        let mut out = Vec::new();
        ciborium::into_writer(&v, &mut out).context("encoding a CBOR bench frame")?;
        Ok(out)
    };
    let mut items = Vec::new();
    for i in 0u64.. {
        let item = Value::Map(vec![
            (Value::Text("k".into()), Value::Text(format!("k{i:05}"))),
            (
                Value::Text("v".into()),
                Value::Integer((i * 7919 % 100_000).into()),
            ),
            (Value::Text("ok".into()), Value::Bool(true)),
        ]);
        items.push(item);
        // Leave room for the padding string's header (at most 9 bytes) and then some.
        if encode(&items, 0)?.len() + 16 > size {
            items.pop();
            break;
        }
    }
    let bare = encode(&items, 0)?.len();
    // The padding header grows with its length: try the few lengths that could fit exactly.
    let room = size
        .checked_sub(bare)
        .with_context(|| format!("a {size} B CBOR frame is too small"))?;
    for header_growth in 0..=8 {
        if let Some(pad) = room.checked_sub(header_growth) {
            let out = encode(&items, pad)?;
            if out.len() == size {
                return Ok(out);
            }
        }
    }
    anyhow::bail!("could not build a CBOR frame of exactly {size} bytes")
}

fn options(framing: Framing) -> SessionOptions {
    SessionOptions::framed(framing).stderr(StderrMode::Discard)
}

/// Round trips on one session of `plugin` with `framing`.
pub async fn round_trips(
    plan: &Plan,
    host: &Host,
    plugin: &Path,
    framing: Framing,
    frame: &[u8],
) -> anyhow::Result<Stats> {
    crate::roundtrip::round_trips(plan, host, plugin, &options(framing), frame).await
}

/// Streaming throughput: how long `count` frames take to go out and come back when the
/// sender does not wait for each answer.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub frames: u64,
    pub bytes: u64,
    pub took: Duration,
}

/// Send `count` copies of `frame` from one task while this one receives the echoes.
pub async fn throughput(
    host: &Host,
    plugin: &Path,
    framing: Framing,
    frame: &[u8],
    count: u64,
) -> anyhow::Result<Throughput> {
    let plugin = host
        .load(plugin)
        .with_context(|| format!("loading {}", plugin.display()))?;
    let session = host
        .start(&plugin, &Policy::default(), &options(framing))
        .await?;
    let (mut writer, mut reader, control) = session.into_split();
    // One warm-up round trip, so start-up is not counted.
    writer.send(frame).await?;
    reader.recv().await?.context("no warm-up echo")?;
    let started = Instant::now();
    let out = frame.to_vec();
    let sender = tokio::spawn(async move {
        for _ in 0..count {
            writer.send(&out).await?;
        }
        writer.close().await;
        anyhow::Ok(())
    });
    let mut frames = 0u64;
    let mut bytes = 0u64;
    while let Some(echo) = reader.recv().await? {
        frames += 1;
        bytes += echo.len() as u64;
        if frames == count {
            break;
        }
    }
    let took = started.elapsed();
    sender.await.context("the sender task panicked")??;
    ensure!(frames == count, "received {frames} of {count} frames");
    ensure!(
        bytes == count * frame.len() as u64,
        "received {bytes} bytes, sent {}",
        count * frame.len() as u64
    );
    reader.discard_to_eof().await;
    let exit = control.wait_or_stop(Duration::from_secs(2)).await;
    ensure!(exit.success(), "plugin ended with {exit:?}");
    Ok(Throughput {
        frames,
        bytes,
        took,
    })
}

/// The four engine configurations whose round trips show what fuel and epochs cost.
pub const METERINGS: [(&str, bool, bool); 4] = [
    ("all", true, true),
    ("no-fuel", false, true),
    ("no-epochs", true, false),
    ("none", false, false),
];

/// A host (no disk cache) with fuel and epochs as given.
pub fn metered_host(fuel: bool, epochs: bool) -> anyhow::Result<Host> {
    Ok(Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .metering(Metering::all().fuel(fuel).epochs(epochs)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cbor_frames_have_the_exact_size_and_are_one_item() {
        for size in [100, 1000, 64 * 1024] {
            let f = cbor_frame(size).expect("frame builds");
            assert_eq!(f.len(), size);
            let mut rest: &[u8] = &f;
            let _: ciborium::value::Value = ciborium::from_reader(&mut rest).expect("cbor");
            assert!(rest.is_empty(), "one item, nothing after it");
        }
    }

    #[test]
    fn siblings_keep_the_directory_and_extension() {
        let wasm = Path::new("/p/wasm32-wasip2/release/echo-lines.wasm");
        assert_eq!(
            sibling(wasm, "echo-cbor"),
            Path::new("/p/wasm32-wasip2/release/echo-cbor.wasm")
        );
        let native = Path::new("/p/release/echo-lines");
        assert_eq!(
            sibling(native, "echo-cbor"),
            Path::new("/p/release/echo-cbor")
        );
    }
}
