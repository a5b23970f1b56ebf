//! Golden transcripts: each case drives the proto `Client` against the example's `main_with`
//! running in memory (a thread on a Unix socket pair), records every frame in order and
//! compares with `tests/transcripts/denobridge/<case>.transcript`. `BLESS=1` rewrites them.
//!
//! Every case is sequentially replayable: a run of `>` frames, then the `<` frames it causes.
//! The plugin's state directory is a fresh temp dir here; the transcripts name it `/state`
//! (frames never contain the path).

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread::JoinHandle;

use sandpipe_guest::{FrameLimits, Framed, Framing};
use sandpipe_proto::denobridge::*;
use sandpipe_proto::jsonrpc::{ErrorCode, Id, REQUEST_CANCELLED};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};
use serde_json::{Value, json};

struct Session {
    case: &'static str,
    mode: Option<&'static str>,
    dir: PathBuf,
    client: Client,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    entries: Vec<Entry>,
    plugin: JoinHandle<Result<(), String>>,
}

impl Session {
    fn start(case: &'static str, kind: ProviderKind, mode: Option<&'static str>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sandpipe-denobridge-golden-{case}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (host, plugin) = UnixStream::pair().expect("socket pair");
        let mut args = vec![dir.to_str().expect("utf8 temp path").to_owned()];
        args.extend(mode.map(str::to_owned));
        let plugin = std::thread::spawn(move || {
            let reader = plugin.try_clone().map_err(|e| e.to_string())?;
            let mut io =
                Framed::from_parts(reader, plugin, Framing::JsonLines, FrameLimits::default());
            sandpipe_example_denobridge::main_with(&mut io, &args).map_err(|e| e.to_string())
        });
        Session {
            case,
            mode,
            dir,
            client: Client::new(kind),
            writer: host.try_clone().expect("clone"),
            reader: BufReader::new(host),
            entries: Vec::new(),
            plugin,
        }
    }

    /// Send everything the client queued.
    fn send(&mut self) {
        while let Some(frame) = self.client.poll_transmit() {
            self.writer.write_all(&frame).expect("write");
            self.writer.write_all(b"\n").expect("write");
            self.entries.push(Entry {
                dir: Direction::ToPlugin,
                frame,
                note: None,
            });
        }
    }

    /// Read `n` frames from the plugin into the client; return the client's events.
    fn recv(&mut self, n: usize) -> Vec<ClientEvent> {
        for _ in 0..n {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("read");
            let frame = line.trim_end_matches('\n').as_bytes().to_vec();
            assert!(!frame.is_empty(), "{}: plugin closed early", self.case);
            self.client.handle_frame(&frame).expect("valid frame");
            self.entries.push(Entry {
                dir: Direction::FromPlugin,
                frame,
                note: None,
            });
        }
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// Send what is queued, read `n` frames, return the single response's result.
    fn call(&mut self, n: usize) -> Result<Response, sandpipe_proto::jsonrpc::ErrorObject> {
        self.send();
        let evs = self.recv(n);
        match evs.into_iter().last() {
            Some(ClientEvent::Response { result, .. }) => result,
            other => panic!("{}: {other:?}", self.case),
        }
    }

    fn finish(mut self) {
        self.send();
        self.writer.shutdown(Shutdown::Write).expect("close stdin");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.reader, &mut rest).expect("read rest");
        assert_eq!(
            rest, "",
            "{}: unexpected frames after the session",
            self.case
        );
        self.plugin
            .join()
            .expect("plugin thread")
            .expect("plugin ends cleanly");
        let _ = std::fs::remove_dir_all(&self.dir);
        let args = match self.mode {
            Some(m) => format!("/state {m}"),
            None => "/state".to_owned(),
        };
        let t = Transcript {
            headers: [
                ("protocol", "denobridge"),
                ("framing", "lines"),
                ("plugin", "example-denobridge"),
                ("preopen", "/state"),
                ("args", &args),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            entries: self.entries,
        };
        compare(
            self.case,
            &format!("# sandpipe transcript 1\n{}", t.render()),
        );
    }
}

fn compare(case: &str, got: &str) {
    if let Err(diff) = sandpipe_tests::golden::check("denobridge", case, got) {
        panic!("{case}: {diff}");
    }
}

fn health(s: &mut Session) {
    s.client.health().expect("health");
    assert!(matches!(s.call(1), Ok(Response::Health(h)) if h.ok));
}

fn read(id: &str, props: Value) -> ReadParams {
    ReadParams {
        id: id.into(),
        props,
        ..Default::default()
    }
}

fn plan(next: Value, current: Value) -> ModifyPlanParams {
    ModifyPlanParams {
        id: Some("r1".into()),
        plan_type: PlanType::Update,
        next_props: next,
        current_props: Some(current),
        current_state: Some(json!({"version": 1})),
        current_sensitive_state: None,
        extra: Default::default(),
    }
}

#[test]
fn resource() {
    let mut s = Session::start("resource", ProviderKind::Resource, None);
    health(&mut s);
    let a1 = json!({"name": "a", "size": 1});
    let a2 = json!({"name": "a", "size": 2});
    s.client
        .create(PropsParams::new(a1.clone()))
        .expect("ready");
    let Ok(Response::Create(c)) = s.call(1) else {
        panic!("create")
    };
    assert_eq!((c.id.as_str(), &c.state), ("r1", &json!({"version": 1})));
    s.client.read(read("r1", a1.clone())).expect("ready");
    assert!(matches!(s.call(1), Ok(Response::ReadResource(ReadResult::Found(f))) if f.props == a1));
    s.client
        .modify_plan(plan(a2.clone(), a1.clone()))
        .expect("ready");
    assert!(matches!(
        s.call(1),
        Ok(Response::ModifyPlan(ModifyPlanResult::Modified { .. }))
    ));
    s.client
        .modify_plan(plan(json!({"name": "b"}), a1.clone()))
        .expect("ready");
    assert_eq!(
        s.call(1),
        Ok(Response::ModifyPlan(ModifyPlanResult::RequiresReplacement))
    );
    s.client
        .modify_plan(plan(a1.clone(), a1.clone()))
        .expect("ready");
    assert_eq!(
        s.call(1),
        Ok(Response::ModifyPlan(ModifyPlanResult::NoChanges))
    );
    s.client
        .update(UpdateParams {
            id: "r1".into(),
            next_props: a2.clone(),
            current_props: a1,
            current_state: json!({"version": 1}),
            ..Default::default()
        })
        .expect("ready");
    assert!(matches!(s.call(1), Ok(Response::Update(u)) if u.state == json!({"version": 2})));
    s.client.read(read("r1", a2.clone())).expect("ready");
    assert!(matches!(s.call(1), Ok(Response::ReadResource(ReadResult::Found(f))) if f.props == a2));
    s.client
        .delete(DeleteParams {
            id: "r1".into(),
            props: a2.clone(),
            state: json!({"version": 2}),
            ..Default::default()
        })
        .expect("ready");
    assert!(matches!(s.call(1), Ok(Response::Delete(d)) if d.done));
    s.client.read(read("r1", a2)).expect("ready");
    assert_eq!(s.call(1), Ok(Response::ReadResource(ReadResult::Gone)));
    s.client.shutdown_notify().expect("ready");
    s.finish();
}

#[test]
fn errors() {
    let mut s = Session::start("errors", ProviderKind::Resource, None);
    health(&mut s);
    s.client
        .read(read("../etc/passwd", json!({})))
        .expect("ready");
    let err = s.call(1).expect_err("bad id");
    assert_eq!(err.code, ErrorCode::Int(-32602));
    s.client
        .update(UpdateParams {
            id: "r7".into(),
            next_props: json!({"name": "x"}),
            current_props: json!({"name": "x"}),
            current_state: json!({"version": 1}),
            ..Default::default()
        })
        .expect("ready");
    let err = s.call(1).expect_err("missing resource");
    assert_eq!((&err.code, &err.data), (&ErrorCode::Int(-32603), &None));
    // The host enriches the bare error with the plugin's stderr tail.
    let rich = with_stderr(
        err,
        &["example-denobridge: r7: update of a resource that does not exist".into()],
    );
    assert!(rich.data.is_some_and(|d| d["stderr"].is_array()));
    s.client
        .create(PropsParams::new(json!({"size": 1})))
        .expect("ready");
    let err = s.call(1).expect_err("no name");
    assert_eq!(err.code, ErrorCode::Int(-32000));
    s.client.shutdown_notify().expect("ready");
    s.finish();
}

#[test]
fn out_of_order() {
    let mut s = Session::start("out-of-order", ProviderKind::Resource, None);
    health(&mut s);
    let first = s
        .client
        .create(PropsParams::new(json!({"name": "slow", "defer": true})))
        .expect("ready");
    let second = s
        .client
        .create(PropsParams::new(json!({"name": "fast"})))
        .expect("ready");
    s.send();
    let order: Vec<(Id, String)> = s
        .recv(2)
        .into_iter()
        .map(|e| match e {
            ClientEvent::Response {
                id,
                result: Ok(Response::Create(c)),
                ..
            } => (id, c.id),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(order, [(second, "r2".into()), (first, "r1".into())]);
    s.client.shutdown_notify().expect("ready");
    s.finish();
}

#[test]
fn cancel() {
    let mut s = Session::start("cancel", ProviderKind::Resource, None);
    health(&mut s);
    let slow = s
        .client
        .create(PropsParams::new(json!({"name": "slow", "defer": true})))
        .expect("ready");
    s.send();
    assert!(s.client.cancel(&slow));
    match s.client.poll_event() {
        Some(ClientEvent::Response {
            id, result: Err(e), ..
        }) => {
            assert_eq!((id, e.code), (slow, ErrorCode::Int(REQUEST_CANCELLED)))
        }
        other => panic!("{other:?}"),
    }
    s.client.read(read("r1", json!({}))).expect("ready");
    s.send();
    // The read's answer, then the cancelled create's late answer, which the client drops.
    let evs = s.recv(2);
    assert!(matches!(
        &evs[..],
        [ClientEvent::Response {
            method: Method::Read,
            result: Ok(_),
            ..
        }]
    ));
    s.client.shutdown_notify().expect("ready");
    s.finish();
}

#[test]
fn shutdown_request() {
    let mut s = Session::start("shutdown-request", ProviderKind::Resource, None);
    health(&mut s);
    s.client.shutdown_request().expect("ready");
    assert_eq!(s.call(1), Ok(Response::Shutdown(json!({}))));
    assert!(s.client.is_closed());
    s.finish();
}

#[test]
fn action() {
    let mut s = Session::start("action", ProviderKind::Action, Some("action"));
    health(&mut s);
    let id = s
        .client
        .invoke(PropsParams::new(json!({"target": "x"})))
        .expect("ready");
    s.send();
    let evs = s.recv(3);
    let messages: Vec<&str> = evs
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Progress { invoke, progress } => {
                assert_eq!(invoke.as_ref(), Some(&id));
                Some(progress.message.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(messages, ["step 1 of 2", "step 2 of 2"]);
    assert!(
        matches!(evs.last(), Some(ClientEvent::Response { result: Ok(Response::Invoke(d)), .. }) if d.done)
    );
    s.client.shutdown_notify().expect("ready");
    s.finish();
}
