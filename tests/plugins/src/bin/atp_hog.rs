//! An ATP v3 plugin that misbehaves on request, with three steps:
//!
//! - `hog`, config `{"how": "spin" | "alloc" | "sleep" | "trap"}`: does that
//!   (`sandpipe_test_plugins::misbehave`), so the run never reports;
//! - `ok`, any config: output `success` with the config as data, at once;
//! - `hold`, any config: stays in flight until the session ends (a second run in flight when
//!   a `hog` run stops the plugin).
//!
//! With the argument `stubborn` it ignores the end of the session: after client done (or
//! stdin closing) it sleeps forever instead of exiting, so only SIGTERM (native) or the
//! host's kill ends it.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe call --protocol atp --fuel 100000000 --method hog --params '{"how": "spin"}' \
//!            target/wasm32-wasip2/release/atp-hog.wasm

use sandpipe_guest::atp::{Output, Plugin, Progress, Run, Value, Version, serve};
use sandpipe_guest::{Framing, Stdio};
use sandpipe_test_plugins::misbehave;

struct Hog;

impl Plugin for Hog {
    fn start(&mut self, _run: &mut Run<'_>, step_id: &str, config: Value) -> Progress {
        match step_id {
            "hog" => {
                misbehave(how(&config).unwrap_or(""));
                Progress::Failed("hog: the misbehaviour returned".into())
            }
            "ok" => Progress::Done(Output::new("success", config)),
            _ => Progress::Pending,
        }
    }
}

fn how(config: &Value) -> Option<&str> {
    let Value::Map(members) = config else {
        return None;
    };
    members
        .iter()
        .find(|(k, _)| k.as_text() == Some("how"))
        .and_then(|(_, v)| v.as_text())
}

fn schema() -> Value {
    let steps = ["hog", "ok", "hold"]
        .iter()
        .map(|id| {
            (
                Value::Text((*id).into()),
                Value::Map(vec![(Value::Text("id".into()), Value::Text((*id).into()))]),
            )
        })
        .collect();
    Value::Map(vec![(Value::Text("steps".into()), Value::Map(steps))])
}

fn main() {
    let stubborn = std::env::args().skip(1).any(|a| a == "stubborn");
    let result = serve(
        &mut Stdio::new(Framing::CborSeq),
        &mut Hog,
        Version::V3,
        schema(),
    );
    if let Err(err) = result {
        eprintln!("atp-hog: {err}");
        sandpipe_guest::exit(2);
    }
    if stubborn {
        eprintln!("atp-hog: session over, staying up anyway");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}
