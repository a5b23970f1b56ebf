//! Block without using the CPU and never write stdout: with argv[1] `sleep`, sleep for an
//! hour; otherwise read and discard frames from stdin, then sleep for an hour once stdin
//! closes. The host's wall-clock deadline has to stop it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/sleep-stdin.wasm sleep </dev/null

use std::thread::sleep;
use std::time::Duration;

use sandpipe_guest::{Framing, Stdio};

const HOUR: Duration = Duration::from_secs(60 * 60);

fn main() {
    eprintln!("sleeping");
    if std::env::args().nth(1).as_deref() != Some("sleep") {
        let mut io = Stdio::new(Framing::JsonLines);
        // EOF and bad frames alike end the reading, not the waiting.
        while let Ok(Some(_)) = io.recv() {}
    }
    sleep(HOUR);
}
