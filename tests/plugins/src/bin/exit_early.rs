//! Read one frame, send it back, then exit with code argv[1] (default 3) without reading
//! more: the host must report the exit code and the frame it got.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   printf '{"a":1}\n{"b":2}\n' | sandpipe run --framing lines target/wasm32-wasip2/release/exit-early.wasm 7

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let code = match std::env::args().nth(1).map(|arg| arg.parse::<u8>()) {
        None => 3,
        Some(Ok(code)) => code,
        Some(Err(err)) => {
            eprintln!("exit-early: argv[1] must be an exit code 0..=255: {err}");
            sandpipe_guest::exit(2);
        }
    };
    let mut io = Stdio::new(Framing::JsonLines);
    let echoed = match io.recv() {
        Ok(Some(frame)) => io.send(&frame),
        Ok(None) => Ok(()),
        Err(err) => Err(err),
    };
    if let Err(err) = echoed {
        eprintln!("exit-early: {err}");
    }
    eprintln!("exit-early: leaving with code {code}");
    sandpipe_guest::exit(code);
}
