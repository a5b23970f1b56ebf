//! A denobridge resource provider that misbehaves on request: `create` with
//! `props.hog` = `spin`, `alloc`, `sleep` or `trap` does that; `props.defer: true` holds the
//! answer until the next request is answered (so two requests are pending at once); anything
//! else creates resource `h1`. With the argument `junk-first` it writes plain text to stdout
//! first.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol denobridge --fuel 100000000 --method create --params '{"props":{"hog":"spin"}}' target/wasm32-wasip2/release/denobridge-hog.wasm

use sandpipe_guest::denobridge::{Answer, ResourceProvider, serve_resource};
use sandpipe_guest::proto::denobridge::{
    CreateResult, DeleteParams, DoneResult, PropsParams, ReadParams, ReadResult, Request,
    UpdateParams, UpdateResult,
};
use sandpipe_guest::{Framing, Stdio};
use sandpipe_test_plugins::{junk_first, misbehave};
use serde_json::{Value, json};

struct Hog;

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a fixed, well-formed result")
}

impl ResourceProvider for Hog {
    fn create(&mut self, params: PropsParams) -> Answer<CreateResult> {
        if let Some(how) = params.props.get("hog").and_then(Value::as_str) {
            misbehave(how);
        }
        Ok(from_json(json!({"id": "h1", "state": {}})))
    }
    fn read(&mut self, _params: ReadParams) -> Answer<ReadResult> {
        Ok(ReadResult::Gone)
    }
    fn update(&mut self, _params: UpdateParams) -> Answer<UpdateResult> {
        Ok(from_json(json!({})))
    }
    fn delete(&mut self, _params: DeleteParams) -> Answer<DoneResult> {
        Ok(DoneResult::done())
    }
    fn answer_after_next(&self, request: &Request) -> bool {
        matches!(request, Request::Create(p) if p.props.get("defer") == Some(&Value::Bool(true)))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    junk_first(&args);
    if let Err(err) = serve_resource(&mut Stdio::new(Framing::JsonLines), &mut Hog) {
        eprintln!("denobridge-hog: {err}");
        sandpipe_guest::exit(2);
    }
}
