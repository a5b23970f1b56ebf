//! Send `{"ok":1}`, then one frame of argv[2] bytes (default 100 MiB) in the framing argv[1]
//! names (`lines`, the default, or `content-length`), streamed from a 64 KiB buffer so the
//! plugin itself stays small; then read stdin until EOF and exit 0. The host must refuse the
//! frame at its `max_frame_bytes` without buffering it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/huge-frame.wasm lines </dev/null

use std::io::{self, Write};

use sandpipe_guest::{Framing, Stdio};

const CHUNK: usize = 64 * 1024;

fn main() {
    let mut args = std::env::args().skip(1);
    let framing = args.next().unwrap_or_else(|| "lines".into());
    let size = match args.next().map(|a| a.parse::<usize>()) {
        None => 100 << 20,
        Some(Ok(size)) if size >= 16 => size,
        Some(_) => {
            eprintln!("huge-frame: argv[2] must be a byte count of at least 16");
            sandpipe_guest::exit(2);
        }
    };
    let framing_kind = match framing.as_str() {
        "lines" => Framing::JsonLines,
        "content-length" => Framing::ContentLength,
        other => {
            eprintln!("huge-frame: argv[1] must be lines or content-length, not {other:?}");
            sandpipe_guest::exit(2);
        }
    };
    if let Err(err) = Stdio::new(framing_kind).send(br#"{"ok":1}"#) {
        eprintln!("huge-frame: {err}");
        sandpipe_guest::exit(2);
    }
    // A JSON string `"xxx…"` of exactly `size` bytes.
    let (head, tail): (Vec<u8>, &[u8]) = match framing_kind {
        Framing::ContentLength => (
            format!("Content-Length: {size}\r\n\r\n\"").into_bytes(),
            b"\"",
        ),
        _ => (b"\"".to_vec(), b"\"\n"),
    };
    let body = size - 2;
    let chunk = [b'x'; CHUNK];
    let mut out = io::stdout().lock();
    let mut write = || -> io::Result<()> {
        out.write_all(&head)?;
        let mut left = body;
        while left > 0 {
            let n = left.min(CHUNK);
            out.write_all(&chunk[..n])?;
            left -= n;
        }
        out.write_all(tail)?;
        out.flush()
    };
    if let Err(err) = write() {
        // The host stopped reading and closed the pipe: expected once it refused the frame.
        eprintln!("huge-frame: {err}");
        sandpipe_guest::exit(3);
    }
    eprintln!("huge-frame: wrote {size} bytes");
    let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
}
