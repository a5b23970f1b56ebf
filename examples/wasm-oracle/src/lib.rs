//! An example Cairo `wasm:` oracle: a WASI 0.2 component that exports functions (see
//! `wit/oracle.wit`) instead of `wasi:cli/run`.
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2 -p sandpipe-example-wasm-oracle
//! W=target/wasm32-wasip2/release/sandpipe_example_wasm_oracle.wasm
//! sandpipe inspect --protocol oracle $W                     # selectors and WIT signatures
//! sandpipe call --protocol oracle --method add --params '["0x1","0x2"]' $W     # ["0x3"]
//! ```
//!
//! Besides plain functions it has a stateful counter, a function that fails with an error
//! value, one that traps, an endless loop, a sleep, an allocator, a hoard that grows per call, and probes of the file
//! system, the network and the environment, so every limit of the sandbox can be shown.

// The bindings wit-bindgen generates are unsafe canonical-ABI glue; this file writes no
// unsafe code of its own.
#![allow(unsafe_code)]

wit_bindgen::generate!({ world: "oracle", path: "wit" });

use std::sync::atomic::{AtomicU64, Ordering};

use exports::sandpipe::wasm_oracle::{math, words};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// What `hoard` keeps: it only grows, as a guest heap that leaks per request does.
static HOARD: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

#[derive(Debug)]
struct Oracle;

impl Guest for Oracle {
    fn add(a: u64, b: u64) -> u64 {
        a.wrapping_add(b)
    }

    fn neg(x: i32) -> i32 {
        x.wrapping_neg()
    }

    fn join(a: String, b: String) -> String {
        a + &b
    }

    fn sum(xs: Vec<u64>) -> u64 {
        xs.iter().fold(0u64, |acc, x| acc.wrapping_add(*x))
    }

    fn split(s: String) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    fn first_char(s: String) -> Option<char> {
        s.chars().next()
    }

    fn safe_div(a: u64, b: u64) -> Result<u64, String> {
        a.checked_div(b)
            .ok_or_else(|| format!("cannot divide {a} by zero"))
    }

    fn count() -> u64 {
        COUNTER.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn trap(msg: String) -> u64 {
        eprintln!("about to trap: {msg}");
        panic!("trapped on purpose: {msg}");
    }

    fn spin() -> u64 {
        eprintln!("spinning forever");
        let mut i = 0u64;
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }

    fn sleep(ms: u64) -> u64 {
        eprintln!("sleeping {ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(ms));
        ms
    }

    fn grow(mib: u32) -> u32 {
        eprintln!("allocating {mib} MiB");
        let mut kept: Vec<Vec<u8>> = Vec::new();
        for _ in 0..mib {
            kept.push(vec![1u8; 1 << 20]);
        }
        kept.len() as u32
    }

    fn hoard(mib: u32) -> u32 {
        let mut kept = HOARD.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..mib {
            kept.push(vec![1u8; 1 << 20]);
        }
        kept.len() as u32
    }

    fn read_file(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))
    }

    fn connect(addr: String) -> Result<String, String> {
        std::net::TcpStream::connect(&addr)
            .map(|_| format!("connected to {addr}"))
            .map_err(|e| format!("connecting to {addr}: {e}"))
    }

    fn env(name: String) -> Option<String> {
        std::env::var(name).ok()
    }

    fn log(msg: String) -> u32 {
        println!("stdout: {msg}");
        eprintln!("stderr: {msg}");
        msg.len() as u32
    }

    fn half(x: f64) -> f64 {
        x / 2.0
    }
}

impl math::Guest for Oracle {
    fn mul(a: i64, b: i64) -> i64 {
        a.wrapping_mul(b)
    }

    fn pick(items: Vec<u32>, index: u32) -> Option<u32> {
        items.get(index as usize).copied()
    }
}

impl words::Guest for Oracle {
    fn pick(items: Vec<String>, index: u32) -> Option<String> {
        items.get(index as usize).cloned()
    }
}

export!(Oracle);
