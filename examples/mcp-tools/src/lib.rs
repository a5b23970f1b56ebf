//! An example component whose exported functions sandpipe serves as MCP tools (see
//! `wit/tools.wit`): a WASI 0.2 component without `wasi:cli/run`.
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2 -p sandpipe-example-mcp-tools
//! T=target/wasm32-wasip2/release/sandpipe_example_mcp_tools.wasm
//! sandpipe inspect --protocol mcp $T                    # the tools with their input schemas
//! sandpipe call --protocol mcp --method tools/call --params '{"name":"add","arguments":{"a":1,"b":2}}' $T
//! sandpipe run --protocol mcp --fuel-per-request 100000000 --request-timeout 2s --restart $T
//! ```
//!
//! Besides plain functions taking records, enums, options and floats it has a stateful
//! counter, a function that fails with an error value, one that traps, an endless loop and a
//! sleep, so every per-call limit can be shown.

// The bindings wit-bindgen generates are unsafe canonical-ABI glue; this file writes no
// unsafe code of its own.
#![allow(unsafe_code)]

wit_bindgen::generate!({ world: "tools", path: "wit" });

use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Debug)]
struct Tools;

fn kelvin(degrees: f64, unit: Unit) -> f64 {
    match unit {
        Unit::Celsius => degrees + 273.15,
        Unit::Fahrenheit => (degrees - 32.0) * 5.0 / 9.0 + 273.15,
        Unit::Kelvin => degrees,
    }
}

impl Guest for Tools {
    fn add(a: i64, b: i64) -> i64 {
        a.wrapping_add(b)
    }

    fn greet(name: String, title: Option<String>) -> String {
        match title {
            Some(t) => format!("Hello, {t} {name}!"),
            None => format!("Hello, {name}!"),
        }
    }

    fn distance(a: Point, b: Point) -> f64 {
        (a.x - b.x).hypot(a.y - b.y)
    }

    fn convert(degrees: f64, from: Unit, to: Unit) -> f64 {
        let k = kelvin(degrees, from);
        match to {
            Unit::Celsius => k - 273.15,
            Unit::Fahrenheit => (k - 273.15) * 9.0 / 5.0 + 32.0,
            Unit::Kelvin => k,
        }
    }

    fn divide(a: f64, b: f64) -> Result<f64, String> {
        if b == 0.0 {
            Err(format!("cannot divide {a} by zero"))
        } else {
            Ok(a / b)
        }
    }

    fn count() -> u64 {
        COUNTER.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn crash(msg: String) -> u64 {
        eprintln!("about to crash: {msg}");
        panic!("crashed on purpose: {msg}");
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
}

export!(Tools);
