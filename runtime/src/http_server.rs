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

use std::time::Duration;

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
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
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
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
                let service = TowerToHyperService::new(app.clone());
                let (builder, watcher, stop) =
                    (builder.clone(), graceful.watcher(), shutdown.clone());
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
                    let connection = builder
                        .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                        .into_owned();
                    // A connection's end (a client gone, a reset) is the client's business.
                    let _ = watcher.watch(connection).await;
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    while connections.join_next().await.is_some() {}
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
