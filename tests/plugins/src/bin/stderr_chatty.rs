//! Echo JSON Lines frames like `echo-lines`, but write 300 filler lines to stderr at start and
//! copy every frame to stderr before answering it, as an SDK with debug logging does: the host
//! must drain stderr or both sides stall.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   printf '{"id":1}\n' | sandpipe run --framing lines target/wasm32-wasip2/release/stderr-chatty.wasm

use sandpipe_guest::{Framing, serve};

fn main() {
    for i in 0..300 {
        eprintln!("filler line {i}");
    }
    let echoed = serve(Framing::JsonLines, |frame| {
        eprintln!("got frame: {}", String::from_utf8_lossy(&frame));
        Some(frame.to_vec())
    });
    if let Err(err) = echoed {
        eprintln!("stderr-chatty: {err}");
        sandpipe_guest::exit(2);
    }
}
