//! Serving the router over HTTP/1 and HTTP/2 on the listener, with a limit on how long a client
//! may take to send a request's headers.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header-read timeout never fires there: a
//! client that opens connections and never finishes a request's headers held each one open
//! until the gateway ran out of file descriptors. Here every connection is served by
//! hyper-util's builder with a timer and [`HEADER_READ_TIMEOUT`], and belongs to the serving
//! future (a [`JoinSet`]): dropping it closes them all.

use std::time::Duration;

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long a client may take to send a request's headers (HTTP/1); past it the connection is
/// closed. Bodies and responses are not limited by it (streams run for minutes).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

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
                let connection = builder
                    .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                connections.spawn(async move {
                    // A connection's end (a client gone, a reset) is the client's business.
                    let _ = connection.await;
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    while connections.join_next().await.is_some() {}
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

        // Half a request's headers: the connection is closed once the limit has passed.
        let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .expect("write");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            slow.read_to_end(&mut rest),
        )
        .await;
        assert!(closed.is_ok(), "the half-sent request is still open");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops")
            .expect("joined");
    }
}
