//! Write JSON Lines frames `{"drip":0}`, `{"drip":1}`, … one byte per write, flushing each
//! byte and sleeping 100 ms between bytes (a slow link, or a plugin that dribbles on purpose).
//! argv[1] is how many frames to send before exiting 0 (default 2); `forever` never stops.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/drip.wasm 2 </dev/null

use std::io::{self, Write};
use std::thread::sleep;
use std::time::Duration;

const GAP: Duration = Duration::from_millis(100);

fn main() {
    let count = match std::env::args().nth(1).as_deref() {
        None => Some(2),
        Some("forever") => None,
        Some(n) => match n.parse::<u64>() {
            Ok(n) => Some(n),
            Err(err) => {
                eprintln!("drip: argv[1] must be a frame count or `forever`: {err}");
                sandpipe_guest::exit(2);
            }
        },
    };
    let mut out = io::stdout().lock();
    for i in 0u64.. {
        if count.is_some_and(|c| i >= c) {
            break;
        }
        for byte in format!("{{\"drip\":{i}}}\n").bytes() {
            if let Err(err) = out.write_all(&[byte]).and_then(|()| out.flush()) {
                eprintln!("drip: {err}");
                sandpipe_guest::exit(2);
            }
            sleep(GAP);
        }
    }
}
