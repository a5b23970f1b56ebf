//! A FineCode extension runner with `lint` (streams), `config_summary` (asks the manager for
//! the raw config) and `broken` (fails at the command level).
//!
//! Build: cargo build --release -p sandpipe-example-finecode --target wasm32-wasip2
//! Run:   sandpipe call --protocol finecode --method actions/run --params '{"actionName":"lint","params":{"files":["a.py"]}}' target/wasm32-wasip2/release/example-finecode.wasm

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) =
        sandpipe_example_finecode::main_with(&mut Stdio::new(Framing::ContentLength), &args)
    {
        eprintln!("example-finecode: {err}");
        sandpipe_guest::exit(2);
    }
}
