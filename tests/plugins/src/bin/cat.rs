//! A byte-for-byte echo: every byte read from stdin is written back to stdout at once, until
//! stdin closes (exit 0). With argv[1] = N and argv[2] = K it exits with code K after echoing
//! N bytes (a plugin that leaves early). A failed write ends it with code 3 for a broken pipe
//! (EPIPE: its reader is gone) and 4 for any other error, so a test can tell the two apart and
//! the wasm and native builds end alike.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   printf 'any bytes' | sandpipe run target/wasm32-wasip2/release/cat.wasm

use std::io::{ErrorKind, Read, Write};

fn main() {
    let arg = |i: usize| std::env::args().nth(i).and_then(|a| a.parse::<u64>().ok());
    let leave = arg(1).map(|n| (n, arg(2).unwrap_or(0) as u8));
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 << 10];
    let mut echoed = 0u64;
    loop {
        let want = match leave {
            Some((n, code)) if echoed >= n => sandpipe_guest::exit(code),
            Some((n, _)) => (n - echoed).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        let got = match stdin.read(&mut buf[..want]) {
            Ok(0) => sandpipe_guest::exit(0),
            Ok(got) => got,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("cat: reading stdin: {e}");
                sandpipe_guest::exit(5);
            }
        };
        if let Err(e) = stdout.write_all(&buf[..got]).and_then(|()| stdout.flush()) {
            eprintln!("cat: writing stdout: {e}");
            sandpipe_guest::exit(if e.kind() == ErrorKind::BrokenPipe {
                3
            } else {
                4
            });
        }
        echoed += got as u64;
    }
}
