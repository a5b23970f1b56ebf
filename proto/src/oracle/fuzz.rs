//! The oracle fuzz body: [`fuzz`], one machine at a time.

use super::*;

/// Fuzz body (for the `machine_oracle` cargo-fuzz target and the unit tests). Each line of
/// `data` is one frame.
///
/// Properties, besides never panicking:
/// - every line that parses as a [`Felt`] is its own canonical text, and one that fits in
///   128 bits round-trips through `u128`;
/// - host side: the lines are the plugin's frames. A first frame not starting with `{` closes
///   the client; `Ready` comes only out of the handshake; whenever the client is idle it
///   invokes again, and every invoke completes exactly once (with the id and selector it was
///   sent with, and only canonical felts on success), counting [`OracleClient::fail_pending`]
///   at the end; every frame it sends is valid JSON-RPC;
/// - plugin side: the lines are the host's frames. `ready` goes out first; each `Invoke` is
///   answered exactly once (a second answer is refused); after `shutdown` or a rejected
///   `ready` every frame is refused; every frame it sends starts with `{` and is valid
///   JSON-RPC.
pub fn fuzz(data: &[u8]) {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    for line in &lines {
        if let Ok(text) = std::str::from_utf8(line) {
            fuzz_felt(text);
        }
        if let Ok(bytes) = <[u8; 16]>::try_from(&line[..line.len().min(16)]) {
            let felt = Felt::from(u128::from_le_bytes(bytes));
            assert_eq!(Felt::parse(felt.as_str()), Ok(felt.clone()));
            fuzz_felt(felt.as_str());
        }
    }
    fuzz_client(&lines);
    fuzz_server(&lines);
}

fn fuzz_felt(text: &str) {
    let Ok(felt) = Felt::parse(text) else {
        return;
    };
    assert_eq!(felt.as_str(), text, "a parsed felt is its canonical text");
    let digits = text.len() - 2;
    match felt.to_u128() {
        Some(n) => assert_eq!(Felt::from(n), felt, "felt {text} round-trips through u128"),
        None => assert!(digits > 32, "felt {text} fits in 128 bits"),
    }
}

fn sent_frames(frames: impl Iterator<Item = Vec<u8>>) -> Vec<Message> {
    frames
        .map(|frame| {
            assert_eq!(frame.first(), Some(&FIRST_BYTE), "frames start with '{{'");
            Message::decode(&frame, DIALECT).unwrap_or_else(|e| {
                panic!(
                    "sent an invalid frame ({e}): {}",
                    String::from_utf8_lossy(&frame)
                )
            })
        })
        .collect()
}

/// Drain the client's events: `Ready` only out of the handshake; each outcome matches the
/// invoke in flight.
fn client_events(
    client: &mut OracleClient,
    before: ClientState,
    in_flight: &mut Option<(Id, String)>,
    completed: &mut usize,
) {
    while let Some(event) = client.poll_event() {
        match event {
            ClientEvent::Ready => assert_eq!(before, ClientState::AwaitingReady),
            ClientEvent::Invoked {
                id,
                selector,
                result,
            } => {
                assert_eq!(in_flight.take(), Some((id, selector)), "invoke outcome");
                *completed += 1;
                if let Ok(felts) = result {
                    felts.iter().for_each(|f| fuzz_felt(f.as_str()));
                }
            }
        }
    }
}

fn fuzz_client(lines: &[&[u8]]) {
    let mut client = OracleClient::new();
    let mut in_flight: Option<(Id, String)> = None;
    let (mut issued, mut completed) = (0usize, 0usize);
    for (i, line) in lines.iter().enumerate() {
        let before = client.state();
        let got = client.handle_frame(line);
        if i == 0 && line.first() != Some(&FIRST_BYTE) {
            assert!(got.is_err(), "a first frame without '{{' is refused");
            assert_eq!(client.state(), ClientState::Closed);
        }
        client_events(&mut client, before, &mut in_flight, &mut completed);
        let sent = sent_frames(std::iter::from_fn(|| client.poll_transmit()));
        if before == ClientState::Closed {
            assert!(
                got.is_err() && sent.is_empty(),
                "a closed client takes nothing"
            );
        }
        let selector = String::from_utf8_lossy(&line[..line.len().min(8)]).into_owned();
        let calldata = [Felt::from(i as u128), Felt::zero()];
        match client.invoke(&selector, &calldata) {
            Ok(id) => {
                assert_eq!(client.state(), ClientState::Invoking);
                assert!(in_flight.is_none(), "invoke while another is in flight");
                in_flight = Some((id, selector));
                issued += 1;
            }
            Err(_) => assert_ne!(client.state(), ClientState::Idle, "an idle client invokes"),
        }
        for msg in sent_frames(std::iter::from_fn(|| client.poll_transmit())) {
            assert!(matches!(msg, Message::Request { ref method, .. } if method == "invoke"));
        }
    }
    let before = client.state();
    client.fail_pending(&Stopped::by_host("plugin exited", vec!["tail".to_owned()]));
    client_events(&mut client, before, &mut in_flight, &mut completed);
    assert_eq!(client.state(), ClientState::Closed);
    assert_eq!(issued, completed, "every invoke completes exactly once");
    assert!(client.invoke("f", &[]).is_err());
    assert!(client.shutdown().is_err());
}

fn fuzz_server(lines: &[&[u8]]) {
    let mut server = OracleServer::new();
    let ready = sent_frames(std::iter::from_fn(|| server.poll_transmit()));
    assert_eq!(ready, vec![Message::request(0, "ready", None)]);
    for (i, line) in lines.iter().enumerate() {
        let terminated = server.must_terminate();
        let got = server.handle_frame(line);
        if terminated {
            assert!(got.is_err(), "a plugin that must exit takes nothing");
        }
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::Ready => assert_eq!(server.state(), ServerState::Serving),
                ServerEvent::Invoke { id, calldata, .. } => {
                    calldata.iter().for_each(|f| fuzz_felt(f.as_str()));
                    let answer = if i % 2 == 0 {
                        Ok(calldata.into_iter().rev().collect())
                    } else {
                        Err(ErrorObject::new(DIALECT.internal_error(), "no"))
                    };
                    assert_eq!(server.respond(id.clone(), answer), Ok(()));
                    assert_eq!(
                        server.respond(id.clone(), Ok(Vec::new())),
                        Err(ProtocolError::NotAwaitingResponse { id: id.to_string() })
                    );
                    let sent = sent_frames(std::iter::from_fn(|| server.poll_transmit()));
                    assert!(
                        matches!(&sent[..], [Message::Response { id: got, .. }] if *got == id),
                        "one answer per invoke: {sent:?}"
                    );
                }
                ServerEvent::Shutdown | ServerEvent::Rejected { .. } => {
                    assert!(server.must_terminate());
                }
            }
        }
        sent_frames(std::iter::from_fn(|| server.poll_transmit()));
    }
}
