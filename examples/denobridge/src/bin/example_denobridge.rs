//! A terraform-provider-denobridge resource provider keeping its state as JSON files in a
//! preopened directory (`STATE_DIR [action]`; see the crate docs for what each method does).
//!
//! Build: cargo build --release -p sandpipe-example-denobridge --target wasm32-wasip2
//! Run:   mkdir -p /tmp/state && printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"health"}' '{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"name":"a"}}}' | sandpipe run --framing lines --dir /tmp/state::/state target/wasm32-wasip2/release/example-denobridge.wasm /state

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) =
        sandpipe_example_denobridge::main_with(&mut Stdio::new(Framing::JsonLines), &args)
    {
        eprintln!("example-denobridge: {err}");
        sandpipe_guest::exit(2);
    }
}
