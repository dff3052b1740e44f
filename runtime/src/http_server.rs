//! Serving a router over HTTP/1 and HTTP/2 on a listener, with a limit on how long a client
//! may take to send a request's headers: the gateway's API and every service's `/metrics`.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header-read timeout never fires there: a
//! client that opens connections and never finishes a request's headers held each one open
//! until the service ran out of file descriptors. Here every connection is served by
//! hyper-util's builder with a timer and [`HEADER_READ_TIMEOUT`], and belongs to the serving
//! future (a [`JoinSet`]): dropping it closes them all. hyper-util first reads enough to tell
//! HTTP/1 from HTTP/2, with no timer of its own: a connection gets [`HEADER_READ_TIMEOUT`] for
//! that too, so one that sends nothing (or part of the HTTP/2 preface) is closed as well.
//! An HTTP/2 connection answers hyper's pings while it sends nothing: one with no request open
//! for [`IDLE_TIMEOUT`] is closed (a GOAWAY, then the socket after [`CLOSING_GRACE`]).

use std::{
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::{Router, body::Body, response::Response};
use http::Request;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long a client may take to send its first bytes, and then (HTTP/1) a request's headers;
/// past either the connection is closed. Bodies and responses are not limited by it (streams run for
/// minutes).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay open with no request in flight (HTTP/1 keep-alive
/// connections are closed sooner, by [`HEADER_READ_TIMEOUT`] for their next request).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a connection closed for being idle may take to go once told (an HTTP/2 client
/// that does not answer the GOAWAY's ping is cut off then).
pub const CLOSING_GRACE: Duration = Duration::from_secs(10);

/// What an HTTP/2 connection starts with (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long to wait before looking again at a connection that has sent part of [`PREFACE`]
/// only, the first time; the wait doubles up to [`PARTIAL_PREFACE_POLL_MAX`] (a dozen looks
/// within the limit, not a thousand).
const PARTIAL_PREFACE_POLL: Duration = Duration::from_millis(10);
const PARTIAL_PREFACE_POLL_MAX: Duration = Duration::from_millis(1000);

/// How long to wait before accepting again after `accept` failed (out of file descriptors: the
/// connections that end free some).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` fires, then stops accepting and lets the open
/// connections finish (HTTP/1 after their current response, HTTP/2 with a GOAWAY); returns once
/// they have. The caller bounds that wait by dropping this future.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    serve_within(listener, app, shutdown, IDLE_TIMEOUT, CLOSING_GRACE).await;
}

/// [`serve`], closing connections idle for `idle`, cut off `grace` after.
async fn serve_within(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    idle: Duration,
    grace: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                // Small JSON answers must not wait for Nagle's algorithm.
                let _ = tcp.set_nodelay(true);
                let activity = Arc::new(Activity::new());
                let service = TowerToHyperService::new(Counted {
                    app: app.clone(),
                    activity: Arc::clone(&activity),
                });
                // A token of its own: waiting on the shared one would take its one lock at every
                // wake of every connection.
                let (builder, stop) = (builder.clone(), shutdown.child_token());
                connections.spawn(async move {
                    let known = tokio::select! {
                        () = stop.cancelled() => false,
                        known = tokio::time::timeout(HEADER_READ_TIMEOUT, protocol_known(&tcp)) => {
                            matches!(known, Ok(Ok(true)))
                        }
                    };
                    if !known {
                        return;
                    }
                    let io = Watched {
                        io: tcp,
                        activity: Arc::clone(&activity),
                    };
                    let connection = builder
                        .serve_connection_with_upgrades(TokioIo::new(io), service)
                        .into_owned();
                    let mut connection = std::pin::pin!(connection);
                    let stopping = stop.cancelled();
                    let mut stopping = std::pin::pin!(stopping);
                    let timer = tokio::time::sleep(idle);
                    let mut timer = std::pin::pin!(timer);
                    // Until the connection ends, is idle for `idle` (then told to close), or the
                    // service stops (the caller bounds that wait).
                    let mut closing = false;
                    loop {
                        tokio::select! {
                            // A connection's end (a client gone, a reset) is the client's
                            // business.
                            _ = connection.as_mut() => return,
                            () = &mut stopping, if !closing => {
                                connection.as_mut().graceful_shutdown();
                                let _ = connection.await;
                                return;
                            }
                            () = &mut timer => {
                                let limit = if closing { grace } else { idle };
                                match activity.idle_left(limit) {
                                    // Told to close and still quiet `grace` later (an HTTP/2
                                    // client that does not answer the GOAWAY's ping): cut off.
                                    Some(Duration::ZERO) if closing => return,
                                    Some(Duration::ZERO) => {
                                        connection.as_mut().graceful_shutdown();
                                        closing = true;
                                        timer.as_mut().reset(tokio::time::Instant::now() + grace);
                                    }
                                    // A request in flight (one that came in the GOAWAY's
                                    // window too), or bytes moved lately: look again later.
                                    left => timer
                                        .as_mut()
                                        .reset(tokio::time::Instant::now() + left.unwrap_or(limit)),
                                }
                            }
                        }
                    }
                });
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// The requests in flight on one connection, and when it was last busy: a request ended, or
/// bytes were read or written (a large answer is written long after its body was taken).
struct Activity {
    opened: Instant,
    open: AtomicUsize,
    /// When it was last busy, in milliseconds after `opened`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Notes that the connection is busy now.
    fn busy(&self) {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Release);
    }

    /// How long the connection may stay idle from now: `None` while a request is in flight,
    /// zero once it has been idle for `idle`.
    fn idle_left(&self, idle: Duration) -> Option<Duration> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        Some(idle.saturating_sub(self.opened.elapsed().saturating_sub(last)))
    }
}

/// A request in flight, until its response's body is done (or dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.open.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.busy();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's socket, noting in its [`Activity`] each read or write that moved bytes.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    fn moved<T>(&self, polled: Poll<std::io::Result<T>>, bytes: bool) -> Poll<std::io::Result<T>> {
        if bytes && matches!(polled, Poll::Ready(Ok(_))) {
            self.activity.busy();
        }
        polled
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        let read = buf.filled().len() > before;
        this.moved(polled, read)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.moved(polled, !buf.is_empty())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.moved(polled, bufs.iter().any(|b| !b.is_empty()))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// `app`, counting its requests in flight on one connection into `activity`.
#[derive(Clone)]
struct Counted {
    app: Router,
    activity: Arc<Activity>,
}

impl<B> tower::Service<Request<B>> for Counted
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let in_flight = InFlight::new(&self.activity);
        let answer = tower::Service::call(&mut self.app, request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A response body holding its request's [`InFlight`] until it is done.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Waits until `tcp` has sent what hyper-util reads to tell HTTP/1 from HTTP/2 (the
/// [`PREFACE`], or a byte that is not the preface's): true then, false when the client closed
/// first. Only peeks: hyper reads the bytes itself.
async fn protocol_known(tcp: &TcpStream) -> std::io::Result<bool> {
    let mut seen = [0u8; PREFACE.len()];
    let mut wait = PARTIAL_PREFACE_POLL;
    loop {
        let n = tcp.peek(&mut seen).await?;
        if n == 0 {
            return Ok(false);
        }
        if n == PREFACE.len() || seen[..n] != PREFACE[..n] {
            return Ok(true);
        }
        // Part of the preface: peeking again at once would find the same bytes.
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(PARTIAL_PREFACE_POLL_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_idle_connection_is_closed_and_a_long_response_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let slow = || async {
            Body::from_stream(futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                Ok::<_, Infallible>("slow")
            }))
        };
        let big = || async { vec![b'x'; 16 << 20] };
        let app = Router::new()
            .route("/slow", axum::routing::get(slow))
            .route("/big", axum::routing::get(big));
        let shutdown = CancellationToken::new();
        let (idle, grace) = (Duration::from_millis(300), Duration::from_millis(300));
        let server = tokio::spawn(serve_within(listener, app, shutdown.clone(), idle, grace));

        // An HTTP/2 client that says nothing after its SETTINGS (it would answer hyper's
        // keep-alive pings) is closed, after the idle time and the grace its GOAWAY gets.
        let mut h2 = tokio::net::TcpStream::connect(addr).await.expect("connect");
        h2.write_all(PREFACE).await.expect("write");
        h2.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0])
            .await
            .expect("write");
        let mut seen = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), h2.read_to_end(&mut seen)).await;
        assert!(closed.is_ok(), "the idle HTTP/2 connection is still open");

        // A response that takes longer than the idle time is not cut.
        let mut long = tokio::net::TcpStream::connect(addr).await.expect("connect");
        long.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), long.read_to_string(&mut answer))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(answer.contains("slow"), "{answer}");

        // A large answer taken whole by hyper at once but read slowly: written long after its
        // body was done, and not cut.
        let mut reader = tokio::net::TcpStream::connect(addr).await.expect("connect");
        reader
            .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut got = 0usize;
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), reader.read(&mut chunk))
                .await
                .expect("read in time")
                .expect("read");
            if n == 0 {
                break;
            }
            got += n;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(got > 16 << 20, "{got} bytes arrived");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops")
            .expect("joined");
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new().route("/", axum::routing::get(|| async { "hi" }));
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, shutdown.clone()));

        // A whole request is answered.
        let mut whole = tokio::net::TcpStream::connect(addr).await.expect("connect");
        whole
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), whole.read_to_string(&mut answer))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(answer.ends_with("hi"), "{answer}");

        // Half a request's headers, nothing at all, or part of the HTTP/2 preface (before
        // hyper knows which protocol it is): each connection is closed once the limit has
        // passed (the same limit for all three, so they wait together).
        let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .expect("write");
        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut partial = tokio::net::TcpStream::connect(addr).await.expect("connect");
        partial.write_all(&PREFACE[..16]).await.expect("write");
        // A whole preface is served as HTTP/2: the server's SETTINGS frame comes.
        let mut h2 = tokio::net::TcpStream::connect(addr).await.expect("connect");
        h2.write_all(PREFACE).await.expect("write");
        let mut frame = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(5), h2.read_exact(&mut frame))
            .await
            .expect("answered in time")
            .expect("read");
        assert_eq!(frame[3], 0x4, "a SETTINGS frame: {frame:?}");
        let mut rest = Vec::new();
        for (what, socket) in [
            ("half-sent request", &mut slow),
            ("silent", &mut silent),
            ("partial preface", &mut partial),
        ] {
            let closed = tokio::time::timeout(
                HEADER_READ_TIMEOUT + Duration::from_secs(5),
                socket.read_to_end(&mut rest),
            )
            .await;
            assert!(closed.is_ok(), "the {what} connection is still open");
        }
        // (A graceful stop waits for an HTTP/2 client to answer its GOAWAY's ping: this raw
        // socket would not.)
        drop(h2);

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops")
            .expect("joined");
    }
}
