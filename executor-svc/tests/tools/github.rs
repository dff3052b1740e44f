//! `github` against a local server that checks the token and the API headers.

use axum::{
    Json, Router,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::get,
};
use executor_svc::tools::{ToolError, native::NativeToolsConfig};
use serde_json::{Value, json};

use super::{ctx, ok_text, output, tool_with};

const TOKEN: &str = "ghp_test_TOKEN_1234567890";

/// Rejects calls without the token, the JSON media type, the API version or a user agent.
fn check(headers: &HeaderMap) -> Result<(), (StatusCode, Json<Value>)> {
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    if h("authorization") != format!("Bearer {TOKEN}") {
        return Err((
            StatusCode::UNAUTHORIZED,
            Json(json!({ "message": "Bad credentials" })),
        ));
    }
    if h("accept") != "application/vnd.github+json"
        || h("x-github-api-version").is_empty()
        || h("user-agent").is_empty()
    {
        return Err((
            StatusCode::BAD_REQUEST,
            Json(json!({ "message": "missing headers" })),
        ));
    }
    Ok(())
}

async fn serve() -> String {
    let app = Router::new()
        .route(
            "/repos/acme/widgets",
            get(|headers: HeaderMap| async move {
                check(&headers)?;
                Ok::<_, (StatusCode, Json<Value>)>(Json(
                    json!({ "full_name": "acme/widgets", "open_issues_count": 2 }),
                ))
            }),
        )
        .route(
            "/repos/acme/widgets/issues",
            get(
                |headers: HeaderMap, q: axum::extract::RawQuery| async move {
                    check(&headers)?;
                    Ok::<_, (StatusCode, Json<Value>)>(Json(
                        json!([{ "number": 7, "title": "Crash", "query": q.0 }]),
                    ))
                },
            )
            .post(|headers: HeaderMap, Json(body): Json<Value>| async move {
                check(&headers)?;
                Ok::<_, (StatusCode, Json<Value>)>((
                    StatusCode::CREATED,
                    Json(json!({ "number": 8, "title": body["title"] })),
                ))
            }),
        )
        .route(
            // A misbehaving endpoint that echoes the credentials back.
            "/echo",
            get(|headers: HeaderMap| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                Json(json!({ "you_sent": auth })).into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

fn config(base: &str, token: Option<&str>) -> NativeToolsConfig {
    NativeToolsConfig {
        github_api_url: base.to_owned(),
        github_token: token.map(secrecy::SecretString::from),
        ..NativeToolsConfig::default()
    }
}

#[tokio::test]
async fn github_calls_the_api_with_the_token_and_never_shows_it() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gh = tool_with(&config(&base, Some(TOKEN)), "github");
    let c = ctx(dir.path());

    let text = ok_text(
        gh.call(
            &c,
            json!({ "method": "GET", "path": "/repos/acme/widgets" }),
        )
        .await,
    );
    let repo: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(repo["full_name"], "acme/widgets");

    let text = ok_text(
        gh.call(
            &c,
            json!({ "method": "get", "path": "/repos/acme/widgets/issues?state=open&per_page=5" }),
        )
        .await,
    );
    assert!(
        text.contains("\"number\":7") && text.contains("state=open&per_page=5"),
        "{text}"
    );

    let text = ok_text(
        gh.call(&c, json!({ "method": "POST", "path": "/repos/acme/widgets/issues", "body": { "title": "New bug" } }))
            .await,
    );
    assert!(
        text.contains("\"number\":8") && text.contains("New bug"),
        "{text}"
    );

    let text = ok_text(
        gh.call(&c, json!({ "method": "GET", "path": "/echo" }))
            .await,
    );
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("Bearer ***"), "{text}");
    assert!(!format!("{:?}", config(&base, Some(TOKEN))).contains(TOKEN));

    // A body that is not an object, or one on a GET (which would be dropped), is refused.
    for (method, body) in [
        ("POST", json!("not an object")),
        ("GET", json!({"state": "open"})),
    ] {
        let r = gh
            .call(
                &c,
                json!({ "method": method, "path": "/repos/acme/widgets/issues", "body": body }),
            )
            .await;
        assert!(
            matches!(&r, Err(ToolError::InvalidArguments { reason, .. }) if reason.contains("body")),
            "{method}: {r:?}"
        );
    }
}

#[tokio::test]
async fn github_errors_are_reported_without_the_token() {
    let base = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx(dir.path());

    // Wrong token: the server's 401 reaches the model as a failed output.
    let gh = tool_with(&config(&base, Some("wrong")), "github");
    let (text, is_error) = output(
        gh.call(
            &c,
            json!({ "method": "GET", "path": "/repos/acme/widgets" }),
        )
        .await,
    );
    assert!(
        is_error && text.contains("401") && text.contains("Bad credentials"),
        "{text}"
    );

    // No token: reads go out unauthenticated, writes are refused before any request.
    let anon = tool_with(&config(&base, None), "github");
    let (text, is_error) = output(
        anon.call(
            &c,
            json!({ "method": "GET", "path": "/repos/acme/widgets" }),
        )
        .await,
    );
    assert!(is_error && text.contains("401"), "{text}");
    let r = anon
        .call(
            &c,
            json!({ "method": "DELETE", "path": "/repos/acme/widgets" }),
        )
        .await;
    assert!(
        matches!(&r, Err(ToolError::Unavailable { reason, .. }) if reason.contains("GITHUB_TOKEN")),
        "{r:?}"
    );

    let gh = tool_with(&config(&base, Some(TOKEN)), "github");
    for args in [
        json!({ "method": "GET", "path": "https://evil.example/x" }),
        json!({ "method": "GET", "path": "/repos/../../etc" }),
        json!({ "method": "TRACE", "path": "/repos/acme/widgets" }),
        json!({ "path": "/repos/acme/widgets" }),
    ] {
        let r = gh.call(&c, args.clone()).await;
        assert!(
            matches!(r, Err(ToolError::InvalidArguments { .. })),
            "{args}: {r:?}"
        );
    }
}

#[tokio::test]
async fn the_token_follows_no_redirect_out_of_the_api_base_path() {
    use std::sync::{Arc, Mutex};
    // A GitHub Enterprise host: the API under `/api/v3`, other applications beside it.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let outside = Arc::clone(&seen);
    let app = Router::new()
        .route(
            "/api/v3/moved",
            get(|| async { axum::response::Redirect::permanent("/api/v3/repos/acme/widgets") }),
        )
        .route(
            "/api/v3/repos/acme/widgets",
            get(|headers: HeaderMap| async move {
                check(&headers)?;
                Ok::<_, (StatusCode, Json<Value>)>(Json(json!({ "full_name": "acme/widgets" })))
            }),
        )
        .route(
            "/api/v3/away",
            get(|| async { axum::response::Redirect::temporary("/other-app/collect") }),
        )
        .route(
            "/other-app/collect",
            get(move |headers: HeaderMap| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                outside.lock().expect("lock").push(auth);
                "collected"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let base = format!("http://{addr}/api/v3");
    let dir = tempfile::tempdir().expect("tempdir");
    let gh = tool_with(&config(&base, Some(TOKEN)), "github");
    let c = ctx(dir.path());

    // A redirect within the API is followed, with the token.
    let text = ok_text(
        gh.call(&c, json!({ "method": "GET", "path": "/moved" }))
            .await,
    );
    assert!(text.contains("acme/widgets"), "{text}");
    // One out of it is not.
    let refused = gh
        .call(&c, json!({ "method": "GET", "path": "/away" }))
        .await;
    let text = format!("{refused:?}");
    assert!(
        refused.is_err() && text.contains("is not followed"),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
    assert!(
        seen.lock().expect("lock").is_empty(),
        "the other application was called"
    );
}
