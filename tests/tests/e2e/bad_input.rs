//! Bad input over REST is refused with a 4xx and a JSON body naming the problem, and leaves the
//! files and the listing exactly as they were.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, spawn_stack};

use crate::helpers::{agent_json, catalog_tools, create, custom_files, get, grpc_versions, send};

/// Ids that break the rule `[a-z0-9][a-z0-9-_]{2,63}`, including path tricks.
pub fn bad_ids() -> Vec<String> {
    [
        "../x", "a/b", "AB", "ab", ".hidden", "abc.yaml", "-abc", "a b c",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([format!("a{}", "b".repeat(64))])
    .collect()
}

/// Percent-encodes a path segment completely (so `/` and `.` cannot act as path syntax).
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Files (with contents) and the gRPC listing (ids and versions).
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub files: BTreeMap<String, Vec<u8>>,
    pub listing: Vec<(String, String)>,
}

/// The current [`Snapshot`].
pub async fn snapshot(stack: &Stack) -> Snapshot {
    Snapshot {
        files: custom_files(stack),
        listing: grpc_versions(stack).await,
    }
}

/// The exact seed 002 body for unknown tools (the orchestration tools are available too).
pub fn invalid_tools_body(invalid: &[&str]) -> Value {
    json!({
        "error": "invalid_tools",
        "message": "Unknown tool(s) in tool_allowlist",
        "invalid_tools": invalid,
        "available_tools": catalog_tools(),
    })
}

#[tokio::test]
async fn invalid_ids_are_400_in_bodies_and_paths_and_touch_nothing() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    for id in bad_ids() {
        create(&stack, &agent_json(&id))
            .await
            .assert_error(400, "invalid_argument")
            .assert_names("agent_id");
        let url = stack.url(&format!("/api/v1/agents/{}", encode_segment(&id)));
        let replies = [
            ("GET", send(stack.http().get(&url)).await),
            (
                "PUT",
                send(stack.http().put(&url).json(&agent_json("valid-id"))).await,
            ),
            ("DELETE", send(stack.http().delete(&url)).await),
        ];
        for (method, r) in replies {
            assert_eq!(r.status, 400, "{method} {url} ({id:?}): {}", r.text);
            r.assert_error(400, "invalid_argument")
                .assert_names("agent_id");
        }
    }
    assert_eq!(
        snapshot(&stack).await,
        before,
        "bad ids changed files or listing"
    );
    let outside: Vec<_> = ["x.yaml", "b.yaml", "hidden.yaml"]
        .iter()
        .filter(|f| stack.config_dir().join(f).exists() || stack.root().join(f).exists())
        .collect();
    assert!(
        outside.is_empty(),
        "files written outside custom/: {outside:?}"
    );
}

#[tokio::test]
async fn missing_or_empty_required_fields_are_400_naming_the_field() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    for field in [
        "agent_id",
        "name",
        "description",
        "system_prompt",
        "tool_allowlist",
    ] {
        let mut missing = agent_json("needs-fields");
        missing.as_object_mut().expect("object").remove(field);
        create(&stack, &missing)
            .await
            .assert_error(400, "invalid_argument")
            .assert_names(field);

        let mut empty = agent_json("needs-fields");
        empty[field] = if field == "tool_allowlist" {
            json!([])
        } else {
            json!("")
        };
        create(&stack, &empty)
            .await
            .assert_error(400, "invalid_argument")
            .assert_names(field);
    }
    for field in ["name", "description", "system_prompt"] {
        let mut blank = agent_json("needs-fields");
        blank[field] = json!("   \n ");
        create(&stack, &blank)
            .await
            .assert_error(400, "invalid_argument")
            .assert_names(field);
    }
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn over_long_name_and_description_are_400() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let mut body = agent_json("too-long");
    body["name"] = json!("n".repeat(101));
    create(&stack, &body)
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("name");
    let mut body = agent_json("too-long");
    body["description"] = json!("d".repeat(501));
    create(&stack, &body)
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("description");
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn an_error_listing_thousands_of_names_is_a_400_with_the_first_and_spares_other_calls() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let names: Vec<String> = (0..3000).map(|i| format!("unknown_tool_{i:027}")).collect();
    let mut unknown = agent_json("many-unknown");
    unknown["tool_allowlist"] = json!(names);
    let mut twice = agent_json("many-twice");
    twice["tool_allowlist"] = json!(vec!["git"; 1000]);
    let mut subagents = agent_json("many-subagents");
    subagents["subagents"] = json!(
        names
            .iter()
            .map(|n| n.replace('_', "-"))
            .collect::<Vec<_>>()
    );
    // Each at once with an ordinary read: the errors travel in gRPC trailers, and one too large
    // for them used to break the gateway's connection to the registry, the read included.
    for (body, code) in [
        (&unknown, "invalid_tools"),
        (&twice, "invalid_argument"),
        (&subagents, "invalid_subagents"),
    ] {
        let (refused, read) = tokio::join!(create(&stack, body), get(&stack, "no-such-agent"));
        let refused = refused.assert_error(400, code);
        read.assert_error(404, "not_found");
        let message = refused.body["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if code != "invalid_argument" {
            let listed = refused.body[code].as_array().map_or(0, Vec::len);
            assert!(listed > 10 && listed < 3000, "{listed}: {message}");
            assert!(
                message.ends_with(&format!("lists the first {listed} of 3000)")),
                "{message}"
            );
        }
    }
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn name_of_100_and_description_of_500_characters_are_accepted() {
    let stack = spawn_stack().await.expect("stack starts");
    let mut body = agent_json("at-the-limit");
    // Characters, not bytes: 'é' is two bytes in UTF-8.
    body["name"] = json!("é".repeat(100));
    body["description"] = json!("d".repeat(500));
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["name"], json!("é".repeat(100)));
}

#[tokio::test]
async fn malformed_json_wrong_types_and_wrong_content_type_are_400() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let url = stack.url("/api/v1/agents");
    let json_ct = "application/json";
    for (what, content_type, body) in [
        (
            "truncated JSON",
            json_ct,
            r#"{"agent_id": "broken-json", "name": "#.to_owned(),
        ),
        ("not JSON", json_ct, "agent_id=broken-json".to_owned()),
        ("an array", json_ct, "[]".to_owned()),
        ("tool_allowlist as a string", json_ct, {
            let mut b = agent_json("broken-json");
            b["tool_allowlist"] = json!("file_read");
            b.to_string()
        }),
        ("name as a number", json_ct, {
            let mut b = agent_json("broken-json");
            b["name"] = json!(42);
            b.to_string()
        }),
        (
            "text/plain",
            "text/plain",
            agent_json("broken-json").to_string(),
        ),
    ] {
        let r = send(
            stack
                .http()
                .post(&url)
                .header("content-type", content_type)
                .body(body),
        )
        .await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        r.assert_error(400, "invalid_argument");
        // A field of the wrong type is named in `details`, as validation's are.
        if let Some(field) = what.split(' ').next().filter(|_| what.contains(" as a ")) {
            assert_eq!(r.body["details"][0]["field"], field, "{what}: {}", r.text);
        }
    }
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn unknown_fields_are_400_naming_them() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let mut body = agent_json("unknown-field");
    body["temperature"] = json!(0.2);
    let r = create(&stack, &body).await;
    r.assert_error(400, "invalid_argument")
        .assert_names("temperature");
    assert_eq!(r.body["details"][0]["field"], "temperature", "{}", r.text);
    let mut body = agent_json("unknown-field");
    body["mcp_servers"] = json!([{"type": "stdio", "command": "true", "cwd": "/tmp"}]);
    let r = create(&stack, &body).await;
    r.assert_error(400, "invalid_argument").assert_names("cwd");
    let field = r.body["details"][0]["field"].as_str().unwrap_or_default();
    assert!(field.ends_with("cwd"), "{}", r.text);
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn read_only_fields_in_a_create_body_are_ignored() {
    let stack = spawn_stack().await.expect("stack starts");
    let mut body = agent_json("with-read-only");
    body["source"] = json!("profile");
    body["version"] = json!("0000000000000000");
    body["created_at"] = json!("1999-01-01T00:00:00Z");
    body["updated_at"] = json!("1999-01-01T00:00:00Z");
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["source"], "custom");
    assert_ne!(r.body["version"], "0000000000000000");
    assert_ne!(
        r.body["created_at"], "1999-01-01T00:00:00Z",
        "created_at is set by the service"
    );
}

#[tokio::test]
async fn unknown_tools_give_the_exact_seed_002_body_on_create_and_update() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let mut body = agent_json("unknown-tools");
    body["tool_allowlist"] = json!(["file_read", "foo_tool", "bar_tool"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body, invalid_tools_body(&["foo_tool", "bar_tool"]));

    let mut seed = get(&stack, "invoice-extractor").await.body;
    seed["tool_allowlist"] = json!(["llm_generate"]);
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/invoice-extractor"))
            .json(&seed),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(
        r.body,
        invalid_tools_body(&["llm_generate"]),
        "llm_generate is not offered"
    );
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn tool_names_are_case_sensitive() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    for wrong in ["Python", "FILE_READ", "file_read ", "Web_Search"] {
        let mut body = agent_json("case-check");
        body["tool_allowlist"] = json!(["ask_user", wrong]);
        let r = create(&stack, &body).await;
        assert_eq!(
            r.body,
            invalid_tools_body(&[wrong]),
            "{wrong:?}: {}",
            r.text
        );
        assert_eq!(r.status, 400);
    }
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn stale_versions_are_409_version_conflict() {
    let stack = spawn_stack().await.expect("stack starts");
    let v1 = create(&stack, &agent_json("contended"))
        .await
        .etag()
        .expect("ETag");
    let mut body = agent_json("contended");
    body["description"] = json!("Second revision.");
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/contended"))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = snapshot(&stack).await;

    let url = stack.url("/api/v1/agents/contended");
    let stale = format!("\"{v1}\"");
    body["description"] = json!("Lost update.");
    send(
        stack
            .http()
            .put(&url)
            .header("If-Match", &stale)
            .json(&body),
    )
    .await
    .assert_error(409, "version_conflict");
    let mut with_expected = body.clone();
    with_expected["expected_version"] = json!(v1);
    send(stack.http().put(&url).json(&with_expected))
        .await
        .assert_error(409, "version_conflict");
    send(stack.http().delete(&url).header("If-Match", &stale))
        .await
        .assert_error(409, "version_conflict");
    send(stack.http().delete(format!("{url}?expected_version={v1}")))
        .await
        .assert_error(409, "version_conflict");
    // A check asked for without its version (`?expected_version=$UNSET`) deletes nothing.
    send(stack.http().delete(format!("{url}?expected_version=")))
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("expected_version");
    assert_eq!(
        snapshot(&stack).await,
        before,
        "stale writes changed something"
    );
    assert_eq!(
        get(&stack, "contended").await.body["description"],
        "Second revision."
    );
}

#[tokio::test]
async fn bodies_over_the_default_limit_are_413_json() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = snapshot(&stack).await;
    let mut body = agent_json("huge-body");
    body["system_prompt"] = json!("x".repeat(1024 * 1024 + 1024));
    create(&stack, &body)
        .await
        .assert_error(413, "payload_too_large");
    assert_eq!(snapshot(&stack).await, before);
}

#[tokio::test]
async fn max_body_bytes_sets_the_limit() {
    let stack = StackOptions::full()
        .max_body_bytes(2048)
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("limited-body");
    body["system_prompt"] = json!("x".repeat(3000));
    create(&stack, &body)
        .await
        .assert_error(413, "payload_too_large");
    assert!(!stack.custom_dir().join("limited-body.yaml").exists());
    let r = create(&stack, &agent_json("limited-body")).await;
    assert_eq!(r.status, 201, "a small body passes: {}", r.text);
}

#[tokio::test]
async fn unknown_routes_are_404_and_wrong_methods_405_with_json_bodies() {
    let stack = spawn_stack().await.expect("stack starts");
    for path in [
        "/api/v1/nope",
        "/nope",
        "/api/v2/agents",
        "/api/v1/agents/invoice-extractor/extra",
    ] {
        send(stack.http().get(stack.url(path)))
            .await
            .assert_error(404, "not_found");
    }
    send(
        stack
            .http()
            .patch(stack.url("/api/v1/agents/invoice-extractor"))
            .json(&json!({})),
    )
    .await
    .assert_error(405, "method_not_allowed");
    send(stack.http().delete(stack.url("/api/v1/tools")))
        .await
        .assert_error(405, "method_not_allowed");
}

#[tokio::test]
async fn bad_listing_parameters_are_400() {
    let stack = spawn_stack().await.expect("stack starts");
    for query in [
        "page_size=0",
        "page_size=1001",
        "page_size=abc",
        "source=bogus",
        "page_token=not-a-token",
        "bogus=1",
    ] {
        let r = send(
            stack
                .http()
                .get(stack.url(&format!("/api/v1/agents?{query}"))),
        )
        .await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        r.assert_error(400, "invalid_argument");
        // The parameter at fault is named in `details`.
        let (name, _) = query.split_once('=').unwrap_or_default();
        assert_eq!(r.body["details"][0]["field"], name, "{query}: {}", r.text);
    }
}

#[tokio::test]
async fn unusable_directories_and_urls_stop_a_service_at_start_naming_the_flag() {
    use std::time::Duration;
    let wait = Duration::from_secs(30);
    for (binary, args, flag) in [
        (
            "registry-svc",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "",
                "--config-dir",
                "no-such-dir",
            ],
            "--config-dir",
        ),
        (
            "registry-svc",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "",
                "--catalog-mcp-file",
                ".",
            ],
            "--catalog-mcp-file",
        ),
        (
            "executor-svc",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "",
                "--registry-url",
                "notaurl",
            ],
            "--registry-url",
        ),
        (
            "gateway",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--registry-url",
                "ftp://127.0.0.1:50051",
            ],
            "--registry-url",
        ),
        (
            "gateway",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--executor-url",
                "e0=http://127.0.0.1:99999",
            ],
            "--executor-url",
        ),
    ] {
        let (code, stderr, dir) = crate::auth::start(binary, &args, wait).await;
        assert!(
            code.is_some_and(|c| c != 0),
            "{binary} {args:?} must not start: {code:?} {stderr}"
        );
        assert!(stderr.contains(flag), "{binary} names {flag}: {stderr}");
        assert!(
            !dir.path().join("no-such-dir").exists(),
            "nothing is made for a mistyped directory"
        );
    }
}
