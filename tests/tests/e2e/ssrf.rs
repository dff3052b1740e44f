//! Server-side request forgery through the real binaries (issue 13): an agent whose model asks
//! `web_fetch` for an internal service on loopback, in every spelling, through a name that
//! resolves to loopback, through a redirect from an allowed host, and for the cloud metadata
//! address, gets a refusal it can read, and the internal service never sees a request.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use serde_json::json;
use taskforce_tests::StackOptions;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use crate::helpers::{RUN_TIMEOUT, SseReader, agent_json, create};

/// A tiny HTTP server on `addr` answering every request with `reply`; counts requests.
async fn serve(addr: &str, reply: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(addr).await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (port, hits)
}

#[tokio::test]
async fn web_fetch_never_reaches_loopback_link_local_or_a_redirect_into_them() {
    let (secret, secret_hits) = serve(
        "127.0.0.1:0",
        "HTTP/1.1 200 OK\r\ncontent-length: 14\r\nconnection: close\r\n\r\ninternal-secret".into(),
    )
    .await;
    let (redirector, redirector_hits) = serve(
        "127.0.0.2:0",
        format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{secret}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
    )
    .await;
    // A proxy in the executor's environment that would fetch anything it is asked for: the
    // web tools never use it (it would resolve `localhost` where the guard cannot look).
    let (proxy, proxy_hits) = serve(
        "127.0.0.1:0",
        "HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nproxied".into(),
    )
    .await;
    let urls = [
        format!("http://127.0.0.1:{secret}/"),
        format!("http://localhost:{secret}/"),
        format!("http://127.1:{secret}/"),
        format!("http://2130706433:{secret}/"),
        format!("http://0x7f000001:{secret}/"),
        format!("http://[::ffff:127.0.0.1]:{secret}/"),
        format!("http://127.0.0.2:{redirector}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ];
    let calls: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            format!("      - {{name: web_fetch, id: f{i}, arguments: {{url: \"{url}\"}}}}")
        })
        .collect();
    let script = format!(
        "turns:\n  - tool_calls:\n{}\n  - text: \"done\"\n",
        calls.join("\n")
    );
    let stack = StackOptions::full()
        .with_executor()
        // The redirector is an allowed host (as an operator's internal service could be); what it
        // redirects to is checked again.
        .executor_env("TASKFORCE_WEB_ALLOW_NETS", "127.0.0.2/32")
        .executor_env("HTTP_PROXY", format!("http://127.0.0.1:{proxy}"))
        .executor_env("http_proxy", format!("http://127.0.0.1:{proxy}"))
        .llm_script(script)
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("fetcher");
    body["tool_allowlist"] = json!(["web_fetch"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "fetch them", "agent_id": "fetcher"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert!(events.iter().any(|(n, _)| n == "done"), "{events:?}");
    for (i, url) in urls.iter().enumerate() {
        let call = format!("f{i}");
        let (name, event) = events
            .iter()
            .find(|(n, e)| e["call_id"] == call.as_str() && (n == "tool_end" || n == "tool_error"))
            .unwrap_or_else(|| panic!("no outcome for {url}: {events:?}"));
        let text = event.to_string();
        assert!(name == "tool_error", "{url} was fetched: {text}");
        assert!(
            text.contains("refused") || text.contains("only reach public addresses"),
            "{url}: the refusal says why: {text}"
        );
        assert!(!text.contains("internal-secret"), "{url}: {text}");
    }
    assert_eq!(
        secret_hits.load(Ordering::SeqCst),
        0,
        "the internal service was reached"
    );
    assert_eq!(proxy_hits.load(Ordering::SeqCst), 0, "the proxy was asked");
    assert_eq!(
        redirector_hits.load(Ordering::SeqCst),
        1,
        "the allowed host was asked once, and its redirect not followed"
    );
}
