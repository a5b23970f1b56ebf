//! Echo every `Content-Length` (LSP base protocol) frame back unchanged until stdin closes.
//!
//! Build: cargo build --release -p sandpipe-example-echo --target wasm32-wasip2
//! Run:   printf 'Content-Length: 8\r\n\r\n{"id":1}' | sandpipe run --framing content-length target/wasm32-wasip2/release/echo-content-length.wasm

use sandpipe_guest::{Framing, serve};

fn main() {
    if let Err(err) = serve(Framing::ContentLength, Some) {
        eprintln!("echo-content-length: {err}");
        sandpipe_guest::exit(2);
    }
}
