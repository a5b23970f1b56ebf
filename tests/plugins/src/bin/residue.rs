//! Report what an earlier session left in this instance's linear memory, then leave marks.
//!
//! Prints one JSON line, `{"residue":[A,B]}`: the 64-bit words at two addresses deep in the
//! shadow stack (the first 1 MiB of a Rust wasm32 guest's memory, grown downwards from the
//! top, so a shallow program like this never uses its low end). Then it writes [`MARK`] at
//! both and exits 0. A fresh instance must print zeros, even one the pooling allocator gave a
//! slot an earlier `residue` wrote into; the host test runs it repeatedly in a pool of one.
//! Natively there is no such memory: it prints `{"residue":"native"}`.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/residue.wasm </dev/null

use sandpipe_guest::{Framing, Stdio};

/// What `residue` writes; a reader that sees it has memory from an earlier session.
pub const MARK: u64 = 0x5EC2_E75E_C2E7_5EC2;

/// Two addresses in the unused low end of the shadow stack.
#[cfg(target_family = "wasm")]
const PROBES: [usize; 2] = [4096, 32 * 1024];

#[cfg(target_family = "wasm")]
#[allow(unsafe_code)]
fn read_and_mark() -> String {
    let mut found = Vec::new();
    for addr in PROBES {
        let p = addr as *mut u64;
        // SAFETY: wasm32 linear memory is one flat, always-mapped byte array of at least
        // 17 pages for this guest; these addresses lie in the shadow stack's low end, which
        // no frame of this shallow program reaches, so nothing else reads or writes them.
        unsafe {
            found.push(std::ptr::read_volatile(p));
            std::ptr::write_volatile(p, MARK);
        }
    }
    let words: Vec<String> = found.iter().map(u64::to_string).collect();
    format!(r#"{{"residue":[{}]}}"#, words.join(","))
}

#[cfg(not(target_family = "wasm"))]
fn read_and_mark() -> String {
    r#"{"residue":"native"}"#.to_owned()
}

fn main() {
    let line = read_and_mark();
    let mut io = Stdio::new(Framing::JsonLines);
    if let Err(err) = io.send(line.as_bytes()) {
        eprintln!("residue: {err}");
        sandpipe_guest::exit(1);
    }
}
