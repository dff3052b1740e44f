//! `web_search` and `web_fetch` against a local server standing in for the web.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::Query,
    http::{StatusCode, header::CONTENT_TYPE},
    routing::get,
};
use executor_svc::tools::{ToolError, native::NativeToolsConfig};
use serde_json::json;

use super::{ctx, ctx_with, ok_text, output, tool_with};

const FIXTURE: &str = include_str!("fixtures/ddg.html");

const ARTICLE: &str = r#"<!doctype html><html><head><title>Invoices &amp; you</title>
<script>window.track("<p>hidden</p>")</script><style>body { color: red }</style></head>
<body><nav><a href="/">Home</a></nav><h1>Reading&nbsp;invoices</h1>
<p>An invoice has a <b>number</b>, a date
   and a total of &euro;42&#46;</p><ul><li>net</li><li>tax</li></ul></body></html>"#;

/// Starts the fake web on a loopback port; returns its base URL.
async fn serve() -> String {
    let app = Router::new()
        .route(
            "/html/",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                // Only the exact decoded query gets results: proves the encoding.
                let page = if q.get("q").map(String::as_str) == Some("rust async/await & co") {
                    FIXTURE.to_owned()
                } else {
                    "<html><body><div class=\"no-results\">No results.</div></body></html>"
                        .to_owned()
                };
                ([(CONTENT_TYPE, "text/html; charset=utf-8")], page)
            }),
        )
        .route(
            "/article",
            get(|| async { ([(CONTENT_TYPE, "text/html; charset=UTF-8")], ARTICLE) }),
        )
        .route(
            "/data.json",
            get(|| async {
                (
                    [(CONTENT_TYPE, "application/json")],
                    r#"{"a":[1,2],"b":"<p>kept</p>"}"#,
                )
            }),
        )
        .route(
            "/big.html",
            get(|| async {
                (
                    [(CONTENT_TYPE, "text/html")],
                    format!("<p>{}</p>", "word ".repeat(100_000)),
                )
            }),
        )
        .route(
            "/huge.txt",
            get(|| async { ([(CONTENT_TYPE, "text/plain")], "z".repeat(10 * 1024 * 1024)) }),
        )
        .route(
            "/img.png",
            get(|| async {
                (
                    [(CONTENT_TYPE, "image/png")],
                    vec![0x89u8, b'P', b'N', b'G', 0, 0, 0, 13],
                )
            }),
        )
        .route(
            "/missing",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    [(CONTENT_TYPE, "text/html")],
                    "<h1>Not here</h1>",
                )
            }),
        )
        .route(
            "/to",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let to = q.get("url").cloned().unwrap_or_default();
                (StatusCode::FOUND, [(axum::http::header::LOCATION, to)], "")
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn config(base: &str) -> NativeToolsConfig {
    NativeToolsConfig {
        web_search_url: format!("{base}/html/?q="),
        ..NativeToolsConfig::default()
    }
}

#[tokio::test]
async fn web_search_parses_titles_urls_and_snippets_and_skips_ads() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let search = tool_with(&config(&base), "web_search");
    let text = ok_text(
        search
            .call(
                &ctx(dir.path()),
                json!({ "query": "rust async/await & co" }),
            )
            .await,
    );
    let expected = "1. Asynchronous Programming in Rust\n   https://rust-lang.github.io/async-book/\n   \
                    Getting started with async/.await & futures — the official book.\n\
                    2. Tokio tutorial – Tokio\n   https://tokio.rs/tokio/tutorial?a=1&b=2\n   \
                    Tokio is an asynchronous runtime for the Rust programming language.\n\
                    3. futures - Rust\n   https://docs.rs/futures/";
    assert_eq!(text, expected);
    assert!(!text.contains("Buy Rust") && !text.contains("script.example"));

    let text = ok_text(
        search
            .call(
                &ctx(dir.path()),
                json!({ "query": "rust async/await & co", "num_results": 1 }),
            )
            .await,
    );
    assert!(
        text.starts_with("1. Asynchronous") && !text.contains("2. "),
        "{text}"
    );

    let text = ok_text(
        search
            .call(&ctx(dir.path()), json!({ "query": "zzz" }))
            .await,
    );
    assert_eq!(text, "no results for \"zzz\"");
    let r = search
        .call(&ctx(dir.path()), json!({ "query": "  " }))
        .await;
    assert!(
        matches!(r, Err(ToolError::InvalidArguments { .. })),
        "{r:?}"
    );
}

#[tokio::test]
async fn web_fetch_turns_html_into_text_and_passes_json_through() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = tool_with(&config(&base), "web_fetch");
    let text = ok_text(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/article") }),
            )
            .await,
    );
    assert_eq!(
        text,
        "Invoices & you\n\nHome\n\nReading invoices\n\nAn invoice has a number, a date and a total of €42.\n\n- net\n- tax"
    );
    let text = ok_text(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/data.json") }),
            )
            .await,
    );
    assert_eq!(text, r#"{"a":[1,2],"b":"<p>kept</p>"}"#);
    let (text, is_error) = output(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/missing") }),
            )
            .await,
    );
    assert!(
        is_error && text.starts_with("HTTP 404 Not Found\nNot here"),
        "{text}"
    );
    let (text, is_error) = output(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/img.png") }),
            )
            .await,
    );
    assert!(
        is_error && text.contains("binary content (image/png"),
        "{text}"
    );
    for url in ["file:///etc/passwd", "ftp://example.com/x", "not a url"] {
        let r = fetch.call(&ctx(dir.path()), json!({ "url": url })).await;
        assert!(
            matches!(r, Err(ToolError::InvalidArguments { .. })),
            "{url}: {r:?}"
        );
    }
}

#[tokio::test]
async fn web_fetch_caps_output_and_download_size() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(20), 2000);
    let fetch = tool_with(&config(&base), "web_fetch");
    let text = ok_text(
        fetch
            .call(&c, json!({ "url": format!("{base}/big.html") }))
            .await,
    );
    assert!(text.len() < 2100, "{}", text.len());
    assert!(
        text.contains("[output cut: showing the first 2000 of 499999 bytes]"),
        "{}",
        &text[text.len() - 80..]
    );

    let small = NativeToolsConfig {
        max_download_bytes: 100_000,
        ..config(&base)
    };
    let fetch = tool_with(&small, "web_fetch");
    let text = ok_text(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/huge.txt") }),
            )
            .await,
    );
    assert!(text.starts_with(&"z".repeat(65_536)), "{}", text.len());
    assert!(
        text.contains("[download cut at 100000 bytes]"),
        "{}",
        &text[text.len() - 100..]
    );
}

#[tokio::test]
async fn web_fetch_times_out_and_stops_on_cancellation() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = tool_with(&config(&base), "web_fetch");
    let c = ctx_with(dir.path(), Duration::from_millis(300), 1000);
    let started = Instant::now();
    let r = fetch
        .call(&c, json!({ "url": format!("{base}/slow") }))
        .await;
    assert!(matches!(r, Err(ToolError::Timeout { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let r = fetch
        .call(&c, json!({ "url": format!("{base}/slow") }))
        .await;
    assert!(matches!(r, Err(ToolError::Cancelled { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// The reason of a failed call.
fn refused(r: Result<executor_svc::tools::ToolOutcome, ToolError>) -> String {
    match r {
        Err(ToolError::Failed { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn web_fetch_reaches_no_internal_address_in_any_spelling_nor_through_a_redirect() {
    let base = serve().await;
    let port = base.rsplit(':').next().unwrap_or_default().to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    // Default configuration: the fake web is an internal address like any other.
    let fetch = tool_with(&NativeToolsConfig::default(), "web_fetch");
    for host in [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "[::ffff:127.0.0.1]",
        "localhost",
    ] {
        let url = format!("http://{host}:{port}/article");
        let why = refused(fetch.call(&ctx(dir.path()), json!({ "url": url })).await);
        assert!(
            why.contains("loopback") || why.contains("no allowed address"),
            "{url}: {why}"
        );
    }
    // The operator's own search host is allowed, but a redirect from it to another internal
    // address is not.
    let fetch = tool_with(&config(&base), "web_fetch");
    let ok = fetch
        .call(
            &ctx(dir.path()),
            json!({ "url": format!("{base}/article") }),
        )
        .await;
    assert!(ok_text(ok).contains("Reading invoices"));
    let inside = "http://169.254.169.254/latest/meta-data/";
    let why = refused(
        fetch
            .call(
                &ctx(dir.path()),
                json!({ "url": format!("{base}/to?url={inside}") }),
            )
            .await,
    );
    assert!(
        why.contains("redirect") && why.contains("link-local"),
        "{why}"
    );
    // An operator can allow a range.
    let allowed = <executor_svc::Config as clap::Parser>::try_parse_from([
        "executor-svc",
        "--web-allow-nets",
        "127.0.0.0/8",
    ])
    .expect("flags parse")
    .tools
    .config();
    let fetch = tool_with(&allowed, "web_fetch");
    let url = format!("http://127.0.0.1:{port}/article");
    assert!(
        ok_text(fetch.call(&ctx(dir.path()), json!({ "url": url })).await)
            .contains("Reading invoices")
    );
}
