//! Write argv[1] MiB (default 32) to stderr as fast as possible: first one endless line with no
//! newline, then short numbered lines; then send `{"done":true}` on stdout and exit 0. The host
//! must drain stderr without keeping it: only a bounded tail survives.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/stderr-flood.wasm 32 </dev/null

use std::io::{self, BufWriter, Write};

use sandpipe_guest::{Framing, Stdio};

const MIB: usize = 1 << 20;

fn main() {
    let mib = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 32,
        Some(Ok(n)) if n >= 2 => n,
        Some(_) => {
            eprintln!("stderr-flood: argv[1] must be a size in MiB of at least 2");
            sandpipe_guest::exit(2);
        }
    };
    // Buffered: a flood comes in big writes (stderr itself is unbuffered, one write per line).
    let mut err = BufWriter::with_capacity(64 * 1024, io::stderr().lock());
    let mut flood = || -> io::Result<()> {
        // Half the volume as one line that never ends…
        let block = [b'y'; 64 * 1024];
        for _ in 0..(mib / 2) * MIB / block.len() {
            err.write_all(&block)?;
        }
        err.write_all(b"\n")?;
        // …and half as many short lines.
        let mut written = 0;
        let mut i = 0u64;
        while written < (mib - mib / 2) * MIB {
            let line = format!("flood line {i}\n");
            err.write_all(line.as_bytes())?;
            written += line.len();
            i += 1;
        }
        writeln!(err, "stderr-flood: last line")?;
        err.flush()
    };
    if let Err(e) = flood() {
        sandpipe_guest::exit(if e.kind() == io::ErrorKind::BrokenPipe {
            3
        } else {
            4
        });
    }
    if let Err(err) = Stdio::new(Framing::JsonLines).send(br#"{"done":true}"#) {
        eprintln!("stderr-flood: {err}");
        sandpipe_guest::exit(2);
    }
}
