//! Never read stdin; write valid JSON Lines frames `{"n":<counter>,"pad":"xxx…"}` to stdout
//! as fast as possible, forever: the host's output limits have to stop it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/flood.wasm </dev/null | head -3

use std::io::{self, BufWriter, Write};

fn main() {
    let pad = "x".repeat(100);
    // Buffered, not flushed per frame: the point is volume, and frames may straddle writes.
    let mut out = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    for n in 0u64.. {
        if let Err(err) = writeln!(out, r#"{{"n":{n},"pad":"{pad}"}}"#) {
            // The host closed stdout: nobody is listening any more.
            eprintln!("flood: {err}");
            sandpipe_guest::exit(2);
        }
    }
}
