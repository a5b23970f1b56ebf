//! Start to first response: from "I want this plugin running" to the echo of one 100 B frame.
//!
//! Every figure includes `Host::load` (read the file, sha256, then compile / cache read /
//! in-memory lookup), `Host::start` and one round trip, except the two `preloaded` figures,
//! which start a `Plugin` already in hand and so show what `load` adds. Host construction
//! (the engine and its epoch ticker) and the shutdown after the response are outside the
//! figures.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use sandpipe::{Host, HostOptions, LoadSource, Plugin, Policy, Pooling};

use crate::measure::{Plan, Sampler, Stats};
use crate::roundtrip::{session_options, session_round_trip};

/// Load (if `plugin` is a path), start, one round trip; returns the elapsed time.
async fn first_response(
    host: &Host,
    plugin: Loaded<'_>,
    expect: Option<LoadSource>,
    frame: &[u8],
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let loaded;
    let plugin = match plugin {
        Loaded::Path(path) => {
            loaded = host
                .load(path)
                .with_context(|| format!("loading {}", path.display()))?;
            &loaded
        }
        Loaded::Plugin(plugin) => plugin,
    };
    let mut session = host
        .start(plugin, &Policy::default(), &session_options())
        .await?;
    session_round_trip(&mut session, frame).await?;
    let took = t.elapsed();
    ensure!(
        plugin.load_source() == expect,
        "{} loaded from {:?}, the figure wants {expect:?}",
        plugin.path().display(),
        plugin.load_source()
    );
    let exit = session.shutdown(Duration::from_secs(2)).await;
    ensure!(exit.success(), "plugin ended with {exit:?}");
    Ok(took)
}

#[derive(Clone, Copy)]
enum Loaded<'a> {
    Path(&'a Path),
    Plugin(&'a Plugin),
}

/// How long each start figure is measured.
pub struct Plans {
    pub native: Plan,
    pub cold: Plan,
    pub disk: Plan,
    pub memory: Plan,
}

/// Measure every start figure, handing each to `report` as `(id, stats)`.
pub async fn all(
    plans: &Plans,
    wasm: &Path,
    native: &Path,
    scratch: &Path,
    frame: &[u8],
    mut report: impl FnMut(&str, Stats),
) -> anyhow::Result<()> {
    let host = Host::with_options(
        &HostOptions::default()
            .cache_dir(None)
            .allow_native_unsandboxed(true),
    )?;

    let mut s = Sampler::new(&plans.native);
    while s.more() {
        s.record(first_response(&host, Loaded::Path(native), None, frame).await?);
    }
    report("start.native", s.finish());

    let native_plugin = host.load(native)?;
    let mut s = Sampler::new(&plans.native);
    while s.more() {
        s.record(first_response(&host, Loaded::Plugin(&native_plugin), None, frame).await?);
    }
    report("start.native.preloaded", s.finish());

    // Cold: a fresh host over a fresh, empty cache directory, so the load compiles and writes
    // the artifact, as the very first start of a plugin does. The last directory stays warm
    // for the disk-cache figure.
    let mut warm_dir: Option<PathBuf> = None;
    let mut s = Sampler::new(&plans.cold);
    for round in 0.. {
        if !s.more() {
            break;
        }
        let dir = scratch.join(format!("cold-{round}"));
        if let Some(old) = warm_dir.replace(dir.clone()) {
            let _ = std::fs::remove_dir_all(old);
        }
        let fresh = Host::with_options(&HostOptions::default().cache_dir(Some(dir.clone())))?;
        let compiled = Some(LoadSource::Compiled);
        s.record(first_response(&fresh, Loaded::Path(wasm), compiled, frame).await?);
    }
    report("start.wasm.cold", s.finish());

    // From disk: a fresh host (an empty in-process map) over the warm cache directory.
    let dir = warm_dir.context("no cold start ran")?;
    let mut s = Sampler::new(&plans.disk);
    while s.more() {
        let fresh = Host::with_options(&HostOptions::default().cache_dir(Some(dir.clone())))?;
        let disk = Some(LoadSource::DiskCache);
        s.record(first_response(&fresh, Loaded::Path(wasm), disk, frame).await?);
    }
    report("start.wasm.disk", s.finish());

    // Reused pre-instance: the host has loaded the plugin once, `Host::load` finds it in memory.
    let wasm_plugin = host.load(wasm)?;
    report(
        "start.wasm.memory",
        reused_pre_instance(&plans.memory, &host, wasm, frame).await?,
    );

    // The same plugin value each time: its load source stays what the first load was.
    let first = wasm_plugin.load_source();
    let mut s = Sampler::new(&plans.memory);
    while s.more() {
        s.record(first_response(&host, Loaded::Plugin(&wasm_plugin), first, frame).await?);
    }
    report("start.wasm.preloaded", s.finish());

    // The pooling allocator, then the same pool keeping its slots warm (see
    // `Pooling::keep_memory_resident`): reused pre-instance (`Host::load` finds it in memory).
    for (id, pool) in [
        ("start.wasm.pooled", Pooling::new(16)),
        ("start.wasm.pooled.warm", warm_pool(16)),
    ] {
        let pooled = Host::with_options(&HostOptions::default().cache_dir(None).pooling(pool))?;
        pooled.load(wasm)?;
        report(
            id,
            reused_pre_instance(&plans.memory, &pooled, wasm, frame).await?,
        );
    }
    Ok(())
}

/// Start to first response when `host` has loaded `wasm` before: `Host::load` finds it in
/// memory (the caller loads it once first).
async fn reused_pre_instance(
    plan: &Plan,
    host: &Host,
    wasm: &Path,
    frame: &[u8],
) -> anyhow::Result<Stats> {
    let mut s = Sampler::new(plan);
    while s.more() {
        let memory = Some(LoadSource::Memory);
        s.record(first_response(host, Loaded::Path(wasm), memory, frame).await?);
    }
    Ok(s.finish())
}

/// A pool whose slots stay resident between sessions: enough linear memory for a small Rust
/// plugin (1 MiB shadow stack, then data and heap) and 64 KiB of fiber stack.
pub fn warm_pool(sessions: u32) -> Pooling {
    Pooling::new(sessions)
        .keep_memory_resident(WARM_MEMORY)
        .keep_stack_resident(WARM_STACK)
}

/// Linear memory a warm pool keeps resident per slot.
pub const WARM_MEMORY: usize = 1_152 << 10;
/// Fiber stack a warm pool keeps resident per slot.
pub const WARM_STACK: usize = 64 << 10;
