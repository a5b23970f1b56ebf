//! A Cairo oracle as its authors write one: the real `cairo-oracle-server` SDK, a few functions,
//! one of which fails on some inputs. The SDK speaks the `stdio:` protocol (JSON Lines) on
//! stdin/stdout and echoes every frame to stderr (`send: ...`, `recv: ...`).
//!
//! Build: `cargo build --release --manifest-path tests/peers/cairo-oracle/Cargo.toml`
//! (add `--target wasm32-wasip2` for the component that `sandpipe run` sandboxes).

use anyhow::ensure;
use cairo_oracle_server::Oracle;
use cairo_oracle_server::starknet_core::types::Felt;
use std::process::ExitCode;

fn main() -> ExitCode {
    Oracle::new()
        .provide("sqrt", |x: u64| Ok(x.isqrt()))
        .provide("add", |a: u64, b: u64| Ok(a.wrapping_add(b)))
        // The SDK's own example: odd values fail, and the failure becomes a JSON-RPC error.
        .provide("funny_hash", |value: u64| {
            ensure!(value % 2 == 0, "value must be even");
            Ok(value * value)
        })
        // An array in, the same array out: how a test gets a frame of a megabyte both ways.
        .provide("echo", |felts: Vec<Felt>| Ok(felts))
        .run()
}
