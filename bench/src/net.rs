//! `sandpipe-bench --net`: what the network allow-list costs a native plugin, measured where
//! the plugin sits. One program (this binary, re-run as `--net-client`) makes HTTP requests to
//! a server on 127.0.0.1 and times them itself, so process start-up is not in the figures:
//!
//! ```text
//!   direct:    client ───────────────────────────────► server        (network unrestricted)
//!   sandpipe:  client ─► proxy in sandpipe (allow-list, pinned name) ─► server
//!              (in its own network namespace, HTTP_PROXY from sandpipe)
//! ```
//!
//! Two shapes: a **connection** (connect, one request, the whole answer, close: through the
//! proxy an absolute-form request, each one checked against the allow-list) and a **request**
//! on a kept-alive connection (through the proxy, inside one CONNECT tunnel, so only the relay
//! is paid). Contenders alternate round by round; each figure is the median over the rounds'
//! medians. Printed as a Markdown table; nothing is asserted. Also the start of a native plugin
//! (`sandpipe run` of a program that exits at once, as a whole process) with the network
//! closed and with an allow-list, against the program run directly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail, ensure};

use crate::measure::median;

/// The flag of the client mode.
pub const CLIENT_FLAG: &str = "--net-client";

const NAME: &str = "bench.test";

/// `sandpipe-bench --net-client conn|request N URL`: N timed exchanges; prints the median and
/// the 90th percentile in microseconds as one JSON line. Through `HTTP_PROXY` when it is set.
pub fn client(args: &[String]) -> anyhow::Result<()> {
    let [mode, n, url] = args else {
        bail!("usage: {CLIENT_FLAG} conn|request N http://HOST:PORT/");
    };
    let n: usize = n.parse().context("N")?;
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .context("an http:// URL")?
        .to_owned();
    let proxy = std::env::var("HTTP_PROXY")
        .ok()
        .and_then(|p| Some(p.strip_prefix("http://")?.trim_end_matches('/').to_owned()));
    let mut times = Vec::with_capacity(n);
    match mode.as_str() {
        "conn" => {
            let (to, line) = match &proxy {
                Some(p) => (p.clone(), format!("GET {url} HTTP/1.1")),
                None => (authority.clone(), "GET / HTTP/1.1".to_owned()),
            };
            let request = format!("{line}\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
            for _ in 0..n {
                let t = Instant::now();
                let mut s = TcpStream::connect(&to)?;
                s.set_nodelay(true)?;
                s.write_all(request.as_bytes())?;
                let mut answer = Vec::new();
                s.read_to_end(&mut answer)?;
                ensure!(answer.ends_with(b"ok"), "unexpected answer {answer:?}");
                times.push(t.elapsed());
            }
        }
        "request" => {
            let mut s = TcpStream::connect(proxy.as_deref().unwrap_or(&authority))?;
            s.set_nodelay(true)?;
            let mut reader = BufReader::new(s.try_clone()?);
            if proxy.is_some() {
                write!(
                    s,
                    "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
                )?;
                let status = read_head(&mut reader)?;
                ensure!(status.contains(" 200 "), "CONNECT answered {status}");
            }
            let request = format!("GET / HTTP/1.1\r\nHost: {authority}\r\n\r\n");
            for _ in 0..n {
                let t = Instant::now();
                s.write_all(request.as_bytes())?;
                read_head(&mut reader)?;
                let mut body = [0u8; 2];
                reader.read_exact(&mut body)?;
                times.push(t.elapsed());
            }
        }
        other => bail!("unknown mode {other}"),
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    println!("{{\"median_us\":{:.1},\"p90_us\":{:.1}}}", at(0.5), at(0.9));
    Ok(())
}

/// Read a response head (the status line and headers); the status line.
fn read_head(r: &mut impl BufRead) -> anyhow::Result<String> {
    let mut status = String::new();
    r.read_line(&mut status)?;
    loop {
        let mut line = String::new();
        ensure!(
            r.read_line(&mut line)? > 0,
            "the connection closed in a head"
        );
        if line == "\r\n" {
            return Ok(status);
        }
    }
}

/// The server: HTTP/1.1, keep-alive, `ok` for every request, one thread per connection.
fn serve(listener: TcpListener) {
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let _ = conn.set_nodelay(true);
            let Ok(mut w) = conn.try_clone() else { return };
            let mut r = BufReader::new(conn);
            loop {
                let mut close = false;
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 {
                        return;
                    }
                    if h.eq_ignore_ascii_case("connection: close\r\n") {
                        close = true;
                    }
                    if h == "\r\n" {
                        break;
                    }
                }
                let answer = if close {
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                };
                if w.write_all(answer.as_bytes()).is_err() || close {
                    return;
                }
            }
        });
    }
}

fn run_client(cmd: &mut Command, what: &str) -> anyhow::Result<(f64, f64)> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{what} printed {:?}", String::from_utf8_lossy(&out.stdout)))?;
    Ok((
        v["median_us"].as_f64().context("median")?,
        v["p90_us"].as_f64().context("p90")?,
    ))
}

/// Time `cmd` as a whole process, `n` times; the median in milliseconds.
fn whole(cmd: &mut Command, n: usize) -> anyhow::Result<f64> {
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let out = cmd.output()?;
        ensure!(out.status.success(), "{cmd:?}: {}", out.status);
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(t))
}

/// The whole `--net` section, printed as Markdown.
pub fn run(sandpipe: &Path, quick: bool) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || serve(listener));
    let exe = std::env::current_exe()?;
    let (rounds, n) = if quick { (2, 50) } else { (7, 400) };
    let allow = [
        "run".to_owned(),
        "--allow-net".to_owned(),
        format!("{NAME}:{port}"),
        "--resolve".to_owned(),
        format!("{NAME}=127.0.0.1"),
    ];
    println!(
        "| {n} exchanges, median of {rounds} rounds | direct | behind `sandpipe run --allow-net` | added | ratio |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (mode, label) in [
        ("conn", "a connection (connect, one request, close)"),
        ("request", "a request on a kept-alive connection"),
    ] {
        let (mut direct, mut proxied) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut d = Command::new(&exe);
            d.args([CLIENT_FLAG, mode, &n.to_string()])
                .arg(format!("http://127.0.0.1:{port}/"));
            direct.push(run_client(&mut d, "the direct client")?.0);
            let mut p = Command::new(sandpipe);
            p.args(&allow)
                .arg(&exe)
                .args([CLIENT_FLAG, mode, &n.to_string()])
                .arg(format!("http://{NAME}:{port}/"));
            proxied.push(run_client(&mut p, "the client behind sandpipe")?.0);
        }
        let (d, p) = (median(direct), median(proxied));
        println!(
            "| {label} | {d:.1} µs | {p:.1} µs | {:.1} µs | {:.2}× |",
            p - d,
            p / d
        );
    }
    let starts = if quick { 5 } else { 30 };
    let direct = whole(&mut Command::new("/bin/true"), starts)?;
    let closed = whole(Command::new(sandpipe).args(["run", "/bin/true"]), starts)?;
    let open = whole(Command::new(sandpipe).args(&allow).arg("/bin/true"), starts)?;
    println!();
    println!(
        "| start and end of `/bin/true`, whole process, median of {starts} | ms | ratio to direct |"
    );
    println!("|---|---:|---:|");
    println!("| direct | {direct:.2} | 1.00× |");
    println!(
        "| `sandpipe run` (sandbox, network closed) | {closed:.2} | {:.1}× |",
        closed / direct
    );
    println!(
        "| `sandpipe run --allow-net` (sandbox and proxy) | {open:.2} | {:.1}× |",
        open / direct
    );
    Ok(())
}
