//! Decode throughput of each framer, against `memchr` and a full parser on the same bytes.
//!
//! ```sh
//! cargo bench -p sandpipe-proto --bench framers               # all groups, ~2 minutes
//! cargo bench -p sandpipe-proto --bench framers -- lines/      # one framer
//! ```
//!
//! Each group decodes one input and reports bytes per second:
//! - `stream-100B`: about 1 MiB of ~100 B frames in one buffer (many frames per read);
//! - `frame-1MiB/whole`: one 1 MiB frame in one buffer;
//! - `frame-1MiB/chunks-4KiB`: the same frame arriving 4 KiB at a time, `decode` called after
//!   each chunk as a session does (a framer that rescans would be quadratic here), into a
//!   buffer that grows as it fills; `chunks-4KiB-presized` into one with room for the frame;
//! - `memchr`: counting `\n` in the same bytes (the floor for finding line ends);
//! - `serde_json`/`ciborium`: parsing the same frames (what the layer above pays anyway).
//!
//! JSON Lines is measured with JSON validation on (the default) and off.
//!
//! The `lines/rpc-*` and `cbor/rpc-*` groups measure the frames of the round-trip bench
//! (`bench/src/roundtrip.rs::frame`, `bench/src/framings.rs::cbor_frame`, copied below) at
//! 100 B and 64 KiB, about 1 MiB of them, in GB/s: `check` is the validator alone
//! (`JsonLines::check_frame`, `CborSeq::check_frame`) called on each frame, `framer` decodes
//! the whole stream in one buffer.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sandpipe_proto::frame::{
    BytesMut, CborSeq, ContentLength, FrameLimits, Framer, Framing, JsonLines,
};
use serde::de::IgnoredAny;

const STREAM_BYTES: usize = 1 << 20;
const BIG: usize = 1 << 20;
const CHUNK: usize = 4 << 10;

/// One JSON value of exactly `size` bytes, shaped like a JSON-RPC request: many small objects
/// (so parsers do real work), then a padding string.
fn json_value(size: usize) -> Vec<u8> {
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"items":["#;
    let tail_open = r#"],"pad":""#;
    let tail = r#""}}"#;
    let mut out = String::with_capacity(size);
    out.push_str(head);
    let mut i = 0u64;
    loop {
        let item = format!(
            r#"{}{{"k":"k{i}","v":{},"ok":true}}"#,
            if i == 0 { "" } else { "," },
            i * 7919 % 100_000
        );
        if out.len() + item.len() + tail_open.len() + tail.len() > size {
            break;
        }
        out.push_str(&item);
        i += 1;
    }
    out.push_str(tail_open);
    let pad = size.saturating_sub(out.len() + tail.len());
    out.extend(std::iter::repeat_n('x', pad));
    out.push_str(tail);
    out.into_bytes()
}

/// The JSON-RPC request of exactly `size` bytes the round-trip bench sends: objects of ~40
/// bytes while they fit, then a padding string. The same code as
/// `bench/src/roundtrip.rs::frame`, without its `anyhow` errors.
fn rpc_json(size: usize) -> Vec<u8> {
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
    let pad = size - (out.len() + TAIL.len());
    out.extend(std::iter::repeat_n('x', pad));
    out.push_str(TAIL);
    assert_eq!(out.len(), size);
    out.into_bytes()
}

/// The CBOR frame of exactly `size` bytes the round-trip bench sends: a map holding an array
/// of small maps and a padding byte string. The same code as
/// `bench/src/framings.rs::cbor_frame`, without its `anyhow` errors.
fn rpc_cbor(size: usize) -> Vec<u8> {
    use ciborium::value::Value;
    let encode = |items: &[Value], pad: usize| -> Vec<u8> {
        let v = Value::Map(vec![
            (Value::Text("id".into()), Value::Integer(1.into())),
            (Value::Text("items".into()), Value::Array(items.to_vec())),
            (Value::Text("pad".into()), Value::Bytes(vec![b'x'; pad])),
        ]);
        let mut out = Vec::new();
        ciborium::into_writer(&v, &mut out).expect("cbor encodes");
        out
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
        if encode(&items, 0).len() + 16 > size {
            items.pop();
            break;
        }
    }
    let room = size - encode(&items, 0).len();
    (0..=8)
        .filter_map(|growth| room.checked_sub(growth))
        .map(|pad| encode(&items, pad))
        .find(|out| out.len() == size)
        .expect("a CBOR frame of exactly the size")
}

/// The round-trip bench's frames at 100 B and 64 KiB, each repeated to about `STREAM_BYTES`:
/// the validator alone on each frame, and the framer on the stream.
fn rpc(c: &mut Criterion) {
    for size in [100, 64 << 10] {
        let name = if size == 100 { "100B" } else { "64KiB" };
        let count = STREAM_BYTES.div_ceil(size);
        let bytes = (count * size) as u64;

        let json = rpc_json(size);
        let frames = vec![json.clone(); count];
        let stream = wire(Framing::JsonLines, &frames);
        let mut g = c.benchmark_group(format!("lines/rpc-{name}"));
        g.throughput(Throughput::BytesDecimal(bytes));
        g.bench_function("check", |b| {
            b.iter(|| {
                for _ in 0..count {
                    JsonLines::check_frame(black_box(&json)).expect("valid bench frame");
                }
            })
        });
        g.bench_function("framer", |b| {
            b.iter(|| decode_whole(JsonLines::new(limits()), &stream))
        });
        g.finish();

        let cbor = rpc_cbor(size);
        let frames = vec![cbor.clone(); count];
        let stream = frames.concat();
        let checker = CborSeq::new(limits());
        let mut g = c.benchmark_group(format!("cbor/rpc-{name}"));
        g.throughput(Throughput::BytesDecimal(bytes));
        g.bench_function("check", |b| {
            b.iter(|| {
                for _ in 0..count {
                    checker
                        .check_frame(black_box(&cbor))
                        .expect("valid bench frame");
                }
            })
        });
        g.bench_function("framer", |b| {
            b.iter(|| decode_whole(CborSeq::new(limits()), &stream))
        });
        g.finish();
    }
}

fn limits() -> FrameLimits {
    FrameLimits::with_max_frame_bytes(4 << 20)
}

/// Encode `frames` with `framing` into one wire buffer.
fn wire(framing: Framing, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut framer = framing.framer(limits());
    let mut out = BytesMut::new();
    for f in frames {
        framer.encode(f, &mut out).expect("bench frames encode");
    }
    out.to_vec()
}

/// Small frames filling about `STREAM_BYTES`.
fn small_frames(make: impl Fn(u64) -> Vec<u8>) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < STREAM_BYTES {
        let f = make(i);
        total += f.len();
        frames.push(f);
        i += 1;
    }
    frames
}

/// A CBOR map of about `size` bytes: many small entries, like an ATP message.
fn cbor_value(approx: usize) -> Vec<u8> {
    use ciborium::value::Value;
    let mut entries = Vec::new();
    let mut len = 0;
    let mut i = 0u64;
    while len < approx {
        let v = Value::Map(vec![
            (Value::Text("k".into()), Value::Text(format!("k{i}"))),
            (
                Value::Text("v".into()),
                Value::Integer((i * 7919 % 100_000).into()),
            ),
            (Value::Text("ok".into()), Value::Bool(true)),
        ]);
        entries.push(v);
        len += 20;
        i += 1;
    }
    let value = Value::Map(vec![
        (Value::Text("id".into()), Value::Integer(1.into())),
        (Value::Text("items".into()), Value::Array(entries)),
    ]);
    let mut out = Vec::new();
    ciborium::into_writer(&value, &mut out).expect("cbor encodes");
    out
}

/// Decode every frame of `wire` held in one buffer; returns the frame count.
fn decode_whole(mut framer: impl Framer, wire: &[u8]) -> usize {
    let mut buf = BytesMut::from(wire);
    let mut n = 0;
    while let Some(frame) = framer.decode(&mut buf).expect("valid bench input") {
        black_box(&frame);
        n += 1;
    }
    n
}

/// Feed `wire` in `CHUNK`-byte pieces, decoding after each, as a session reading a pipe does.
/// `presized` gives the buffer room for all of `wire` up front, so the figure shows the
/// framer's own cost without the buffer's reallocations as it grows.
fn decode_chunked(mut framer: impl Framer, wire: &[u8], presized: bool) -> usize {
    let mut buf = BytesMut::with_capacity(if presized { wire.len() } else { CHUNK * 2 });
    let mut n = 0;
    for piece in wire.chunks(CHUNK) {
        buf.extend_from_slice(piece);
        while let Some(frame) = framer.decode(&mut buf).expect("valid bench input") {
            black_box(&frame);
            n += 1;
        }
    }
    n
}

fn memchr_count(wire: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', wire).count()
}

fn json_lines(c: &mut Criterion) {
    let small = small_frames(|i| json_value(90 + (i % 20) as usize));
    let stream = wire(Framing::JsonLines, &small);
    let big = wire(Framing::JsonLines, &[json_value(BIG)]);
    let lines = |validate: bool| {
        let f = JsonLines::new(limits());
        if validate {
            f
        } else {
            f.without_json_validation()
        }
    };
    for (name, input) in [("stream-100B", &stream), ("frame-1MiB", &big)] {
        let mut g = c.benchmark_group(format!("lines/{name}"));
        g.throughput(Throughput::Bytes(input.len() as u64));
        for validate in [true, false] {
            let v = if validate { "validated" } else { "unvalidated" };
            g.bench_function(BenchmarkId::new("whole", v), |b| {
                b.iter(|| decode_whole(lines(validate), input))
            });
            if name == "frame-1MiB" {
                g.bench_function(BenchmarkId::new("chunks-4KiB", v), |b| {
                    b.iter(|| decode_chunked(lines(validate), input, false))
                });
                g.bench_function(BenchmarkId::new("chunks-4KiB-presized", v), |b| {
                    b.iter(|| decode_chunked(lines(validate), input, true))
                });
            }
        }
        g.bench_function("memchr", |b| b.iter(|| memchr_count(black_box(input))));
        g.bench_function("serde_json-ignored", |b| {
            b.iter(|| {
                for line in input.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    black_box(serde_json::from_slice::<IgnoredAny>(line).expect("json"));
                }
            })
        });
        g.bench_function("serde_json-value", |b| {
            b.iter(|| {
                for line in input.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    black_box(serde_json::from_slice::<serde_json::Value>(line).expect("json"));
                }
            })
        });
        g.finish();
    }
}

fn cbor_seq(c: &mut Criterion) {
    let small = small_frames(|i| cbor_value(80 + (i % 20) as usize));
    let stream: Vec<u8> = small.concat();
    let big = cbor_value(BIG);
    for (name, input) in [("stream-100B", &stream), ("frame-1MiB", &big)] {
        let mut g = c.benchmark_group(format!("cbor/{name}"));
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_function("whole", |b| {
            b.iter(|| decode_whole(CborSeq::new(limits()), input))
        });
        if name == "frame-1MiB" {
            g.bench_function("chunks-4KiB", |b| {
                b.iter(|| decode_chunked(CborSeq::new(limits()), input, false))
            });
            g.bench_function("chunks-4KiB-presized", |b| {
                b.iter(|| decode_chunked(CborSeq::new(limits()), input, true))
            });
        }
        g.bench_function("memchr", |b| b.iter(|| memchr_count(black_box(input))));
        g.bench_function("ciborium-value", |b| {
            b.iter(|| {
                let mut rest: &[u8] = input;
                while !rest.is_empty() {
                    let v: ciborium::value::Value = ciborium::from_reader(&mut rest).expect("cbor");
                    black_box(v);
                }
            })
        });
        g.finish();
    }
}

fn content_length(c: &mut Criterion) {
    let small_bodies = small_frames(|i| json_value(90 + (i % 20) as usize));
    let stream = wire(Framing::ContentLength, &small_bodies);
    let big_body = json_value(BIG);
    let big = wire(Framing::ContentLength, std::slice::from_ref(&big_body));
    for (name, input, bodies) in [
        ("stream-100B", &stream, &small_bodies[..]),
        ("frame-1MiB", &big, std::slice::from_ref(&big_body)),
    ] {
        let mut g = c.benchmark_group(format!("content-length/{name}"));
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_function("whole", |b| {
            b.iter(|| decode_whole(ContentLength::new(limits()), input))
        });
        if name == "frame-1MiB" {
            g.bench_function("chunks-4KiB", |b| {
                b.iter(|| decode_chunked(ContentLength::new(limits()), input, false))
            });
            g.bench_function("chunks-4KiB-presized", |b| {
                b.iter(|| decode_chunked(ContentLength::new(limits()), input, true))
            });
        }
        g.bench_function("memchr", |b| b.iter(|| memchr_count(black_box(input))));
        g.bench_function("serde_json-ignored", |b| {
            b.iter(|| {
                for body in bodies {
                    black_box(serde_json::from_slice::<IgnoredAny>(body).expect("json"));
                }
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = rpc, json_lines, cbor_seq, content_length
}
criterion_main!(benches);
