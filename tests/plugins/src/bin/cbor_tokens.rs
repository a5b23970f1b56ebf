//! Echo CBOR sequence frames one byte per write, flushing after every byte, as an unbuffered
//! SDK does: the host's framer must reassemble frames from many tiny reads.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   printf '\xa1\x62id\x01' | sandpipe run --framing cbor target/wasm32-wasip2/release/cbor-tokens.wasm | xxd

use std::io::{self, Write};

use sandpipe_guest::{Framing, GuestError, Stdio};

fn main() {
    if let Err(err) = run() {
        eprintln!("cbor-tokens: {err}");
        sandpipe_guest::exit(2);
    }
}

fn run() -> Result<(), GuestError> {
    let mut io = Stdio::new(Framing::CborSeq);
    while let Some(frame) = io.recv()? {
        // Bypasses Stdio::send, which would write the whole frame at once.
        let mut out = io::stdout().lock();
        for byte in frame.iter() {
            out.write_all(std::slice::from_ref(byte))?;
            out.flush()?;
        }
    }
    Ok(())
}
