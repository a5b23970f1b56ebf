//! An oracle that misbehaves on request: invoking selector `spin`, `alloc`, `leak` (8 MiB kept per call), `sleep` or `trap`
//! does that (see the crate docs); any other selector echoes its calldata. With the argument
//! `junk-first` it writes plain text to stdout before its `ready`.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol oracle --fuel 100000000 --method spin target/wasm32-wasip2/release/oracle-hog.wasm

use sandpipe_guest::oracle::{Felt, InvokeError, Oracle, serve};
use sandpipe_guest::{Framing, Stdio};
use sandpipe_test_plugins::{junk_first, misbehave};

struct Hog;

impl Oracle for Hog {
    fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, InvokeError> {
        misbehave(selector);
        Ok(calldata.to_vec())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    junk_first(&args);
    if let Err(err) = serve(&mut Stdio::new(Framing::JsonLines), &mut Hog) {
        eprintln!("oracle-hog: {err}");
        sandpipe_guest::exit(2);
    }
}
