//! The benchmark binary still runs: `--quick` measures every figure a few times (the process-level
//! section too, through the `sandpipe` binary it builds) and prints the
//! tables. No speed is asserted here, only that the suite works.

use std::process::Command;

#[test]
fn quick_mode_runs_every_figure_and_prints_the_tables() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandpipe-bench"))
        .arg("--quick")
        .output()
        .expect("running sandpipe-bench --quick");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for header in [
        "| figure | frame | n | p50 | p99 | vs baseline child (p50) | CPU placement |",
        "| target | measured p50 | against p50 | ratio | goal | result |",
        "| stream | frame | frames | time | frames/s | MB/s | CPU placement |",
        "| framing | frame | placement | native direct p50 / p99 | `sandpipe run` wasm p50 / p99 | wasm ratio | `sandpipe run` native p50 / p99 | native ratio | pass-through relay p50 / p99 | relay ratio | `run` native / relay |",
        "| placement | oracle direct p50 / p99 | `run --protocol oracle` wasm p50 / p99 | wasm ratio |",
        "### Process-level targets",
    ] {
        assert!(stdout.contains(header), "missing {header:?} in:\n{stdout}");
    }
    for figure in [
        "sandpipe wasm",
        "hand-written baseline",
        "native fallback",
        "plain-function floor",
        "cold compile",
        "on-disk cache",
        "reused pre-instance",
        "cbor: sandpipe wasm",
        "content-length: sandpipe native fallback",
        "fuel metering off",
        "epoch checks off",
        "fuel overhead",
        "spawn to first response, `run` wasm (cached) vs native spawn",
        "`sandpipe --version` vs a small native program",
        "real Cairo oracle behind `run --protocol oracle`, wasm, vs direct",
        "Python rows **not measured**: skipped in --quick",
    ] {
        assert!(
            stdout.contains(figure),
            "missing the {figure:?} figure in:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("Oracle rows **not measured**"),
        "the real oracle was not measured:\n{stdout}"
    );
    assert!(
        !stdout.contains("not measured |"),
        "a target's figure is missing:\n{stdout}"
    );
}
