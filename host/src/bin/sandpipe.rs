//! The `sandpipe` command. All logic lives in `sandpipe::cli`.

fn main() {
    let code = sandpipe::cli::main();
    // Exit at once: a pump may still be blocked reading our stdin, and the plugin is already
    // gone (or killed when the session dropped). A plugin killed by a signal ends sandpipe by
    // the same signal.
    sandpipe::cli::exit(code);
}
