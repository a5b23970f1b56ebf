//! The guest's own work, counted rather than timed: wasm operators a component executes per
//! byte of input, read off wasmtime's fuel (one unit per operator; `nop`, `drop` and block
//! markers are free), so the figure holds under any load.

use std::path::Path;

use anyhow::{Context, ensure};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::sync::Command;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

struct State {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// Fuel one run of `wasm` burns with `input` on stdin, to the end of its `run`.
fn fuel_for(engine: &Engine, component: &Component, input: Vec<u8>) -> anyhow::Result<u64> {
    let mut linker = Linker::<State>::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    let out = MemoryOutputPipe::new(input.len() + (1 << 20));
    let ctx = WasiCtxBuilder::new()
        .stdin(MemoryInputPipe::new(input))
        .stdout(out.clone())
        .build();
    let mut store = Store::new(
        engine,
        State {
            ctx,
            table: ResourceTable::new(),
        },
    );
    const BUDGET: u64 = u64::MAX / 4;
    store.set_fuel(BUDGET)?;
    let command = Command::instantiate(&mut store, component, &linker)?;
    let ran = command.wasi_cli_run().call_run(&mut store)?;
    ensure!(ran.is_ok(), "the plugin failed");
    Ok(BUDGET - store.get_fuel()?)
}

/// Wasm operators per byte of `wire` (one encoded frame), from `frames` frames against none.
pub fn operators_per_byte(wasm: &Path, wire: &[u8], frames: usize) -> anyhow::Result<f64> {
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config)?;
    let component = Component::from_file(&engine, wasm)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("compiling {}", wasm.display()))?;
    let idle = fuel_for(&engine, &component, Vec::new())?;
    let busy = fuel_for(&engine, &component, wire.repeat(frames))?;
    Ok((busy - idle) as f64 / (wire.len() * frames) as f64)
}
