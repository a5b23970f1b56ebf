//! An Orchard provider that misbehaves on request: action `hog` with attrs
//! `{"how": "spin"|"alloc"|"sleep"|"trap"}` does that, and with `{"how": "no-outputs"}` answers
//! with a result that has no `outputs` (a protocol violation); `{"defer": true}` on any action
//! holds its answer until the next request is answered (two requests pending); action `ok`
//! answers `{}` at once.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol orchard --fuel 100000000 --method execute --params '{"action":"hog","attrs":{"how":"spin"}}' target/wasm32-wasip2/release/orchard-hog.wasm

use std::io::{self, Write};

use sandpipe_guest::orchard::{ActionSchema, Provider, ProviderError, ProviderSchema, run};
use sandpipe_guest::{FrameLimits, Framed, Framing, PluginStdout};
use sandpipe_test_plugins::misbehave;
use serde_json::{Value, json};

/// The outputs that stand for "drop `outputs` from this answer" (see [`NoOutputs`]).
const NO_OUTPUTS: &str = "orchard-hog: no outputs";

struct Hog;

impl Provider for Hog {
    fn schema(&self) -> ProviderSchema {
        ProviderSchema::new("orchard-hog")
            .with_action("hog", ActionSchema::new("misbehave as attrs.how says"))
            .with_action("ok", ActionSchema::new("answer at once"))
    }

    fn execute(&mut self, action: &str, attrs: Value) -> Result<Value, ProviderError> {
        let how = attrs.get("how").and_then(Value::as_str).unwrap_or_default();
        if action == "hog" && how == "no-outputs" {
            return Ok(json!(NO_OUTPUTS));
        }
        if action == "hog" {
            misbehave(how);
        }
        Ok(json!({}))
    }

    fn defer(&self, _action: &str, attrs: &Value) -> bool {
        attrs.get("defer") == Some(&Value::Bool(true))
    }
}

/// Stdout that rewrites a `{"outputs": NO_OUTPUTS}` result to `{}`: the SDK's server always
/// sends `outputs`, so the malformed answer is made after it, one whole frame at a time (the
/// SDK writes each frame with one write and a flush).
struct NoOutputs {
    out: PluginStdout,
    frame: Vec<u8>,
}

impl Write for NoOutputs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.frame.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let frame = std::mem::take(&mut self.frame);
        let rewritten = match serde_json::from_slice::<Value>(&frame) {
            Ok(mut v) if v["result"]["outputs"] == json!(NO_OUTPUTS) => {
                v["result"] = json!({});
                let mut line = serde_json::to_vec(&v).map_err(io::Error::other)?;
                line.push(b'\n');
                line
            }
            _ => frame,
        };
        self.out.write_all(&rewritten)?;
        self.out.flush()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stdout = NoOutputs {
        out: PluginStdout::new(),
        frame: Vec::new(),
    };
    let mut io = Framed::from_parts(
        io::stdin(),
        stdout,
        Framing::JsonLines,
        FrameLimits::default(),
    );
    if let Err(err) = run(&mut io, &mut Hog, &args) {
        eprintln!("orchard-hog: {err}");
        sandpipe_guest::exit(2);
    }
}
