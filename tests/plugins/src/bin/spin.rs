//! Send one frame, then spin forever in pure computation, making no host calls: the host's
//! fuel or epoch deadline has to stop it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/spin.wasm </dev/null

use std::hint::black_box;

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let mut io = Stdio::new(Framing::JsonLines);
    if let Err(err) = io.send(br#"{"spinning":true}"#) {
        eprintln!("spin: {err}");
        sandpipe_guest::exit(2);
    }
    let mut n: u64 = 0;
    loop {
        // black_box keeps the optimizer from proving the loop useless and deleting it.
        n = black_box(n.wrapping_add(1));
    }
}
