//! Shared by the integration tests (each includes it with `mod common;` and uses what it
//! needs): a test host, loading and starting a plugin, reading a session to its end, and the
//! table of ways the sandbox stops a plugin mid-request.

#![allow(dead_code, reason = "each test file uses a part")]

use std::time::Duration;

use sandpipe::{
    Fuel, Host, HostOptions, Plugin, Policy, Session, SessionError, SessionOptions, StderrMode,
};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, plugin};

/// A host for tests: no disk cache (a test not about the cache must not depend on the
/// developer's `~/.cache`), native plugins allowed.
pub fn host() -> Host {
    Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true),
    )
    .expect("host")
}

/// Load `bin` built for `target` (building the plugins happens here, outside any timeout).
pub fn load(host: &Host, bin: &str, target: Target) -> Plugin {
    host.load(plugin(bin, target)).expect("load plugin")
}

/// Session options with `framing`, stderr discarded (the tail is still kept).
pub fn opts(framing: Framing) -> SessionOptions {
    SessionOptions::framed(framing).stderr(StderrMode::Discard)
}

/// Start `bin` built for `target` under `policy`, stderr discarded.
pub async fn start(
    host: &Host,
    bin: &str,
    target: Target,
    policy: &Policy,
    framing: Framing,
) -> Session {
    let p = load(host, bin, target);
    host.start(&p, policy, &opts(framing))
        .await
        .expect("start session")
}

/// Every frame up to the end of stdout, and how reading ended.
pub async fn recv_all(s: &mut Session) -> (Vec<Vec<u8>>, Result<(), SessionError>) {
    let mut frames = Vec::new();
    loop {
        match s.recv().await {
            Ok(Some(f)) => frames.push(f.to_vec()),
            Ok(None) => return (frames, Ok(())),
            Err(e) => return (frames, Err(e)),
        }
    }
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

/// Run `first` and `second` together, `first`'s request made before `second`'s: `first` is
/// polled once on its own (every typed client makes its request on its first poll, and the
/// driver writes requests in the order they are made), so the plugin reads `first` before
/// `second` without a sleep to order them.
pub async fn first_then<A: Future, B: Future>(first: A, second: B) -> (A::Output, B::Output) {
    let mut first = std::pin::pin!(first);
    let mut early = None;
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = first.as_mut().poll(cx) {
            early = Some(out);
        }
        std::task::Poll::Ready(())
    })
    .await;
    match early {
        Some(out) => (out, second.await),
        None => tokio::join!(first, second),
    }
}
