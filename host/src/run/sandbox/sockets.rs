//! `wasi:sockets` for components, decided by sandpipe's [`Resolver`]: TCP connections to what
//! the allow-list admits, name lookups through sandpipe's own resolver, nothing else.
//!
//! ```text
//!  ip-name-lookup.resolve-addresses ─► AddressStream ─► Resolver::lookup (allow-list, pins,
//!   (shadowed in the linker)              (pollable)       DNS answers that are not public)
//!  tcp connect ─► socket_addr_check ─► Resolver::admit (a pinned address, or one a rule names)
//!   (connect, shutdown and the socket's drop shadowed by `tcp_tape`: recorded, or replayed)
//!  tcp/udp bind (but the implicit one) / listen, every datagram ─► refused, with an audit line
//! ```
//!
//! wasmtime-wasi resolves names itself (`tokio::net::lookup_host`), which would bypass the
//! allow-list, the `--resolve` pins and the check for answers that are not public. Its
//! `resolve-addresses` and the `resolve-address-stream` resource are therefore shadowed in the
//! component linker (as `open_files.rs` shadows `open-at`), rather than implemented as the
//! bindgen'd `Host` traits on a view type of sandpipe's: those traits are tied to
//! wasmtime-wasi's own stream type, whose insides are private. The TCP connect's own shadows,
//! for the session's tape, are `tcp_tape.rs`'s. Every other `wasi:sockets` function is
//! wasmtime-wasi's, gated by [`configure`]'s `socket_addr_check`.
//!
//! A refused lookup is the guest's ordinary `name-unresolvable`, whatever the reason (off the
//! list, not public, not found), so a plugin cannot probe which names exist. Core modules
//! (WASI p1) have no sockets.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use wasmtime::StoreContextMut;
use wasmtime::component::{Resource, ResourceType};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, IpAddress};
use wasmtime_wasi::p2::{DynPollable, Network, Pollable};
use wasmtime_wasi::sockets::SocketAddrUse;

use super::State2;
use super::tcp_tape;
use crate::net::{Refused, Resolver, Via};

/// The interface whose lookup is shadowed: the version wasmtime-wasi links (a guest importing
/// any 0.2.x reaches it through the linker's semver matching).
const P2_IP_NAME_LOOKUP: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// Give the guest TCP through `resolver` when the allow-list is not empty; UDP never.
///
/// UDP sockets can still be made then, so that what the guest tries is seen: every datagram
/// sent is refused (`access-denied`) with an audit line naming where it
/// was going, as a listen or a bind to a chosen address is; datagrams arriving at the socket's
/// ephemeral port are dropped unread.
pub(super) fn configure(b: &mut WasiCtxBuilder, resolver: &Arc<Resolver>) {
    let resolver = resolver.clone();
    let open = !resolver.policy().is_closed();
    // wasmtime-wasi's own lookup stays off: the linker's shadow below is the only one.
    b.allow_tcp(open)
        .allow_udp(open)
        .allow_ip_name_lookup(false)
        .socket_addr_check(move |addr, used| {
            let refuse = |why: &str| {
                resolver.audit_refusal(
                    Via::WasiSockets,
                    None,
                    Some(addr.ip()),
                    addr.port(),
                    why.to_owned(),
                );
                false
            };
            // A connect or send on an unbound socket first asks for the implicit bind to the
            // unspecified address and port 0 (the kernel picks an ephemeral port). That is the
            // one bind allowed: listening is refused, so no port is offered.
            let ephemeral = addr.ip().is_unspecified() && addr.port() == 0;
            let allowed = match used {
                SocketAddrUse::TcpConnect => resolver.admit(addr, None, Via::WasiSockets).is_ok(),
                SocketAddrUse::TcpBind | SocketAddrUse::UdpBind if ephemeral => true,
                SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                    refuse("binding an address of the guest's choosing is not allowed")
                }
                SocketAddrUse::TcpListen => refuse("listening is not allowed"),
                SocketAddrUse::UdpSend => refuse("UDP is not allowed"),
                // Per datagram, and not the guest's doing: dropped without a line.
                SocketAddrUse::UdpReceive => false,
                _ => refuse("not allowed"),
            };
            Box::pin(async move { allowed })
        });
}

/// Shadow p2's `resolve-addresses` and its stream with sandpipe's lookup, and the TCP
/// connect, shutdown and drop with the tape's ([`tcp_tape`]).
pub(super) fn link_p2(linker: &mut wasmtime::component::Linker<State2>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = tcp_tape::link_p2(linker)
        .and_then(|()| linker.instance(P2_IP_NAME_LOOKUP))
        .and_then(|mut lookup| {
            lookup.resource(
                "resolve-address-stream",
                ResourceType::host::<AddressStream>(),
                |mut store, rep| {
                    store
                        .data_mut()
                        .table
                        .delete(Resource::<AddressStream>::new_own(rep))?;
                    Ok(())
                },
            )?;
            lookup.func_wrap("resolve-addresses", resolve_addresses)?;
            lookup.func_wrap(
                "[method]resolve-address-stream.resolve-next-address",
                resolve_next_address,
            )?;
            lookup.func_wrap("[method]resolve-address-stream.subscribe", subscribe)
        });
    linker.allow_shadowing(false);
    linked
}

type Lookup = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, Refused>> + Send + Sync>>;

/// One lookup in flight or done: the `resolve-address-stream` resource.
pub(crate) enum AddressStream {
    Pending(Lookup),
    Done(Result<std::vec::IntoIter<IpAddr>, ErrorCode>),
}

impl AddressStream {
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let AddressStream::Pending(lookup) = self {
            let result = std::task::ready!(lookup.as_mut().poll(cx));
            *self = AddressStream::Done(
                result
                    .map(Vec::into_iter)
                    .map_err(|_| ErrorCode::NameUnresolvable),
            );
        }
        Poll::Ready(())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for AddressStream {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.poll_done(cx)).await;
    }
}

/// `resolve-addresses`: never blocks; the lookup runs as the stream is polled.
fn resolve_addresses(
    mut store: StoreContextMut<'_, State2>,
    (network, name): (Resource<Network>, String),
) -> wasmtime::Result<(Result<Resource<AddressStream>, ErrorCode>,)> {
    let state = store.data_mut();
    // The network resource is the capability to look names up; it must be a live one.
    state.table.get(&network)?;
    let resolver = state.resolver.clone();
    let lookup: Lookup =
        Box::pin(async move { resolver.lookup(&name, None, Via::WasiSockets).await });
    Ok((Ok(state.table.push(AddressStream::Pending(lookup))?),))
}

/// `[method]resolve-address-stream.resolve-next-address`: `would-block` until the lookup is
/// done, then its addresses one by one, then `none`.
fn resolve_next_address(
    mut store: StoreContextMut<'_, State2>,
    (stream,): (Resource<AddressStream>,),
) -> wasmtime::Result<(Result<Option<IpAddress>, ErrorCode>,)> {
    let stream = store.data_mut().table.get_mut(&stream)?;
    if stream
        .poll_done(&mut Context::from_waker(Waker::noop()))
        .is_pending()
    {
        return Ok((Err(ErrorCode::WouldBlock),));
    }
    Ok((match stream {
        AddressStream::Done(Ok(addrs)) => Ok(addrs.next().map(IpAddress::from)),
        AddressStream::Done(Err(e)) => Err(*e),
        AddressStream::Pending(_) => Err(ErrorCode::WouldBlock),
    },))
}

/// `[method]resolve-address-stream.subscribe`: ready once the lookup is done.
fn subscribe(
    mut store: StoreContextMut<'_, State2>,
    (stream,): (Resource<AddressStream>,),
) -> wasmtime::Result<(Resource<DynPollable>,)> {
    Ok((wasmtime_wasi::p2::subscribe(
        &mut store.data_mut().table,
        stream,
    )?,))
}
