//! A component's `wasi:sockets` TCP connections on the session's tape: recorded byte for byte
//! under `--record`, served from the recording in a replay with no network at all.
//!
//! ```text
//!  record: start-connect ─► wasmtime-wasi's (socket_addr_check admits, the kernel connects)
//!          finish-connect ─► wasmtime-wasi's, then `open` (rule, pinned address) and the two
//!                            streams swapped for taps (children of the socket, as before):
//!                            each read ─► `@N <`, EOF ─► `@N <end`; each write ─► `@N >`
//!          shutdown(send) ─► `@N >end`;  the socket and both streams gone ─► `@N close`
//!  replay: start-connect ─► Resolver::admit ─► NetReplay::claim (via, host, port, order)
//!                            (no socket connects: the kernel is never asked)
//!          finish-connect ─► streams backed by the recording (net::ByteTape):
//!                            writes compared with `>` (first difference: a divergence),
//!                            reads get `<`, each once the bytes recorded before it were sent
//! ```
//!
//! Why these functions: wasmtime-wasi keeps a socket's state private, so sandpipe cannot wrap
//! the socket, only what the guest is handed. `finish-connect` is where the guest gets its
//! streams, so it is shadowed in the component linker (as `sockets.rs` shadows
//! `ip-name-lookup`), calls wasmtime-wasi's own `HostTcpSocket::finish_connect`, and puts
//! wrappers around the `input-stream` and `output-stream` it returned, as children of the
//! socket in the resource table, where wasmtime-wasi had put them. The recording needs no more
//! from the live path but `shutdown` (a half-close) and the socket's drop (the close).
//!
//! A replay must not reach the network, and wasmtime-wasi's `start-connect` starts a kernel
//! connect; so in a replay `start-connect` is sandpipe's: it decides on the address as the
//! allow-list would (`Resolver::admit`) and claims the recorded connection, and the socket
//! stays unconnected. Its pollable (`tcp-socket.subscribe`) is then ready at once, since
//! wasmtime-wasi sees no operation in progress, and `finish-connect` hands out the recording's
//! streams. This is what Rust's `std::net::TcpStream::connect` calls on `wasm32-wasip2`
//! (wasi-libc's `connect`: `start-connect`, block on the socket's pollable, `finish-connect`),
//! and what any guest written against `wasi:sockets/tcp` calls.
//!
//! What a replayed socket does not have: a local or remote address (`local-address` and
//! `remote-address` answer `invalid-state`, as for an unconnected socket), socket options
//! beyond wasmtime-wasi's defaults, and `listen`/`accept` (refused in any case). A recorded
//! connection that failed (`@N failed`) fails the same way (`connection-refused`). A write
//! after a divergence, and every later one, fails; reads wait for nothing the recording does
//! not have (a server that never closed never closes).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};

use bytes::Bytes;
use sandpipe_proto::transcript::{NetDir, NetEvent, NetKind, NetNote, NetOpen, NetVia};
use wasmtime::StoreContextMut;
use wasmtime::component::{Resource, ResourceType};
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, IpSocketAddress, Network};
use wasmtime_wasi::p2::bindings::sockets::tcp::{HostTcpSocket, ShutdownType, TcpSocket};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, InputStream, OutputStream, Pollable, SocketError, StreamError,
    StreamResult,
};
use wasmtime_wasi::sockets::WasiSocketsView as _;

use super::State2;
use crate::net::{Admitted, ByteRead, ByteTape, NetSink, NetTape, PlayedBytes, Resolver, Via};

/// The interface whose connect is shadowed (a guest importing any 0.2.x reaches it through
/// the linker's semver matching).
const P2_TCP: &str = "wasi:sockets/tcp@0.2.12";

/// How much a replayed output stream lets the guest write at once.
const REPLAY_WRITE_PERMIT: usize = 64 * 1024;

/// What the session knows of each TCP socket the tape follows, by the socket's handle.
#[derive(Default)]
pub(crate) struct TcpTaps {
    sockets: HashMap<u32, Entry>,
}

enum Entry {
    /// Recorded: a connect to this address is under way.
    Connecting(SocketAddr),
    /// Recorded: connected, its streams tapped.
    Taped(Arc<Tap>),
    /// Replayed: the connect decided (a recorded connection, or the guest's error).
    Claimed(Result<ByteTape, ErrorCode>),
    /// Replayed: connected, its streams the recording's.
    Played(Arc<Mutex<Played>>),
}

/// Shadow `start-connect`, `finish-connect`, `shutdown` and the socket's drop.
pub(super) fn link_p2(linker: &mut wasmtime::component::Linker<State2>) -> wasmtime::Result<()> {
    let mut tcp = linker.instance(P2_TCP)?;
    tcp.resource(
        "tcp-socket",
        ResourceType::host::<TcpSocket>(),
        |mut store, rep| drop_socket(store.data_mut(), rep),
    )?;
    tcp.func_wrap("[method]tcp-socket.start-connect", start_connect)?;
    tcp.func_wrap("[method]tcp-socket.finish-connect", finish_connect)?;
    tcp.func_wrap("[method]tcp-socket.shutdown", shutdown)
}

/// wasmtime-wasi's answer as the guest gets it: its error code, or a trap.
fn guest<T>(result: Result<T, SocketError>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match result {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

fn borrow(rep: u32) -> Resource<TcpSocket> {
    Resource::new_borrow(rep)
}

/// The host a connection to `admitted` is recorded and claimed under: the name it was
/// reached by, else the address.
fn tape_host(admitted: &Admitted) -> String {
    admitted
        .name
        .clone()
        .unwrap_or_else(|| admitted.addr.ip().to_string())
}

fn start_connect(
    mut store: StoreContextMut<'_, State2>,
    (this, network, remote): (Resource<TcpSocket>, Resource<Network>, IpSocketAddress),
) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
    let state = store.data_mut();
    let rep = this.rep();
    let addr = SocketAddr::from(remote);
    match state.resolver.tape().cloned() {
        Some(NetTape::Replay(replay)) => {
            // The network resource is the capability to connect; it must be a live one.
            state.table.get(&network)?;
            state.table.get(&this)?;
            if state.tcp.sockets.contains_key(&rep) {
                return Ok((Err(ErrorCode::InvalidState),));
            }
            if addr.ip().is_unspecified() || addr.port() == 0 {
                return Ok((Err(ErrorCode::InvalidArgument),));
            }
            let claimed = match state.resolver.admit(addr, None, Via::WasiSockets) {
                Err(_) => Err(ErrorCode::AccessDenied),
                Ok(admitted) => {
                    let host = tape_host(&admitted);
                    match replay.claim(NetVia::WasiSockets, &host, addr.port()) {
                        None => Err(ErrorCode::AccessDenied),
                        Some(conn) => match replay.play_bytes(conn) {
                            None => Err(ErrorCode::AccessDenied),
                            Some(PlayedBytes::Failed(_)) => Err(ErrorCode::ConnectionRefused),
                            Some(PlayedBytes::Connected(tape)) => Ok(tape),
                        },
                    }
                }
            };
            state.tcp.sockets.insert(rep, Entry::Claimed(claimed));
            Ok((Ok(()),))
        }
        tape => {
            let started = guest(HostTcpSocket::start_connect(
                &mut state.sockets(),
                this,
                network,
                remote,
            ))?;
            if started.is_ok() && matches!(tape, Some(NetTape::Record(_))) {
                state.tcp.sockets.insert(rep, Entry::Connecting(addr));
            }
            Ok((started,))
        }
    }
}

type Streams = (Resource<DynInputStream>, Resource<DynOutputStream>);

fn finish_connect(
    mut store: StoreContextMut<'_, State2>,
    (this,): (Resource<TcpSocket>,),
) -> wasmtime::Result<(Result<Streams, ErrorCode>,)> {
    let state = store.data_mut();
    let rep = this.rep();
    match state.tcp.sockets.remove(&rep) {
        Some(Entry::Claimed(claimed)) => {
            let tape = match claimed {
                Ok(tape) => tape,
                Err(code) => return Ok((Err(code),)),
            };
            let played = Arc::new(Mutex::new(Played { tape, waker: None }));
            let input: DynInputStream = Box::new(PlayedInput(played.clone()));
            let output: DynOutputStream = Box::new(PlayedOutput(played.clone()));
            let input = state.table.push_child(input, &this)?;
            let output = state.table.push_child(output, &this)?;
            state.tcp.sockets.insert(rep, Entry::Played(played));
            Ok((Ok((input, output)),))
        }
        Some(Entry::Connecting(addr)) => {
            let finished = guest(HostTcpSocket::finish_connect(
                &mut state.sockets(),
                borrow(rep),
            ))?;
            match finished {
                Err(ErrorCode::WouldBlock) => {
                    state.tcp.sockets.insert(rep, Entry::Connecting(addr));
                    Ok((Err(ErrorCode::WouldBlock),))
                }
                finished => Ok((record(state, &this, addr, finished)?,)),
            }
        }
        other => {
            if let Some(entry) = other {
                state.tcp.sockets.insert(rep, entry);
            }
            Ok((guest(HostTcpSocket::finish_connect(
                &mut state.sockets(),
                this,
            ))?,))
        }
    }
}

/// Write a finished live connect to `addr` into the recording: its `open`, then either its
/// failure or taps around its streams. A connect the allow-list refused is not a connection,
/// and a recording that stopped (`--max-record`) fails the connect.
fn record(
    state: &mut State2,
    this: &Resource<TcpSocket>,
    addr: SocketAddr,
    finished: Result<Streams, ErrorCode>,
) -> wasmtime::Result<Result<Streams, ErrorCode>> {
    let Some(NetTape::Record(sink)) = state.resolver.tape().cloned() else {
        return Ok(finished);
    };
    if matches!(finished, Err(ErrorCode::AccessDenied)) {
        return Ok(finished);
    }
    let opened = open_line(&state.resolver, addr).map(|open| sink.open(&open));
    let conn = match opened {
        Some(Ok(conn)) => conn,
        // Admitted moments ago, so always known; a stopped recording admits nothing more.
        None | Some(Err(_)) => {
            if let Ok((input, output)) = finished {
                state.table.delete(input)?;
                state.table.delete(output)?;
            }
            return Ok(Err(ErrorCode::AccessDenied));
        }
    };
    let (input, output) = match finished {
        Ok(streams) => streams,
        Err(code) => {
            let reason = format!("the connection failed ({code})");
            let _ = sink
                .event(conn, &NetEvent::Failed(NetNote { reason }))
                .and_then(|()| sink.event(conn, &NetEvent::Close));
            return Ok(Err(code));
        }
    };
    let tap = Arc::new(Tap {
        sink,
        conn,
        ended_in: AtomicBool::new(false),
        ended_out: AtomicBool::new(false),
    });
    let input: DynInputStream = Box::new(TapedInput {
        inner: state.table.delete(input)?,
        tap: tap.clone(),
    });
    let output: DynOutputStream = Box::new(TapedOutput {
        inner: state.table.delete(output)?,
        tap: tap.clone(),
    });
    let input = state.table.push_child(input, this)?;
    let output = state.table.push_child(output, this)?;
    state.tcp.sockets.insert(this.rep(), Entry::Taped(tap));
    Ok(Ok((input, output)))
}

/// The `open` line of a connection to `addr`: the decision `socket_addr_check` made.
fn open_line(resolver: &Resolver, addr: SocketAddr) -> Option<NetOpen> {
    let admitted = resolver.admission(addr, None)?;
    Some(NetOpen {
        via: NetVia::WasiSockets,
        host: tape_host(&admitted),
        port: admitted.addr.port(),
        kind: Some(NetKind::Bytes),
        addr: Some(admitted.addr.to_string()),
        rule: Some(admitted.rule),
    })
}

fn shutdown(
    mut store: StoreContextMut<'_, State2>,
    (this, how): (Resource<TcpSocket>, ShutdownType),
) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
    let state = store.data_mut();
    let rep = this.rep();
    let sends = matches!(how, ShutdownType::Send | ShutdownType::Both);
    match state.tcp.sockets.get(&rep) {
        Some(Entry::Played(played)) => {
            if sends {
                lock(played).end_writing();
            }
            Ok((Ok(()),))
        }
        entry => {
            let tap = match entry {
                Some(Entry::Taped(tap)) => Some(tap.clone()),
                _ => None,
            };
            let done = guest(HostTcpSocket::shutdown(&mut state.sockets(), this, how))?;
            if let (Ok(()), Some(tap), true) = (&done, tap, sends) {
                tap.end(NetDir::Out);
            }
            Ok((done,))
        }
    }
}

/// The socket's destructor: what the tape held of it goes with it (a replayed one sends no
/// more), then wasmtime-wasi's own drop.
fn drop_socket(state: &mut State2, rep: u32) -> wasmtime::Result<()> {
    if let Some(Entry::Played(played)) = state.tcp.sockets.remove(&rep) {
        lock(&played).end_writing();
    }
    HostTcpSocket::drop(&mut state.sockets(), Resource::new_own(rep))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A recorded connection's place in the recording. Its `close` is written when the last of
/// the socket and its two streams is gone.
struct Tap {
    sink: Arc<dyn NetSink>,
    conn: u64,
    ended_in: AtomicBool,
    ended_out: AtomicBool,
}

impl Tap {
    /// Record `bytes` that passed `dir`'s way; a recording that stopped fails the stream.
    fn data(&self, dir: NetDir, bytes: &[u8]) -> StreamResult<()> {
        self.sink
            .data(self.conn, dir, bytes)
            .map_err(|e| StreamError::LastOperationFailed(wasmtime::Error::new(e)))
    }

    /// Record that no more bytes go `dir`'s way (once).
    fn end(&self, dir: NetDir) {
        let ended = match dir {
            NetDir::Out => &self.ended_out,
            _ => &self.ended_in,
        };
        if !ended.swap(true, Ordering::Relaxed) {
            let _ = self.sink.event(self.conn, &NetEvent::End { dir });
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = self.sink.event(self.conn, &NetEvent::Close);
    }
}

/// A live connection's input stream, each read recorded as the guest gets it.
struct TapedInput {
    inner: DynInputStream,
    tap: Arc<Tap>,
}

#[wasmtime_wasi::async_trait]
impl InputStream for TapedInput {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match self.inner.read(size) {
            Ok(bytes) => {
                if !bytes.is_empty() {
                    self.tap.data(NetDir::In, &bytes)?;
                }
                Ok(bytes)
            }
            Err(StreamError::Closed) => {
                self.tap.end(NetDir::In);
                Err(StreamError::Closed)
            }
            Err(StreamError::LastOperationFailed(e)) => {
                let reason = format!("reading failed: {e}");
                let _ = self
                    .tap
                    .sink
                    .event(self.tap.conn, &NetEvent::Failed(NetNote { reason }));
                Err(StreamError::LastOperationFailed(e))
            }
            Err(e) => Err(e),
        }
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for TapedInput {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

/// A live connection's output stream, each write recorded once wasmtime-wasi took it.
struct TapedOutput {
    inner: DynOutputStream,
    tap: Arc<Tap>,
}

#[wasmtime_wasi::async_trait]
impl OutputStream for TapedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.inner.write(bytes.clone())?;
        self.tap.data(NetDir::Out, &bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for TapedOutput {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

/// A replayed connection: its recording, and the guest's read waiting for its own write.
struct Played {
    tape: ByteTape,
    waker: Option<Waker>,
}

impl Played {
    fn end_writing(&mut self) {
        self.tape.end_writing();
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// A replayed connection's input stream: the server's recorded bytes.
struct PlayedInput(Arc<Mutex<Played>>);

#[wasmtime_wasi::async_trait]
impl InputStream for PlayedInput {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match lock(&self.0).tape.read(size) {
            ByteRead::Data(bytes) => Ok(Bytes::from(bytes)),
            ByteRead::Wait => Ok(Bytes::new()),
            ByteRead::End => Err(StreamError::Closed),
            ByteRead::Failed(reason) => Err(StreamError::LastOperationFailed(
                wasmtime::format_err!("replay: {reason}"),
            )),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PlayedInput {
    /// Ready once a read gives something: bytes, the end or the failure.
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| {
            let mut played = lock(&self.0);
            if played.tape.read(0) == ByteRead::Wait {
                played.waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
    }
}

/// A replayed connection's output stream: the guest's bytes, compared with the recording.
struct PlayedOutput(Arc<Mutex<Played>>);

#[wasmtime_wasi::async_trait]
impl OutputStream for PlayedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut played = lock(&self.0);
        let taken = played.tape.write(&bytes);
        if let Some(w) = played.waker.take() {
            w.wake();
        }
        taken.map_err(|e| StreamError::LastOperationFailed(wasmtime::Error::new(e)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(REPLAY_WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PlayedOutput {
    async fn ready(&mut self) {}
}

impl Drop for PlayedOutput {
    /// The guest cannot write on this connection any more.
    fn drop(&mut self) {
        lock(&self.0).end_writing();
    }
}
