//! The Orchard fuzz bodies: [`fuzz`] (one machine at a time) and [`fuzz_pair`] (a client
//! wired to a server).

use super::*;

/// Fuzz body (for the `machine_orchard` cargo-fuzz target and the unit tests). Each line of
/// `data` is one frame; `epoch` is any instant (deadlines are offsets from it, so the outcome
/// does not depend on it).
///
/// Properties, besides never panicking:
/// - plan mode: a line that [`parse_schema_output`] accepts encodes with
///   [`encode_schema_output`] to output that parses to the same schema and re-encodes to the
///   same bytes;
/// - host side: the lines are the provider's answers. The client describes, then configures,
///   executes (up to three at once) and shuts down whenever its state allows; every call
///   completes exactly once, with its own id, method and action, counting a timeout of
///   `describe` and [`Client::fail_pending`] at the end; a described schema is protocol `"1"`
///   and reaches another host unchanged through [`Server::respond_describe`]; every frame sent
///   is an Orchard request;
/// - provider side: the lines are the host's frames. Every request (and every undecodable
///   frame) gets exactly one answer with its id, whether the caller answers the event or the
///   machine answers for it; notifications and responses get none.
pub fn fuzz(epoch: Instant, data: &[u8]) {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    for line in &lines {
        fuzz_schema_output(line);
    }
    fuzz_client(epoch, &lines);
    fuzz_server(&lines);
}

fn fuzz_schema_output(line: &[u8]) {
    let Ok(schema) = parse_schema_output(line) else {
        return;
    };
    let out = encode_schema_output(&schema);
    let again = parse_schema_output(&out).expect("encoded schema output parses");
    assert_eq!(again, schema, "schema output round trip");
    assert_eq!(
        encode_schema_output(&again),
        out,
        "schema output is canonical"
    );
}

/// The schema a provider declares reaches a host unchanged.
fn fuzz_schema_in_transit(epoch: Instant, schema: &ProviderSchema) {
    let mut host = Client::new();
    let mut provider = Server::new();
    host.describe(epoch, DESCRIBE_TIMEOUT)
        .expect("a new client describes");
    let frame = host.poll_transmit().expect("describe is sent");
    provider.handle_frame(&frame).expect("describe is valid");
    let Some(ServerEvent::Describe { id }) = provider.poll_event() else {
        panic!("no describe event");
    };
    provider
        .respond_describe(id, schema)
        .expect("describe is answerable");
    let frame = provider.poll_transmit().expect("the answer is sent");
    host.handle_frame(&frame).expect("the answer is valid");
    match host.poll_event() {
        Some(ClientEvent::Described {
            result: Ok(got), ..
        }) => {
            assert_eq!(&got, schema, "schema in transit")
        }
        other => panic!("describe answer: {other:?}"),
    }
}

/// What the fuzzed client sent and has not seen completed: id → (method, action).
type Calls = BTreeMap<Id, (Method, String)>;

fn client_events(epoch: Instant, client: &mut Client, calls: &mut Calls, completed: &mut usize) {
    while let Some(event) = client.poll_event() {
        let (id, method, action) = match &event {
            ClientEvent::Described { id, result } => {
                if let Ok(schema) = result {
                    assert_eq!(schema.protocol, PROTOCOL_VERSION);
                    fuzz_schema_in_transit(epoch, schema);
                }
                (id, Method::Describe, "")
            }
            ClientEvent::Configured { id, .. } => (id, Method::Configure, ""),
            ClientEvent::Executed { id, action, .. } => (id, Method::Execute, action.as_str()),
            ClientEvent::ShutDown { id, .. } => {
                assert_eq!(client.state(), ClientState::Closed);
                (id, Method::Shutdown, "")
            }
        };
        let sent = calls.remove(id);
        assert_eq!(
            sent.as_ref().map(|(m, a)| (*m, a.as_str())),
            Some((method, action)),
            "outcome of call {id}"
        );
        *completed += 1;
    }
}

/// Every frame the client sends is one of the four requests, or the refusal of a request
/// from the provider.
fn client_frames(client: &mut Client) {
    while let Some(frame) = client.poll_transmit() {
        match Message::decode(&frame, Dialect::Orchard).expect("a valid frame") {
            Message::Request { method, .. } if Method::from_name(&method).is_some() => {}
            Message::Response { result: Err(e), .. }
                if e.code == ErrorCode::Str(codes::UNKNOWN_METHOD.into()) => {}
            other => panic!("the host sent {other:?}"),
        }
    }
}

fn fuzz_client(epoch: Instant, lines: &[&[u8]]) {
    let mut client = Client::new();
    let mut calls = Calls::new();
    let (mut issued, mut completed) = (0usize, 0usize);
    let id = client
        .describe(epoch, DESCRIBE_TIMEOUT)
        .expect("a new client describes");
    calls.insert(id, (Method::Describe, String::new()));
    issued += 1;
    for (i, line) in lines.iter().enumerate() {
        let _ = client.handle_frame(line);
        client_frames(&mut client);
        if line.len() % 7 == 3 {
            // Past the describe deadline.
            client.handle_timeout(epoch + DESCRIBE_TIMEOUT);
        }
        client_events(epoch, &mut client, &mut calls, &mut completed);
        let describing = calls.values().any(|(m, _)| *m == Method::Describe);
        let want_timer = describing.then(|| epoch + DESCRIBE_TIMEOUT);
        assert_eq!(
            client.poll_timeout(),
            want_timer,
            "only describe has a deadline"
        );
        let action = String::from_utf8_lossy(&line[..line.len().min(6)]).into_owned();
        let sent = match client.state() {
            ClientState::Described if i % 4 == 3 => {
                client.shutdown().map(|id| (id, Method::Shutdown))
            }
            ClientState::Described => client
                .configure(json!({ "line": i }))
                .map(|id| (id, Method::Configure)),
            ClientState::Configured if i % 6 == 5 => {
                client.shutdown().map(|id| (id, Method::Shutdown))
            }
            ClientState::Configured if calls.len() < 3 => client
                .execute(&action, json!({ "line": i }))
                .map(|id| (id, Method::Execute)),
            ClientState::Closed => {
                assert!(client.execute("a", Value::Null).is_err());
                assert!(client.configure(Value::Null).is_err());
                continue;
            }
            _ => continue,
        };
        let (id, method) = sent.expect("the state allows this call");
        let action = if method == Method::Execute {
            action
        } else {
            String::new()
        };
        assert!(
            calls.insert(id.clone(), (method, action)).is_none(),
            "id {id} reused while in flight"
        );
        issued += 1;
        client_frames(&mut client);
    }
    client.fail_pending(&Stopped::by_host(
        "provider exited",
        vec!["tail".to_owned()],
    ));
    client_events(epoch, &mut client, &mut calls, &mut completed);
    assert!(calls.is_empty(), "calls without an outcome: {calls:?}");
    assert_eq!(issued, completed, "every call completes exactly once");
    assert_eq!(client.state(), ClientState::Closed);
    assert_eq!(client.poll_timeout(), None);
}

fn fuzz_server(lines: &[&[u8]]) {
    let mut server = Server::new();
    for (i, line) in lines.iter().enumerate() {
        let want_reply = match Message::decode(line, Dialect::Orchard) {
            Ok(Message::Request { id, .. }) => Some(id),
            Ok(_) => None,
            Err(_) => Some(salvage_id(line)),
        };
        let _ = server.handle_frame(line);
        while let Some(event) = server.poll_event() {
            let (id, answer) = match event {
                ServerEvent::Describe { id } => {
                    let schema = ProviderSchema::new("fuzz");
                    let r = server.respond_describe(id.clone(), &schema);
                    (id, r)
                }
                ServerEvent::Configure { id, .. } if i % 2 == 0 => {
                    let r = server.respond_configure(id.clone(), Ok(()));
                    (id, r)
                }
                ServerEvent::Configure { id, .. } => {
                    let error = ProviderError::configure_failed("no").with_detail("line");
                    let r = server.respond_configure(id.clone(), Err(error));
                    (id, r)
                }
                ServerEvent::Execute { id, attrs, .. } => {
                    let r = server.respond_execute(id.clone(), Ok(attrs));
                    (id, r)
                }
                ServerEvent::Shutdown { id } => {
                    let r = server.respond_shutdown(id.clone());
                    assert!(server.is_shut_down());
                    (id, r)
                }
            };
            assert_eq!(answer, Ok(()), "answering request {id}");
            let twice = server.respond_error(id.clone(), ProviderError::internal("twice"));
            assert_eq!(
                twice,
                Err(ProtocolError::NotAwaitingResponse { id: id.to_string() })
            );
        }
        assert_eq!(server.in_flight(), 0);
        let replies: Vec<Message> = std::iter::from_fn(|| server.poll_transmit())
            .map(|frame| Message::decode(&frame, Dialect::Orchard).expect("a valid frame"))
            .collect();
        match (&want_reply, &replies[..]) {
            (None, []) => {}
            (Some(want), [Message::Response { id, .. }]) if id == want => {}
            _ => panic!(
                "frame {:?}: replies {replies:?}, want one for {want_reply:?}",
                String::from_utf8_lossy(line)
            ),
        }
    }
}

/// Structure-aware fuzz body (for the `pair_orchard` cargo-fuzz target and the unit tests): a
/// [`Client`] wired to a [`Server`] in memory, driven by operations read from `data` — calls
/// in any state (refused unless the lifecycle allows them), delivery of the next frame either
/// way, the provider answering its open requests in any order (results or errors), time
/// passing the `describe` deadline, and the provider dying ([`Client::fail_pending`]).
///
/// Properties: a call is accepted exactly when the lifecycle allows it; every frame one
/// machine sends, the other accepts; each accepted call has exactly one outcome, and it is
/// the one the provider sent (schema, outputs, or error, unchanged) unless it timed out or
/// the provider died; the timer is the pending `describe`'s deadline; and a pair that
/// delivers everything and answers everything ends with no call outstanding.
pub fn fuzz_pair(epoch: Instant, data: &[u8]) {
    let mut input = crate::choices::Choices::new(data);
    let mut pair = Pair::new(epoch);
    while !input.is_empty() {
        match input.byte() % 9 {
            0 => {
                let timeout = Duration::from_millis(u64::from(input.byte()) * 20);
                let allowed = pair.host.state() == ClientState::Start;
                let sent = pair.host.describe(pair.now, timeout);
                pair.sent(sent, allowed, Method::Describe, String::new());
            }
            1 => {
                let allowed = pair.host.state() == ClientState::Described;
                let sent = pair.host.configure(json!({ "k": input.byte() }));
                pair.sent(sent, allowed, Method::Configure, String::new());
            }
            2 => {
                let allowed = pair.host.state() == ClientState::Configured;
                let action = ["echo", "", "x"][input.below(3)];
                let sent = pair.host.execute(action, json!([input.byte()]));
                pair.sent(sent, allowed, Method::Execute, action.to_owned());
            }
            3 => {
                let allowed = matches!(
                    pair.host.state(),
                    ClientState::Described | ClientState::Configured
                );
                let sent = pair.host.shutdown();
                pair.sent(sent, allowed, Method::Shutdown, String::new());
            }
            4 => pair.deliver_to_provider(),
            5 => pair.deliver_to_host(),
            6 => {
                let k = input.below(pair.open.len());
                let ok = input.byte() & 1 == 0;
                pair.answer(k, ok);
            }
            7 => {
                pair.now += Duration::from_millis(u64::from(input.byte()) * 20);
                pair.host.handle_timeout(pair.now);
                pair.check();
            }
            _ => {
                pair.dead = true;
                pair.host
                    .fail_pending(&Stopped::by_host("provider exited", Vec::new()));
                pair.check();
                assert!(pair.calls.is_empty(), "fail_pending left calls open");
                assert_eq!(pair.host.state(), ClientState::Closed);
                return;
            }
        }
    }
    // Deliver everything and answer everything until nothing moves.
    loop {
        let before = (
            pair.wire_to_provider.len(),
            pair.wire_to_host.len(),
            pair.open.len(),
        );
        while !pair.wire_to_provider.is_empty() {
            pair.deliver_to_provider();
        }
        while !pair.open.is_empty() {
            pair.answer(0, true);
        }
        while !pair.wire_to_host.is_empty() {
            pair.deliver_to_host();
        }
        if before == (0, 0, 0) {
            break;
        }
    }
    assert!(
        pair.calls.is_empty(),
        "calls left open by a live, answering provider: {:?}",
        pair.calls
    );
    assert_eq!(pair.host.poll_timeout(), None);
}

/// The outcome a call must have, once the provider has answered it.
#[derive(Debug)]
enum Expect {
    Described(ProviderSchema),
    Ok(Value),
    Failed(ProviderError),
}

/// The state of [`fuzz_pair`].
struct Pair {
    host: Client,
    provider: Server,
    now: Instant,
    wire_to_provider: VecDeque<Vec<u8>>,
    wire_to_host: VecDeque<Vec<u8>>,
    /// Requests the provider has received and not answered, in arrival order.
    open: Vec<ServerEvent>,
    /// Calls without an outcome: id → (method, action, deadline).
    calls: BTreeMap<Id, (Method, String, Option<Instant>)>,
    /// What the provider answered, by id, until the host sees it.
    answers: BTreeMap<Id, Expect>,
    /// The provider died: answers still on the wire never arrive.
    dead: bool,
}

impl Pair {
    fn new(now: Instant) -> Self {
        Self {
            host: Client::new(),
            provider: Server::new(),
            now,
            wire_to_provider: VecDeque::new(),
            wire_to_host: VecDeque::new(),
            open: Vec::new(),
            calls: BTreeMap::new(),
            answers: BTreeMap::new(),
            dead: false,
        }
    }

    fn sent(
        &mut self,
        sent: Result<Id, ProtocolError>,
        allowed: bool,
        method: Method,
        action: String,
    ) {
        match sent {
            Ok(id) => {
                assert!(allowed, "{method} accepted in the wrong state");
                let deadline = self
                    .host
                    .poll_timeout()
                    .filter(|_| method == Method::Describe);
                let fresh = self.calls.insert(id.clone(), (method, action, deadline));
                assert!(fresh.is_none(), "id {id} reused while in flight");
            }
            Err(e) => {
                assert!(!allowed, "{method} refused in a state that allows it: {e}");
                assert!(matches!(e, ProtocolError::Unexpected { .. }));
            }
        }
        self.check();
    }

    fn deliver_to_provider(&mut self) {
        let Some(frame) = self.wire_to_provider.pop_front() else {
            return;
        };
        assert_eq!(self.provider.handle_frame(&frame), Ok(()), "a host frame");
        self.open
            .extend(std::iter::from_fn(|| self.provider.poll_event()));
        self.check();
    }

    fn deliver_to_host(&mut self) {
        let Some(frame) = self.wire_to_host.pop_front() else {
            return;
        };
        assert_eq!(self.host.handle_frame(&frame), Ok(()), "a provider frame");
        self.check();
    }

    fn answer(&mut self, k: usize, ok: bool) {
        if self.open.is_empty() {
            return;
        }
        let event = self.open.remove(k);
        let error = ProviderError::new(codes::EXECUTE_FAILED, "no").with_detail("why");
        let (id, result, expect) = match event {
            ServerEvent::Describe { id } => {
                let schema =
                    ProviderSchema::new("fuzz").with_action("echo", ActionSchema::new("echo"));
                let r = self.provider.respond_describe(id.clone(), &schema);
                (id, r, Expect::Described(schema))
            }
            ServerEvent::Configure { id, config } if ok => {
                let r = self.provider.respond_configure(id.clone(), Ok(()));
                assert!(config.get("k").is_some(), "config arrives: {config}");
                (id, r, Expect::Ok(Value::Null))
            }
            ServerEvent::Execute { id, attrs, .. } if ok => {
                let r = self.provider.respond_execute(id.clone(), Ok(attrs.clone()));
                (id, r, Expect::Ok(attrs))
            }
            ServerEvent::Shutdown { id } => {
                let r = self.provider.respond_shutdown(id.clone());
                (id, r, Expect::Ok(Value::Null))
            }
            ServerEvent::Configure { id, .. } | ServerEvent::Execute { id, .. } => {
                let r = self.provider.respond_error(id.clone(), error.clone());
                (id, r, Expect::Failed(error))
            }
        };
        assert_eq!(result, Ok(()), "answering {id}");
        self.answers.insert(id, expect);
        self.check();
    }

    /// Move frames onto the wires and check every outcome the host reports.
    fn check(&mut self) {
        self.wire_to_provider
            .extend(std::iter::from_fn(|| self.host.poll_transmit()));
        self.wire_to_host
            .extend(std::iter::from_fn(|| self.provider.poll_transmit()));
        while let Some(event) = self.host.poll_event() {
            let id = match &event {
                ClientEvent::Described { id, .. }
                | ClientEvent::Configured { id, .. }
                | ClientEvent::Executed { id, .. }
                | ClientEvent::ShutDown { id, .. } => id.clone(),
            };
            let (method, action, _) = self
                .calls
                .remove(&id)
                .unwrap_or_else(|| panic!("an outcome for {id}, which has none due: {event:?}"));
            let answer = self.answers.remove(&id).filter(|_| !self.dead);
            match (&event, answer) {
                // Timed out, or the provider died: a local outcome, whatever was answered.
                (
                    ClientEvent::Described {
                        result: Err(CallError::TimedOut { .. }),
                        ..
                    },
                    _,
                ) => assert_eq!(method, Method::Describe),
                (_, None) => {
                    let local = match &event {
                        ClientEvent::Described { result, .. } => result.as_ref().err(),
                        ClientEvent::Configured { result, .. }
                        | ClientEvent::ShutDown { result, .. } => result.as_ref().err(),
                        ClientEvent::Executed { result, .. } => result.as_ref().err(),
                    };
                    assert!(
                        matches!(local, Some(CallError::Provider(e)) if e.message == "provider exited"),
                        "an unanswered call completed with {event:?}"
                    );
                }
                (ClientEvent::Described { result, .. }, Some(Expect::Described(schema))) => {
                    assert_eq!(result.as_ref(), Ok(&schema))
                }
                (ClientEvent::Configured { result, .. }, Some(Expect::Ok(_)))
                | (ClientEvent::ShutDown { result, .. }, Some(Expect::Ok(_))) => {
                    assert_eq!(result, &Ok(()))
                }
                (ClientEvent::Configured { result, .. }, Some(Expect::Failed(e))) => {
                    assert_eq!(result, &Err(CallError::Provider(e)))
                }
                (
                    ClientEvent::Executed {
                        result,
                        action: got,
                        ..
                    },
                    Some(expect),
                ) => {
                    assert_eq!(got, &action);
                    match expect {
                        Expect::Ok(outputs) => assert_eq!(result, &Ok(outputs)),
                        Expect::Failed(e) => assert_eq!(result, &Err(CallError::Provider(e))),
                        Expect::Described(_) => panic!("a schema answered an execute"),
                    }
                }
                (event, answer) => panic!("{method} completed with {event:?}, sent {answer:?}"),
            }
        }
        let want = self.calls.values().filter_map(|(_, _, d)| *d).min();
        assert_eq!(
            self.host.poll_timeout(),
            want,
            "the timer is describe's deadline"
        );
    }
}
