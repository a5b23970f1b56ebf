//! Send `{"recursing":true}`, then recurse without end. With argv[1] `frames` (the default)
//! each call keeps its state in wasm locals, so the engine's own call stack runs out; with
//! `locals` each call holds a 16 KiB array in memory, so a wasm guest exhausts the shadow
//! stack in linear memory instead. Natively both hit the guard page below the main stack.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/stack-overflow.wasm frames </dev/null

use std::hint::black_box;

use sandpipe_guest::{Framing, Stdio};

/// Small frames: the depth lives in a wasm local, the result is used after the call, so the
/// recursion can be neither unrolled into a loop nor turned into a tail call.
fn deep(n: u64) -> u64 {
    if black_box(n) == u64::MAX {
        return n;
    }
    let below = deep(n + 1);
    black_box(below).wrapping_add(1)
}

/// Large frames: an address-taken array lives on the (shadow) stack in memory.
fn wide(n: u64) -> u64 {
    let mut buf = [0u8; 16 * 1024];
    buf[0] = n as u8;
    black_box(&mut buf);
    if black_box(n) == u64::MAX {
        return n;
    }
    let below = wide(n + 1);
    black_box(&buf);
    below.wrapping_add(u64::from(buf[1]))
}

fn main() {
    let how = std::env::args().nth(1).unwrap_or_else(|| "frames".into());
    if let Err(err) = Stdio::new(Framing::JsonLines).send(br#"{"recursing":true}"#) {
        eprintln!("stack-overflow: {err}");
        sandpipe_guest::exit(2);
    }
    eprintln!("stack-overflow: recursing ({how})");
    let depth = match how.as_str() {
        "frames" => deep(0),
        "locals" => wide(0),
        other => {
            eprintln!("stack-overflow: argv[1] must be frames or locals, not {other:?}");
            sandpipe_guest::exit(2);
        }
    };
    // Unreachable in practice: printing the result keeps the recursion observable.
    println!("{{\"depth\":{depth}}}");
}
