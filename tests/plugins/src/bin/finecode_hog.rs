//! A FineCode extension runner that misbehaves on request: `actions/run` with action name
//! `spin`, `alloc`, `sleep` or `trap` does that (after writing `hog: <how> starting` to
//! stderr); any other action succeeds with `{"json": {"ran": <name>}}`. Calls are handled one
//! at a time, so a call sent after a hogging one stays pending until the runner is stopped.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol finecode --fuel 100000000 --method actions/run --params '{"actionName":"spin","params":{}}' target/wasm32-wasip2/release/finecode-hog.wasm

use sandpipe_guest::finecode::{
    Context, FineCodeError, InitializeParams, InitializeResult, RunActionParams, RunActionResult,
    Runner, json, serve,
};
use sandpipe_guest::{Framing, Stdio};
use sandpipe_test_plugins::misbehave;

struct Hog;

impl Runner for Hog {
    fn initialize(&mut self, _params: &InitializeParams) -> InitializeResult {
        InitializeResult::new("finecode-hog", "0.1.0")
    }

    fn run_action(
        &mut self,
        _ctx: &mut Context<'_>,
        p: RunActionParams,
    ) -> Result<RunActionResult, FineCodeError> {
        let name = p.action_name.as_str();
        if matches!(name, "spin" | "alloc" | "sleep" | "trap") {
            misbehave(name);
        }
        Ok(RunActionResult::success(&json!({"json": {"ran": name}})))
    }
}

fn main() {
    if let Err(err) = serve(&mut Stdio::new(Framing::ContentLength), &mut Hog) {
        eprintln!("finecode-hog: {err}");
        sandpipe_guest::exit(2);
    }
}
