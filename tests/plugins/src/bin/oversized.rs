//! Send one good frame `{"ok":1}`, then one JSON line `{"big":"xxx…"}` of exactly argv[1]
//! bytes (default 2097152) without its newline, then read stdin until EOF and exit 0: the
//! host's `max_frame_bytes` decides whether the big frame is accepted.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/oversized.wasm 9437184 </dev/null

use std::io::{self, Write};

use sandpipe_guest::{Framing, Stdio};

/// `{"big":""}`: the frame's size without any padding.
const OVERHEAD: usize = 10;

fn main() {
    let size = match std::env::args().nth(1).map(|arg| arg.parse::<usize>()) {
        None => 2 << 20,
        Some(Ok(size)) if size >= OVERHEAD => size,
        Some(_) => {
            eprintln!("oversized: argv[1] must be a byte count of at least {OVERHEAD}");
            sandpipe_guest::exit(2);
        }
    };
    if let Err(err) = Stdio::new(Framing::JsonLines).send(br#"{"ok":1}"#) {
        eprintln!("oversized: {err}");
        sandpipe_guest::exit(2);
    }
    // Written past the guest's own framer so its limits do not cap the size.
    let mut line = Vec::with_capacity(size + 1);
    line.extend_from_slice(br#"{"big":""#);
    line.resize(size - 2, b'x');
    line.extend_from_slice(b"\"}\n");
    let mut out = io::stdout().lock();
    if let Err(err) = out.write_all(&line).and_then(|()| out.flush()) {
        eprintln!("oversized: {err}");
        sandpipe_guest::exit(2);
    }
    // Stay alive until the host closes stdin, so it sees the frame before the exit.
    let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
}
