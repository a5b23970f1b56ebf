//! Shared by the misbehaving protocol plugins: the ways one request can go wrong.

use std::io::Write;

/// Misbehave as `how` says, after one stderr line naming it (so the host's stderr tail has
/// something to show): `spin` loops forever, `alloc` allocates forever, `sleep` blocks in a
/// host call for an hour, `trap` aborts. Anything else returns at once.
pub fn misbehave(how: &str) {
    eprintln!("hog: {how} starting");
    match how {
        "spin" => {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        "alloc" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
            }
        }
        // 8 MiB kept for good, each call: a heap that grows per request.
        "leak" => std::mem::forget(std::hint::black_box(vec![1u8; 8 << 20])),
        "sleep" => std::thread::sleep(std::time::Duration::from_secs(3600)),
        "trap" => std::process::abort(),
        _ => {}
    }
}

/// With the argument `junk-first`, write a line of plain text to stdout before any frame,
/// the way a plugin with a chatty dependency would.
pub fn junk_first(args: &[String]) {
    if args.iter().any(|a| a == "junk-first") {
        let mut out = std::io::stdout();
        let _ = out.write_all(b"warming up \x1b[1mthe\x1b[0m plugin\n");
        let _ = out.flush();
    }
}
