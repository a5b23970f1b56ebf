//! Send `{"id":1}`, write and flush the start of a second frame, `{"id":2,"res`, then exit
//! with code argv[1] (default 0) without finishing it: the host must deliver the first frame,
//! report the cut one, and keep the exit code.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/partial-exit.wasm 0 </dev/null

use std::io::{self, Write};

use sandpipe_guest::{Framing, Stdio};

fn main() {
    let code = match std::env::args().nth(1).map(|arg| arg.parse::<u8>()) {
        None => 0,
        Some(Ok(code)) => code,
        Some(Err(err)) => {
            eprintln!("partial-exit: argv[1] must be an exit code 0..=255: {err}");
            sandpipe_guest::exit(2);
        }
    };
    if let Err(err) = Stdio::new(Framing::JsonLines).send(br#"{"id":1}"#) {
        eprintln!("partial-exit: {err}");
        sandpipe_guest::exit(2);
    }
    let mut out = io::stdout().lock();
    if let Err(err) = out.write_all(br#"{"id":2,"res"#).and_then(|()| out.flush()) {
        eprintln!("partial-exit: {err}");
        sandpipe_guest::exit(2);
    }
    eprintln!("partial-exit: leaving mid-frame with code {code}");
    sandpipe_guest::exit(code);
}
