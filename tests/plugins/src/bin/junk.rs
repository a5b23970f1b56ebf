//! Send the frame `{"id":1}`, then a line of raw non-JSON with terminal escapes straight to
//! stdout, then `{"id":2}`, and exit 0: the host must report the junk as a framing error.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/junk.wasm </dev/null

use std::io::{self, Write};

use sandpipe_guest::{Framing, Stdio};

fn main() {
    if let Err(err) = Stdio::new(Framing::JsonLines).send(br#"{"id":1}"#) {
        eprintln!("junk: {err}");
        sandpipe_guest::exit(2);
    }
    let mut out = io::stdout().lock();
    let raw = out
        .write_all(b"this is not json \x1b[31mred\x1b[0m\n")
        .and_then(|()| out.write_all(b"{\"id\":2}\n"))
        .and_then(|()| out.flush());
    if let Err(err) = raw {
        eprintln!("junk: {err}");
        sandpipe_guest::exit(2);
    }
}
