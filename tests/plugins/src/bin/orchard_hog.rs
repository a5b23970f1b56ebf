//! An Orchard provider that misbehaves on request: action `hog` with attrs
//! `{"how": "spin"|"alloc"|"sleep"|"trap"}` does that; `{"defer": true}` on any action holds
//! its answer until the next request is answered (two requests pending); action `ok` answers
//! `{}` at once.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol orchard --fuel 100000000 --method execute --params '{"action":"hog","attrs":{"how":"spin"}}' target/wasm32-wasip2/release/orchard-hog.wasm

use sandpipe_guest::orchard::{ActionSchema, Provider, ProviderError, ProviderSchema, run};
use sandpipe_guest::{Framing, Stdio};
use sandpipe_test_plugins::misbehave;
use serde_json::{Value, json};

struct Hog;

impl Provider for Hog {
    fn schema(&self) -> ProviderSchema {
        ProviderSchema::new("orchard-hog")
            .with_action("hog", ActionSchema::new("misbehave as attrs.how says"))
            .with_action("ok", ActionSchema::new("answer at once"))
    }

    fn execute(&mut self, action: &str, attrs: Value) -> Result<Value, ProviderError> {
        if action == "hog" {
            misbehave(attrs.get("how").and_then(Value::as_str).unwrap_or_default());
        }
        Ok(json!({}))
    }

    fn defer(&self, _action: &str, attrs: &Value) -> bool {
        attrs.get("defer") == Some(&Value::Bool(true))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(err) = run(&mut Stdio::new(Framing::JsonLines), &mut Hog, &args) {
        eprintln!("orchard-hog: {err}");
        sandpipe_guest::exit(2);
    }
}
