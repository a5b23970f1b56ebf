//! Golden transcripts: scenarios driven by the proto `Client` against `main_with` in memory.
//!
//! Each case records every frame in order and compares it with
//! `tests/transcripts/orchard/<case>.transcript`; `BLESS=1 cargo test` rewrites the files. The
//! scenarios only ever send a run of frames and then read a known number of answers, so each
//! file replays sequentially against the real plugin (wasm or native).

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sandpipe_example_orchard::main_with;
use sandpipe_guest::{FrameLimits, Framed, Framing, GuestError};
use sandpipe_proto::jsonrpc::Id;
use sandpipe_proto::orchard::{
    CallError, Client, ClientEvent, ClientState, DESCRIBE_TIMEOUT, ProviderError, codes,
    parse_schema_output,
};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};
use serde_json::json;

/// A host session with the plugin running on a thread over a socket pair.
struct Session {
    client: Client,
    host: UnixStream,
    reader: BufReader<UnixStream>,
    entries: Vec<Entry>,
    plugin: JoinHandle<Result<(), GuestError>>,
}

impl Session {
    fn start() -> Self {
        let (host, plugin) = UnixStream::pair().expect("socket pair");
        // A safety net so a missing answer fails the test instead of hanging it.
        host.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let plugin = std::thread::spawn(move || {
            let reader = plugin.try_clone().expect("clone");
            let mut io =
                Framed::from_parts(reader, plugin, Framing::JsonLines, FrameLimits::default());
            main_with(&mut io, &[])
        });
        let reader = BufReader::new(host.try_clone().expect("clone"));
        Self {
            client: Client::new(),
            host,
            reader,
            entries: Vec::new(),
            plugin,
        }
    }

    fn write(&mut self, frame: Vec<u8>) {
        self.host.write_all(&frame).expect("write");
        self.host.write_all(b"\n").expect("write");
        self.entries.push(Entry {
            dir: Direction::ToPlugin,
            frame,
            note: None,
        });
    }

    /// Send everything the client has queued.
    fn flush(&mut self) {
        while let Some(frame) = self.client.poll_transmit() {
            self.write(frame);
        }
    }

    /// Read one frame from the plugin.
    fn read(&mut self) -> Vec<u8> {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read");
        let frame = line.trim_end_matches('\n').as_bytes().to_vec();
        assert!(!frame.is_empty(), "plugin closed its output");
        self.entries.push(Entry {
            dir: Direction::FromPlugin,
            frame: frame.clone(),
            note: None,
        });
        frame
    }

    /// Read `n` answers, feed them to the client, return its events.
    fn recv(&mut self, n: usize) -> Vec<ClientEvent> {
        for _ in 0..n {
            let frame = self.read();
            self.client.handle_frame(&frame).expect("valid answer");
        }
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    fn describe_and_configure(&mut self) {
        self.client
            .describe(Instant::now(), DESCRIBE_TIMEOUT)
            .expect("start");
        self.flush();
        let evs = self.recv(1);
        assert!(
            matches!(&evs[..], [ClientEvent::Described { result: Ok(s), .. }] if s.name == "example-orchard"),
            "{evs:?}"
        );
        self.client
            .configure(json!({"region": "local"}))
            .expect("described");
        self.flush();
        assert!(matches!(
            &self.recv(1)[..],
            [ClientEvent::Configured { result: Ok(()), .. }]
        ));
    }

    fn shutdown(&mut self) {
        self.client.shutdown().expect("shutdown allowed");
        self.flush();
        assert!(matches!(
            &self.recv(1)[..],
            [ClientEvent::ShutDown { result: Ok(()), .. }]
        ));
        assert_eq!(self.client.state(), ClientState::Closed);
    }

    /// Close the pipe, check the plugin ended cleanly, compare with (or bless) the file.
    fn finish(self, case: &str) {
        let Session {
            host,
            plugin,
            entries,
            ..
        } = self;
        close(&host);
        plugin
            .join()
            .expect("plugin thread")
            .expect("plugin ends cleanly");
        let transcript = Transcript {
            headers: [
                ("protocol", "orchard"),
                ("framing", "lines"),
                ("plugin", "example-orchard"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            entries,
        };
        // The format's first line is a comment, not a `key: value` header.
        compare(
            case,
            &format!("# sandpipe transcript 1\n{}", transcript.render()),
        );
    }
}

/// End the plugin's input (a clone of the socket lives in the reader, so dropping one handle
/// would not).
fn close(host: &UnixStream) {
    host.shutdown(Shutdown::Write)
        .expect("close the plugin's stdin");
}

fn compare(case: &str, got: &str) {
    if let Err(diff) = sandpipe_tests::golden::check("orchard", case, got) {
        panic!("{case}: {diff}");
    }
    Transcript::parse(got).expect("the file parses");
}

#[test]
fn run() {
    let mut s = Session::start();
    s.describe_and_configure();
    s.client
        .execute("echo", json!({"greeting": "hello", "n": 1}))
        .expect("configured");
    s.flush();
    assert!(
        matches!(&s.recv(1)[..], [ClientEvent::Executed { result: Ok(o), .. }] if o == &json!({"greeting": "hello", "n": 1}))
    );
    s.client
        .execute("sum", json!({"values": [1, 2, 3.5]}))
        .expect("configured");
    s.flush();
    assert!(
        matches!(&s.recv(1)[..], [ClientEvent::Executed { result: Ok(o), .. }] if o == &json!({"sum": 6.5}))
    );
    s.shutdown();
    s.finish("run");
}

fn provider_error(ev: &ClientEvent) -> &ProviderError {
    match ev {
        ClientEvent::Configured {
            result: Err(CallError::Provider(e)),
            ..
        }
        | ClientEvent::Executed {
            result: Err(CallError::Provider(e)),
            ..
        } => e,
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[test]
fn errors() {
    let mut s = Session::start();
    s.client
        .describe(Instant::now(), DESCRIBE_TIMEOUT)
        .expect("start");
    s.flush();
    s.recv(1);
    s.client
        .configure(json!({"fail": true}))
        .expect("described");
    s.flush();
    let evs = s.recv(1);
    assert_eq!(
        provider_error(&evs[0]),
        &ProviderError::configure_failed("configuration rejected")
            .with_detail("config.fail is true")
    );
    // A failed configure may be retried.
    s.client.configure(json!({})).expect("back to described");
    s.flush();
    assert!(matches!(
        &s.recv(1)[..],
        [ClientEvent::Configured { result: Ok(()), .. }]
    ));
    s.client.execute("prune", json!({})).expect("configured");
    s.flush();
    assert_eq!(provider_error(&s.recv(1)[0]).code, codes::UNKNOWN_ACTION);
    s.client
        .execute("sum", json!({"values": [1, "two"]}))
        .expect("configured");
    s.flush();
    assert_eq!(
        provider_error(&s.recv(1)[0]),
        &ProviderError::validation_failed("values[1] is not a number").with_detail("got \"two\"")
    );
    s.client
        .execute("sum", json!({"values": [9223372036854775807_i64, 1]}))
        .expect("configured");
    s.flush();
    assert_eq!(provider_error(&s.recv(1)[0]).code, codes::EXECUTE_FAILED);
    // Frames the typed client cannot send: an unknown method and an execute without action.
    s.write(br#"{"id":100,"method":"harvest","params":{}}"#.to_vec());
    assert_eq!(
        s.read(),
        br#"{"id":100,"error":{"code":"unknown_method","message":"unknown method: harvest"}}"#
    );
    s.write(br#"{"id":101,"method":"execute","params":{"attrs":{}}}"#.to_vec());
    assert_eq!(
        s.read(),
        br#"{"id":101,"error":{"code":"invalid_request","message":"execute needs a string action"}}"#
    );
    s.shutdown();
    s.finish("errors");
}

#[test]
fn out_of_order() {
    let mut s = Session::start();
    s.describe_and_configure();
    let first = s
        .client
        .execute("echo", json!({"defer": true, "tag": "first"}))
        .expect("configured");
    let second = s
        .client
        .execute("sum", json!({"values": [40, 2]}))
        .expect("configured");
    s.flush();
    let evs = s.recv(2);
    let ids: Vec<&Id> = evs
        .iter()
        .map(|e| match e {
            ClientEvent::Executed {
                id, result: Ok(_), ..
            } => id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, [&second, &first]);
    assert_eq!(
        evs[1],
        ClientEvent::Executed {
            id: first,
            action: "echo".into(),
            result: Ok(json!({"defer": true, "tag": "first"}))
        }
    );
    s.shutdown();
    s.finish("out-of-order");
}

#[test]
fn plan_mode_prints_one_schema_line() {
    let mut io = Framed::from_parts(
        std::io::empty(),
        Vec::new(),
        Framing::JsonLines,
        FrameLimits::default(),
    );
    main_with(&mut io, &["schema".to_owned()]).expect("schema");
    let out = io.writer().clone();
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
    assert!(out.ends_with(b"\n"));
    let schema = parse_schema_output(&out).expect("valid schema output");
    assert_eq!(schema.name, "example-orchard");
    assert_eq!(schema.protocol, "1");
    assert_eq!(schema.actions.keys().collect::<Vec<_>>(), ["echo", "sum"]);
}

#[test]
fn a_line_that_is_not_json_is_answered_and_the_next_line_is_served() {
    let mut s = Session::start();
    s.write(b"{not json".to_vec());
    let reply = s.read();
    assert!(
        reply.starts_with(
            br#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: not JSON"#
        ),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    // JSON Lines resynchronises at the next line: the provider serves on.
    s.describe_and_configure();
    s.client.shutdown().expect("configured");
    s.flush();
    let evs = s.recv(1);
    assert!(
        matches!(&evs[..], [ClientEvent::ShutDown { .. }]),
        "{evs:?}"
    );
    let Session { host, plugin, .. } = s;
    close(&host);
    plugin.join().expect("thread").expect("clean end");
}

#[test]
fn held_execute_is_answered_before_shutdown_and_eof_ends_cleanly() {
    let mut s = Session::start();
    s.describe_and_configure();
    let held = s
        .client
        .execute("echo", json!({"defer": true}))
        .expect("configured");
    s.flush();
    s.client.shutdown().expect("configured");
    s.flush();
    let evs = s.recv(2);
    assert!(
        matches!(&evs[..], [ClientEvent::Executed { id, .. }, ClientEvent::ShutDown { .. }] if id == &held),
        "{evs:?}"
    );
    let Session { host, plugin, .. } = s;
    close(&host);
    plugin.join().expect("thread").expect("clean end");
    // EOF without shutdown ends the loop too.
    let s = Session::start();
    let Session { host, plugin, .. } = s;
    close(&host);
    plugin.join().expect("thread").expect("clean end at EOF");
}
