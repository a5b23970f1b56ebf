//! Echo every CBOR sequence (RFC 8742) frame back unchanged until stdin closes.
//!
//! Build: cargo build --release -p sandpipe-example-echo --target wasm32-wasip2
//! Run:   printf '\xa1\x62id\x01' | sandpipe run --framing cbor target/wasm32-wasip2/release/echo-cbor.wasm | xxd

use sandpipe_guest::{Framing, serve};

fn main() {
    if let Err(err) = serve(Framing::CborSeq, Some) {
        eprintln!("echo-cbor: {err}");
        sandpipe_guest::exit(2);
    }
}
