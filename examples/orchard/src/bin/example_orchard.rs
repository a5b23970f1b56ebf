//! An Orchard provider with `echo` and `sum` actions; `example-orchard schema` prints its schema.
//!
//! Build: cargo build --release -p sandpipe-example-orchard --target wasm32-wasip2
//! Run:   sandpipe call --protocol orchard --method execute --params '{"action":"sum","attrs":{"values":[1,2]}}' target/wasm32-wasip2/release/example-orchard.wasm
//! Plan:  sandpipe run target/wasm32-wasip2/release/example-orchard.wasm schema

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) =
        sandpipe_example_orchard::main_with(&mut Stdio::new(Framing::JsonLines), &args)
    {
        eprintln!("example-orchard: {err}");
        sandpipe_guest::exit(2);
    }
}
