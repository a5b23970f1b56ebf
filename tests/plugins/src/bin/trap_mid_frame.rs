//! Send `{"id":1}` and `{"id":2}`, write two stderr lines, write half a frame straight to
//! stdout, then abort: a trap under wasm, SIGABRT natively. The host must report the crash
//! with the stderr lines and the truncated frame, and stay up.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/trap-mid-frame.wasm </dev/null

use std::io::{self, Write};

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let mut io = Stdio::new(Framing::JsonLines);
    for frame in [br#"{"id":1}"#, br#"{"id":2}"#] {
        if let Err(err) = io.send(frame) {
            eprintln!("trap-mid-frame: {err}");
            sandpipe_guest::exit(2);
        }
    }
    eprintln!("about to trap");
    eprintln!("second stderr line");
    let mut out = io::stdout().lock();
    // Errors are ignored: the abort below is the point, whether or not the bytes got out.
    let _ = out.write_all(br#"{"id":3,"par"#).and_then(|()| out.flush());
    std::process::abort();
}
