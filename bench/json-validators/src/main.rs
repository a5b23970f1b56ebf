//! JSON validators compared on the frame shapes sandpipe carries: proto's own
//! (`json_check`, compiled in from its source), serde_json, simd-json, sonic-rs, and the
//! `simdutf8` and `memchr` floors. Outside the workspace (own `[workspace]` and lock file) so
//! that neither simd-json nor sonic-rs is built by `cargo test`.
//!
//! ```sh
//! cd bench/json-validators
//! cargo run --release                  # GB/s, best of 5 runs per cell
//! cargo run --release -- semantics     # edge cases each validator accepts or refuses
//! cargo build --release && valgrind --tool=callgrind --toggle-collect='json_validators::v_proto*' \
//!     target/release/json-validators once "rpc 64 KiB" proto 10   # instructions per byte
//! ```
#![allow(dead_code)]
use std::hint::black_box;
use std::time::Instant;

#[path = "../../../proto/src/frame/json_check.rs"]
mod json_check;

fn rpc(size: usize) -> Vec<u8> {
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"items":["#;
    let tail_open = r#"],"pad":""#;
    let tail = r#""}}"#;
    let mut out = String::from(head);
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

/// Many small strings: an object of short keys and short values.
fn small_strings(size: usize) -> Vec<u8> {
    let mut out = String::from("{");
    let mut i = 0u64;
    while out.len() + 24 < size {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(r#""f{}":"v{}""#, i % 1000, (i * 31) % 10000));
        i += 1;
    }
    out.push_str(r#","end":"x"}"#);
    out.into_bytes()
}

/// Long strings: text with a few escapes and some non-ASCII, as in a document or a log.
fn long_strings(size: usize) -> Vec<u8> {
    let para =
        "The quick brown fox jumps over the lazy dog; caf\u{e9} \u{20ac}5. \\\"quoted\\\" line\\n";
    let mut out = String::from(r#"{"jsonrpc":"2.0","id":7,"result":{"text":""#);
    while out.len() + para.len() + 4 < size {
        out.push_str(para);
    }
    out.push_str("\"}}");
    out.into_bytes()
}

/// Numbers: an array of integers and floats.
fn numbers(size: usize) -> Vec<u8> {
    let mut out = String::from("[");
    let mut i = 0u64;
    while out.len() + 24 < size {
        if i > 0 {
            out.push(',');
        }
        match i % 3 {
            0 => out.push_str(&format!("{}", i * 7919 % 1_000_003)),
            1 => out.push_str(&format!("-{}.{}", i % 977, i * 13 % 1000)),
            _ => out.push_str(&format!("{}.{}e-{}", i % 9 + 1, i % 100, i % 20)),
        }
        i += 1;
    }
    out.push(']');
    out.into_bytes()
}

type V = fn(&[u8]) -> bool;

fn v_proto(b: &[u8]) -> bool {
    json_check::validate(b).is_ok()
}
fn v_serde(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok())
}
fn v_simd_json(b: &[u8]) -> bool {
    let mut copy = b.to_vec();
    simd_json::to_tape(&mut copy).is_ok()
}
fn v_sonic(b: &[u8]) -> bool {
    sonic_rs::from_slice::<serde::de::IgnoredAny>(b).is_ok()
}
fn v_simdutf8(b: &[u8]) -> bool {
    simdutf8::basic::from_utf8(b).is_ok()
}
fn v_memchr(b: &[u8]) -> bool {
    memchr::memchr(0, b).is_none()
}

const VALIDATORS: &[(&str, V)] = &[
    ("proto json_check", v_proto),
    ("serde_json IgnoredAny", v_serde),
    ("simd-json to_tape (on a copy)", v_simd_json),
    ("sonic-rs IgnoredAny", v_sonic),
    ("simdutf8 alone (floor)", v_simdutf8),
    ("memchr alone (floor)", v_memchr),
];

fn shapes() -> Vec<(String, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for (name, make) in [
        ("rpc", rpc as fn(usize) -> Vec<u8>),
        ("small-strings", small_strings),
        ("long-strings", long_strings),
        ("numbers", numbers),
    ] {
        // 100 B: ~10k distinct frames of 90-109 B; 64 KiB: one frame.
        let small: Vec<Vec<u8>> = (0..10_000).map(|i| make(90 + i % 20)).collect();
        out.push((format!("{name} 100 B"), small));
        out.push((format!("{name} 64 KiB"), vec![make(64 << 10)]));
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let shapes = shapes();
    for (name, frames) in &shapes {
        for f in frames.iter().take(3) {
            assert!(v_serde(f), "{name} invalid");
        }
    }
    if args.get(1).map(String::as_str) == Some("semantics") {
        // Inputs serde_json accepts (and so JSON Lines must), or rejects, that a validator
        // might judge otherwise.
        let cases: &[&[u8]] = &[
            b"\"\\ud800\"",
            b"\"\\udc00\\ud800\"",
            b"1e999999999999",
            b"123456789012345678901234567890",
            b"-0.0000000000000000000000000000001e-400",
            b"[1,2] ",
            b"\"\x7f\"",
            b"\"\x1f\"",
            b"[1,]",
            b"01",
        ];
        for case in cases {
            let verdicts: Vec<String> = VALIDATORS[..4]
                .iter()
                .map(|(n, v)| format!("{n}={}", v(case)))
                .collect();
            println!(
                "{:<45} {}",
                case.escape_ascii().to_string(),
                verdicts.join(" ")
            );
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("once") {
        // For callgrind: one validator over one shape, `reps` passes.
        let shape = &args[2];
        let which = &args[3];
        let reps: usize = args[4].parse().unwrap();
        let frames = &shapes.iter().find(|(n, _)| n == shape).unwrap().1;
        let v = VALIDATORS
            .iter()
            .find(|(n, _)| n.starts_with(which.as_str()))
            .unwrap()
            .1;
        let bytes: usize = frames.iter().map(Vec::len).sum();
        let mut ok = 0;
        for _ in 0..reps {
            for f in frames {
                ok += v(black_box(f)) as usize;
            }
        }
        println!("{shape} {which} reps={reps} bytes_per_rep={bytes} ok={ok}");
        return;
    }
    let runs: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    println!(
        "| shape | {} |",
        VALIDATORS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|{}", "---:|".repeat(VALIDATORS.len()));
    for (name, frames) in &shapes {
        let bytes: usize = frames.iter().map(Vec::len).sum();
        let mut row = format!("| {name} |");
        for (_, v) in VALIDATORS {
            let mut best = f64::MAX;
            for _ in 0..runs {
                let reps = (4 << 20) / bytes + 1;
                let t = Instant::now();
                for _ in 0..reps {
                    for f in frames {
                        assert!(v(black_box(f)));
                    }
                }
                best = best.min(t.elapsed().as_secs_f64() / (reps * bytes) as f64);
            }
            row.push_str(&format!(" {:.2} |", 1e-9 / best));
        }
        println!("{row}");
    }
}
