//! An example Cairo oracle with `sqrt`, `add` and `fail` selectors (see the library docs).
//!
//! Build: cargo build --release -p sandpipe-example-oracle --target wasm32-wasip2
//! Run:   sandpipe call --protocol oracle --method sqrt --params '["0x10"]' target/wasm32-wasip2/release/example-oracle.wasm

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) = sandpipe_example_oracle::main_with(&mut Stdio::new(Framing::JsonLines), &args)
    {
        eprintln!("example-oracle: {err}");
        sandpipe_guest::exit(2);
    }
}
