//! Shared by the protocol integration tests: starting a plugin and the table of ways the
//! sandbox stops one mid-request.

use std::time::Duration;

use sandpipe::{Fuel, Host, Policy, Session, SessionOptions, StderrMode};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, plugin};

/// Start `bin` built for `target` under `policy`, stderr discarded (the tail is still kept).
pub async fn start(
    host: &Host,
    bin: &str,
    target: Target,
    policy: &Policy,
    framing: Framing,
) -> Session {
    let p = host.load(plugin(bin, target)).expect("load");
    let opts = SessionOptions::framed(framing).stderr(StderrMode::Discard);
    host.start(&p, policy, &opts).await.expect("start")
}

/// (target, misbehaviour, policy, the reason the error must name): every limit that can stop
/// a plugin mid-request, where it exists (fuel and memory are wasm only).
pub fn stops() -> Vec<(Target, &'static str, Policy, &'static str)> {
    vec![
        (
            Target::Wasm,
            "spin",
            Policy::default().fuel(Fuel::PerSession(200_000_000)),
            "plugin ran out of fuel",
        ),
        (
            Target::Wasm,
            "alloc",
            Policy::default().max_memory(Some(48 << 20)),
            "plugin exceeded the memory limit",
        ),
        (
            Target::Wasm,
            "sleep",
            Policy::default().deadline(Duration::from_secs(1)),
            "plugin exceeded its deadline",
        ),
        (
            Target::Native,
            "sleep",
            Policy::default().deadline(Duration::from_secs(1)),
            "plugin exceeded its deadline",
        ),
        (
            Target::Native,
            "spin",
            Policy::default().deadline(Duration::from_secs(1)),
            "plugin exceeded its deadline",
        ),
    ]
}
