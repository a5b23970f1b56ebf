//! Echo every JSON Lines frame back unchanged until stdin closes.
//!
//! Build: cargo build --release -p sandpipe-example-echo --target wasm32-wasip2
//! Run:   printf '{"id":1}\n' | sandpipe run --framing lines target/wasm32-wasip2/release/echo-lines.wasm

use sandpipe_guest::{Framing, serve};

fn main() {
    if let Err(err) = serve(Framing::JsonLines, Some) {
        eprintln!("echo-lines: {err}");
        sandpipe_guest::exit(2);
    }
}
