//! Echo JSON Lines frames, and trap on request number argv[1] (1-based) instead of answering
//! it: a trap under wasm, SIGABRT natively. The load test picks that number per session with
//! a seeded RNG, so "trap at a random request" is the same on every run; every answer before
//! the trap must reach the host, and the other sessions must not notice.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   printf '{"a":1}\n{"b":2}\n' | sandpipe run --framing lines target/wasm32-wasip2/release/trap-at-request.wasm 2

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let trap_at = match std::env::args().nth(1).map(|arg| arg.parse::<u64>()) {
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("trap-at-request: argv[1] must be the request number (from 1) to trap on");
            sandpipe_guest::exit(2);
        }
    };
    let mut io = Stdio::new(Framing::JsonLines);
    let mut seen = 0u64;
    loop {
        let frame = match io.recv() {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(err) => {
                eprintln!("trap-at-request: {err}");
                sandpipe_guest::exit(2);
            }
        };
        seen += 1;
        if seen == trap_at {
            eprintln!("trap-at-request: trapping on request {seen}");
            std::process::abort();
        }
        if let Err(err) = io.send(&frame) {
            eprintln!("trap-at-request: {err}");
            sandpipe_guest::exit(2);
        }
    }
}
