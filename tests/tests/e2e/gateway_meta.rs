//! The gateway's own endpoints: liveness, readiness (following the registry's health) and the
//! OpenAPI document, checked against the route table of `docs/rest-api.md`.

use std::time::Duration;

use serde_json::json;
use taskforce_tests::{eventually, paths, spawn_stack};

use crate::helpers::send;

/// `(method, path)` of every row of the route table in `docs/rest-api.md`.
fn documented_routes() -> Vec<(String, String)> {
    let doc = paths::workspace_root().join("docs").join("rest-api.md");
    let text = std::fs::read_to_string(&doc).expect("docs/rest-api.md is readable");
    let routes: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let method = *cells.get(1)?;
            if !["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) {
                return None;
            }
            let path = cells.get(2)?.split('`').nth(1)?;
            Some((method.to_ascii_lowercase(), path.to_owned()))
        })
        .collect();
    assert!(
        routes.len() >= 10,
        "could not read the route table of {}: {routes:?}",
        doc.display()
    );
    routes
}

#[tokio::test]
async fn healthz_and_readyz_follow_the_process_and_the_registry() {
    let mut stack = spawn_stack().await.expect("stack starts");
    let healthz = stack.url("/healthz");
    let readyz = stack.url("/readyz");
    let r = send(stack.http().get(&healthz)).await;
    assert_eq!(
        (r.status.as_u16(), &r.body),
        (200, &json!({"status": "ok"})),
        "{}",
        r.text
    );
    let r = send(stack.http().get(&readyz)).await;
    assert_eq!(
        (r.status.as_u16(), &r.body),
        (200, &json!({"status": "ready"})),
        "{}",
        r.text
    );

    stack.kill9().expect("kill the registry");
    let http = stack.http().clone();
    let not_ready = eventually(Duration::from_secs(15), Duration::from_millis(100), || {
        let req = http.get(&readyz);
        async move { send(req).await.status.eq(&503).then_some(()) }
    })
    .await;
    assert!(
        not_ready.is_some(),
        "/readyz still 200 with the registry dead"
    );
    let r = send(stack.http().get(&healthz)).await;
    assert_eq!(r.status, 200, "the gateway process is still up: {}", r.text);
    send(stack.http().get(stack.url("/api/v1/agents")))
        .await
        .assert_error(503, "unavailable");

    stack.restart().await.expect("registry restarts");
    let readyz = stack.url("/readyz");
    let ready = eventually(Duration::from_secs(30), Duration::from_millis(100), || {
        let req = http.get(&readyz);
        async move { send(req).await.status.eq(&200).then_some(()) }
    })
    .await;
    assert!(
        ready.is_some(),
        "/readyz not 200 again after the registry came back"
    );
    let r = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_run_without_the_registry_is_a_503_that_names_the_registry_not_the_executor() {
    let mut stack = taskforce_tests::StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack with executor starts");
    stack.kill9().expect("kill the registry");
    // Once the executor has lost its watch of the registry, it asks the registry for the
    // definition, which fails: the executor is up, and the answer says what is missing.
    let http = stack.http().clone();
    let url = stack.url("/api/v1/execute");
    let refused = eventually(Duration::from_secs(20), Duration::from_millis(100), || {
        let req = http
            .post(&url)
            .json(&json!({"mission": "hello", "agent_id": "invoice-extractor"}));
        async move {
            let r = send(req).await;
            (r.status == 503).then_some(r)
        }
    })
    .await
    .expect("runs are refused with 503 while the registry is down");
    refused.assert_error(503, "unavailable");
    let message = refused.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("registry") && !message.contains("executor is unavailable"),
        "{message}"
    );
    assert!(
        !message.contains("127.0.0.1"),
        "no internal address: {message}"
    );
}

#[tokio::test]
async fn openapi_document_is_openapi_3_and_lists_every_documented_route() {
    let stack = spawn_stack().await.expect("stack starts");
    let r = send(stack.http().get(stack.url("/openapi.json"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let doc = &r.body;
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3."), "openapi is {version:?}");
    assert!(
        doc["info"]["title"].as_str().is_some_and(|t| !t.is_empty()),
        "info.title"
    );
    let mut missing = Vec::new();
    for (method, path) in documented_routes() {
        if doc["paths"][&path][&method].is_null() {
            missing.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    assert!(
        missing.is_empty(),
        "OpenAPI lacks {missing:?}; it has {:?}",
        doc["paths"]
            .as_object()
            .map(|p| p.keys().collect::<Vec<_>>())
    );
}
