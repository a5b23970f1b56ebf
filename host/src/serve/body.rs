//! hyper's side of the endpoint: tokio's clock as its timer, and the response body, whole or
//! a stream of server-sent events (the TCP stream is hyper's IO through `net::HyperIo`).
//!
//! ```text
//!  Body::full(bytes)                  one frame, then the end
//!  Body::events(rx, on_end)           each message from rx as `event: message\ndata: JSON\n\n`,
//!                                     the end after the one marked last; on_end(finished)
//!                                     runs once, also when the client drops the response
//!  Lingering::new(request body)       a request body that, dropped before its end (a request
//!                                     refused before it was read), is read to its end by a
//!                                     task of its own, up to LINGER bytes
//! ```

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::Frame;
use serde_json::Value;
use tokio::sync::mpsc;

/// tokio's clock as hyper's timer (for the request head's deadline).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timer;

impl hyper::rt::Timer for Timer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Sleep(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Sleep(Box::pin(tokio::time::sleep_until(deadline.into()))))
    }
}

/// A tokio sleep as hyper's.
struct Sleep(Pin<Box<tokio::time::Sleep>>);

impl std::future::Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for Sleep {}

/// One message for an event stream, and whether it is the stream's last.
pub(super) type Event = (Value, bool);

/// Runs once when an event stream ends: `true` when its last message went out, `false` when
/// the client went away first (or the instance ended without answering).
pub(super) type OnEnd = Box<dyn FnOnce(bool) + Send>;

/// A response body.
pub(super) struct Body {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Events {
        rx: mpsc::UnboundedReceiver<Event>,
        on_end: Option<OnEnd>,
        finished: bool,
    },
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Full(b) => f
                .debug_tuple("Body::Full")
                .field(&b.as_ref().map(Bytes::len))
                .finish(),
            Kind::Events { finished, .. } => f
                .debug_struct("Body::Events")
                .field("finished", finished)
                .finish(),
        }
    }
}

impl Body {
    /// A whole body.
    pub(super) fn full(bytes: impl Into<Bytes>) -> Self {
        Body {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    /// No body.
    pub(super) fn empty() -> Self {
        Body {
            kind: Kind::Full(None),
        }
    }

    /// Server-sent events, one per message from `rx`, until the one marked last or until the
    /// sender is gone; `on_end` says which.
    pub(super) fn events(rx: mpsc::UnboundedReceiver<Event>, on_end: OnEnd) -> Self {
        Body {
            kind: Kind::Events {
                rx,
                on_end: Some(on_end),
                finished: false,
            },
        }
    }
}

/// One message as a server-sent event.
pub(super) fn sse(message: &Value) -> Bytes {
    let mut out = b"event: message\ndata: ".to_vec();
    // serde_json writes no newline inside a value: the event is one data line.
    out.extend(serde_json::to_vec(message).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Events {
                rx,
                on_end,
                finished,
            } => {
                if *finished {
                    return Poll::Ready(None);
                }
                match ready!(rx.poll_recv(cx)) {
                    Some((message, last)) => {
                        if last {
                            *finished = true;
                            if let Some(f) = on_end.take() {
                                f(true);
                            }
                        }
                        Poll::Ready(Some(Ok(Frame::data(sse(&message)))))
                    }
                    None => {
                        *finished = true;
                        if let Some(f) = on_end.take() {
                            f(false);
                        }
                        Poll::Ready(None)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Events { finished, .. } => *finished,
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Kind::Events { on_end, .. } = &mut self.kind
            && let Some(f) = on_end.take()
        {
            f(false);
        }
    }
}

/// How much of a refused request's body is read after its answer, so that the client gets the
/// answer: a connection closed with unread bytes is reset, and a reset throws away what the
/// client had not read yet (the `413` for a body it is still sending, a `401` or `403` that
/// came before its body). nginx's "lingering close" does the same.
const LINGER: usize = 1 << 20;

/// A request body that reads the rest of itself, up to [`LINGER`] bytes, when it is dropped
/// before its end. hyper goes on reading the connection for the task that holds it, and keeps
/// the connection for the next request once the body is whole; past `LINGER` the body is
/// dropped and hyper closes the connection.
pub(super) struct Lingering<B: http_body::Body + Unpin + Send + 'static> {
    inner: Option<B>,
}

impl<B: http_body::Body + Unpin + Send + 'static> Lingering<B> {
    pub(super) fn new(inner: B) -> Self {
        Lingering { inner: Some(inner) }
    }
}

impl<B: http_body::Body + Unpin + Send + 'static> http_body::Body for Lingering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), B::size_hint)
    }
}

impl<B: http_body::Body + Unpin + Send + 'static> Drop for Lingering<B> {
    fn drop(&mut self) {
        let Some(mut body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            use bytes::Buf;
            use http_body_util::BodyExt;
            let mut left = LINGER;
            while let Some(Ok(frame)) = body.frame().await {
                let Some(n) = frame.data_ref().map(Buf::remaining) else {
                    continue;
                };
                if n >= left {
                    return;
                }
                left -= n;
            }
        });
    }
}
