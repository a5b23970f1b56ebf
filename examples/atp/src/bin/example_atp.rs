//! An example Arcaflow plugin with `greet` and `wait` steps (see the library docs).
//!
//! Build: cargo build --release -p sandpipe-example-atp --target wasm32-wasip2
//! Run:   sandpipe call --protocol atp --method greet --params '{"name": "Ada"}' \
//!            target/wasm32-wasip2/release/example-atp.wasm
//! v1:    sandpipe run target/wasm32-wasip2/release/example-atp.wasm --v1

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) = sandpipe_example_atp::main_with(&mut Stdio::new(Framing::CborSeq), &args) {
        eprintln!("example-atp: {err}");
        sandpipe_guest::exit(2);
    }
}
