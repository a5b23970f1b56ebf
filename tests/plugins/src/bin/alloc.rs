//! Allocate memory forever, 1 MiB at a time, touching every page, and report every 16 MiB on
//! stderr: the host's memory cap has to stop it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/alloc.wasm </dev/null

use std::hint::black_box;

const MIB: usize = 1 << 20;

fn main() {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        // A non-zero fill writes every page, so the memory is really committed.
        held.push(black_box(vec![0xa5; MIB]));
        if held.len().is_multiple_of(16) {
            eprintln!("allocated {} MiB", held.len());
        }
    }
}
