//! Create, read, update and delete through the gateway, and the YAML files they leave behind.

use serde_json::{Value, json};
use taskforce_tests::{StackOptions, spawn_stack};

use crate::helpers::{agent_json, create, get, is_version, read_yaml, send, yaml_keys};

/// The keys of a custom agent file without MCP servers, in seed 000's order.
const SEED_KEYS: [&str; 7] = [
    "agent_id",
    "name",
    "description",
    "prompt",
    "tools",
    "created_at",
    "updated_at",
];

/// True for `YYYY-MM-DDTHH:MM:SSZ`-style RFC 3339 UTC timestamps.
fn is_utc_timestamp(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() >= 20 && s.as_bytes()[10] == b'T' && s.ends_with('Z'))
}

#[tokio::test]
async fn create_returns_201_with_location_and_etag_and_writes_seed_style_yaml() {
    let stack = spawn_stack().await.expect("stack starts");
    let r = create(&stack, &agent_json("report-writer")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let location = r.header("location").expect("Location header");
    assert!(
        location.ends_with("/api/v1/agents/report-writer"),
        "Location: {location}"
    );
    let body = &r.body;
    let version = body["version"].as_str().expect("version").to_owned();
    assert!(
        is_version(&version),
        "version {version:?} is not 16 hex digits"
    );
    assert_eq!(
        r.etag().as_deref(),
        Some(version.as_str()),
        "ETag is the version"
    );
    assert_eq!(body["source"], "custom");
    assert_eq!(body["agent_id"], "report-writer");
    assert_eq!(body["name"], "Test Agent");
    assert_eq!(
        body["description"],
        "An agent made by the end-to-end tests."
    );
    assert_eq!(
        body["system_prompt"],
        "You are a LeanAgent.\nAnswer briefly.\n"
    );
    assert_eq!(body["tool_allowlist"], json!(["file_read", "python"]));
    assert_eq!(body["mcp_servers"], json!([]));
    assert_eq!(body["mcp_tool_allowlist"], json!([]));
    assert!(is_utc_timestamp(&body["created_at"]), "{body}");
    assert_eq!(body["created_at"], body["updated_at"]);

    let path = stack.custom_dir().join("report-writer.yaml");
    let yaml = read_yaml(&path);
    // The seed's keys in the seed's order; keys the service adds (e.g. `workspace_id`) may sit
    // between them, but nothing empty is written for fields the request did not set.
    let keys = yaml_keys(&yaml);
    let seed_keys: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|k| SEED_KEYS.contains(k))
        .collect();
    assert_eq!(
        seed_keys, SEED_KEYS,
        "the file follows the seed's layout: {keys:?}"
    );
    for key in &keys {
        let v = &yaml[key.as_str()];
        let empty = v.is_null()
            || v.as_str() == Some("")
            || v.as_sequence().is_some_and(Vec::is_empty)
            || v.as_mapping().is_some_and(serde_yaml::Mapping::is_empty);
        assert!(!empty, "{key} is written empty: {keys:?}");
    }
    assert_eq!(yaml["agent_id"].as_str(), Some("report-writer"));
    assert_eq!(
        yaml["prompt"]["system_prompt"].as_str(),
        Some("You are a LeanAgent.\nAnswer briefly.\n")
    );
    let allow: Vec<&str> = yaml["tools"]["allowlist"]
        .as_sequence()
        .expect("tools.allowlist is a list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(allow, ["file_read", "python"]);
    assert_eq!(yaml["created_at"].as_str(), body["created_at"].as_str());

    let got = get(&stack, "report-writer").await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.body, r.body, "GET returns what POST returned");
    assert_eq!(got.etag(), Some(version));

    let list = send(stack.http().get(stack.url("/api/v1/agents?source=custom"))).await;
    assert!(
        list.body["agents"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["agent_id"] == "report-writer")),
        "{}",
        list.text
    );
}

#[tokio::test]
async fn update_keeps_created_at_and_moves_updated_at_and_version() {
    let stack = spawn_stack().await.expect("stack starts");
    let before = get(&stack, "invoice-extractor").await;
    assert_eq!(before.status, 200, "{}", before.text);
    let old_version = before.etag().expect("ETag");
    let mut body = before.body.clone();
    body["description"] = json!("Now also reads credit notes.");
    body["tool_allowlist"] = json!(["file_read"]);
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/invoice-extractor"))
            .header("If-Match", format!("\"{old_version}\""))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["description"], "Now also reads credit notes.");
    assert_eq!(r.body["tool_allowlist"], json!(["file_read"]));
    assert_eq!(
        r.body["created_at"], "2026-11-22T09:00:00Z",
        "created_at is kept"
    );
    let updated = r.body["updated_at"].as_str().expect("updated_at");
    assert!(
        updated > "2026-11-22T09:00:00Z",
        "updated_at moved forward: {updated}"
    );
    let new_version = r.etag().expect("ETag");
    assert_ne!(new_version, old_version);
    assert_eq!(r.body["version"], new_version.as_str());

    let yaml = read_yaml(&stack.custom_dir().join("invoice-extractor.yaml"));
    assert_eq!(
        yaml["description"].as_str(),
        Some("Now also reads credit notes.")
    );
    assert_eq!(yaml["created_at"].as_str(), Some("2026-11-22T09:00:00Z"));
    assert_eq!(yaml["updated_at"].as_str(), Some(updated));

    let got = get(&stack, "invoice-extractor").await;
    assert_eq!(got.body, r.body, "GET after PUT returns the new state");
}

#[tokio::test]
async fn a_get_body_put_back_unchanged_is_accepted() {
    let stack = spawn_stack().await.expect("stack starts");
    let created = create(&stack, &agent_json("round-trip")).await;
    assert_eq!(created.status, 201, "{}", created.text);
    for id in ["invoice-extractor", "round-trip"] {
        let got = get(&stack, id).await;
        assert_eq!(got.status, 200, "{}", got.text);
        let r = send(
            stack
                .http()
                .put(stack.url(&format!("/api/v1/agents/{id}")))
                .json(&got.body),
        )
        .await;
        assert_eq!(r.status, 200, "PUT of the GET body of {id}: {}", r.text);
        assert_eq!(r.body["created_at"], got.body["created_at"]);
        for f in [
            "name",
            "description",
            "system_prompt",
            "tool_allowlist",
            "mcp_servers",
            "mcp_tool_allowlist",
        ] {
            assert_eq!(
                r.body[f], got.body[f],
                "{f} of {id} survives the round trip"
            );
        }
    }
}

#[tokio::test]
async fn update_takes_the_id_from_the_path() {
    let stack = spawn_stack().await.expect("stack starts");
    assert_eq!(create(&stack, &agent_json("path-wins")).await.status, 201);
    let mut body = agent_json("some-other-id");
    body["description"] = json!("Changed through the path id.");
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/path-wins"))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["agent_id"], "path-wins");
    assert_eq!(r.body["description"], "Changed through the path id.");
    assert!(
        !stack.custom_dir().join("some-other-id.yaml").exists(),
        "no file for the body's id"
    );
    assert_eq!(get(&stack, "some-other-id").await.status, 404);
}

#[tokio::test]
async fn delete_returns_204_and_removes_the_file() {
    let stack = spawn_stack().await.expect("stack starts");
    assert_eq!(create(&stack, &agent_json("short-lived")).await.status, 201);
    let path = stack.custom_dir().join("short-lived.yaml");
    assert!(path.is_file());

    let r = send(stack.http().delete(stack.url("/api/v1/agents/short-lived"))).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(r.text.is_empty(), "204 has no body: {}", r.text);
    assert!(!path.exists(), "the YAML file is removed");
    get(&stack, "short-lived")
        .await
        .assert_error(404, "not_found");
    send(stack.http().delete(stack.url("/api/v1/agents/short-lived")))
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn unknown_agents_are_404_on_get_put_and_delete() {
    let stack = spawn_stack().await.expect("stack starts");
    let url = stack.url("/api/v1/agents/no-such-agent");
    get(&stack, "no-such-agent")
        .await
        .assert_error(404, "not_found")
        .assert_names("no-such-agent");
    send(stack.http().put(&url).json(&agent_json("no-such-agent")))
        .await
        .assert_error(404, "not_found")
        .assert_names("no-such-agent");
    send(stack.http().delete(&url))
        .await
        .assert_error(404, "not_found")
        .assert_names("no-such-agent");
    assert!(
        !stack.custom_dir().join("no-such-agent.yaml").exists(),
        "PUT does not create"
    );
}

#[tokio::test]
async fn creating_a_taken_id_is_409_already_exists() {
    let stack = spawn_stack().await.expect("stack starts");
    let path = stack.custom_dir().join("invoice-extractor.yaml");
    let before = std::fs::read(&path).expect("seed file");
    create(&stack, &agent_json("invoice-extractor"))
        .await
        .assert_error(409, "already_exists")
        .assert_names("invoice-extractor");
    assert_eq!(
        std::fs::read(&path).expect("seed file"),
        before,
        "the existing file is untouched"
    );

    create(&stack, &agent_json("dev"))
        .await
        .assert_error(409, "already_exists");
    assert!(
        !stack.custom_dir().join("dev.yaml").exists(),
        "a profile's id cannot be taken by a custom agent"
    );
}

#[tokio::test]
async fn profile_agents_are_read_only() {
    let stack = spawn_stack().await.expect("stack starts");
    let profile = stack.config_dir().join("dev.yaml");
    let before = std::fs::read(&profile).expect("dev.yaml");
    send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/dev"))
            .json(&agent_json("dev")),
    )
    .await
    .assert_error(409, "read_only");
    send(stack.http().delete(stack.url("/api/v1/agents/dev")))
        .await
        .assert_error(409, "read_only");
    assert_eq!(std::fs::read(&profile).expect("dev.yaml"), before);
    assert!(!stack.custom_dir().join("dev.yaml").exists());
    // Its times are its file's, as for custom agents (RFC 3339).
    let got = send(stack.http().get(stack.url("/api/v1/agents/dev"))).await;
    for field in ["created_at", "updated_at"] {
        assert!(is_utc_timestamp(&got.body[field]), "{field}: {}", got.text);
    }
}

#[tokio::test]
async fn current_versions_in_if_match_and_expected_version_are_accepted() {
    let stack = spawn_stack().await.expect("stack starts");
    let created = create(&stack, &agent_json("versioned")).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let v1 = created.etag().expect("ETag");

    let mut body = agent_json("versioned");
    body["description"] = json!("Second revision.");
    body["expected_version"] = json!(v1);
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/versioned"))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "expected_version in the body: {}", r.text);
    let v2 = r.etag().expect("ETag");

    body["description"] = json!("Third revision.");
    body.as_object_mut()
        .expect("object")
        .remove("expected_version");
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/versioned"))
            .header("If-Match", format!("\"{v2}\""))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "If-Match: {}", r.text);
    let v3 = r.etag().expect("ETag");

    // Preconditions a write would not keep are refused, and change nothing: If-None-Match on
    // an update or delete ("only if it does not exist" must not replace it), If-Match on a
    // create.
    let yaml = std::fs::read_to_string(stack.custom_dir().join("versioned.yaml")).expect("yaml");
    body["description"] = json!("Not written.");
    send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/versioned"))
            .header("If-None-Match", "*")
            .json(&body),
    )
    .await
    .assert_error(400, "invalid_argument")
    .assert_names("If-None-Match");
    send(
        stack
            .http()
            .delete(stack.url("/api/v1/agents/versioned"))
            .header("If-None-Match", "*"),
    )
    .await
    .assert_error(400, "invalid_argument");
    send(
        stack
            .http()
            .post(stack.url("/api/v1/agents"))
            .header("If-Match", format!("\"{v3}\""))
            .json(&agent_json("versioned-3")),
    )
    .await
    .assert_error(400, "invalid_argument")
    .assert_names("If-Match");
    assert_eq!(
        std::fs::read_to_string(stack.custom_dir().join("versioned.yaml")).expect("yaml"),
        yaml
    );
    assert!(!stack.custom_dir().join("versioned-3.yaml").exists());
    // `If-None-Match: *` is what a create is.
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents"))
            .header("If-None-Match", "*")
            .json(&agent_json("versioned-3")),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);

    let r = send(
        stack
            .http()
            .delete(stack.url(&format!("/api/v1/agents/versioned?expected_version={v3}"))),
    )
    .await;
    assert_eq!(r.status, 204, "?expected_version on DELETE: {}", r.text);

    assert_eq!(create(&stack, &agent_json("versioned-2")).await.status, 201);
    let v = get(&stack, "versioned-2").await.etag().expect("ETag");
    let r = send(
        stack
            .http()
            .delete(stack.url("/api/v1/agents/versioned-2"))
            .header("If-Match", format!("\"{v}\"")),
    )
    .await;
    assert_eq!(r.status, 204, "If-Match on DELETE: {}", r.text);
}

#[tokio::test]
async fn validate_checks_a_definition_without_saving_it() {
    let stack = spawn_stack().await.expect("stack starts");
    let url = stack.url("/api/v1/agents:validate");
    let r = send(stack.http().post(&url).json(&agent_json("only-validated"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["valid"], true, "{}", r.text);
    assert_eq!(r.body["discovered_mcp_tools"], json!([]));
    assert_eq!(r.body["warnings"], json!([]));
    assert!(
        !stack.custom_dir().join("only-validated.yaml").exists(),
        "validate saves nothing"
    );
    get(&stack, "only-validated")
        .await
        .assert_error(404, "not_found");

    let mut bad = agent_json("only-validated");
    bad["tool_allowlist"] = json!(["foo_tool"]);
    send(stack.http().post(&url).json(&bad))
        .await
        .assert_error(400, "invalid_tools");

    // A valid definition whose id is taken: valid (as an update), and the answer says a
    // create would be a 409.
    let r = send(stack.http().post(&url).json(&agent_json("dev"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let warnings = r.body["warnings"].to_string();
    assert!(
        warnings.contains("`dev` exists") && warnings.contains("409"),
        "{warnings}"
    );
}

#[tokio::test]
async fn creates_past_the_registrys_byte_limit_are_507_and_write_nothing() {
    let stack = StackOptions::full()
        .registry_args(["--max-custom-agents-mb", "1"])
        .spawn()
        .await
        .expect("stack starts");
    let prompt = "word ".repeat(40_000);
    let mut refused = None;
    for i in 0..10 {
        let mut body = agent_json(&format!("big-{i}"));
        body["system_prompt"] = json!(prompt);
        let r = create(&stack, &body).await;
        if r.status != 201 {
            refused = Some((i, r));
            break;
        }
    }
    // 200 KB each: the sixth would pass 1 MiB.
    let (i, r) = refused.expect("a create past the limit is refused");
    assert_eq!(i, 5, "{}", r.text);
    assert_eq!(r.status, 507, "{}", r.text);
    assert_eq!(r.body["error"], "quota_exceeded", "{}", r.text);
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-custom-agents-mb")),
        "{}",
        r.text
    );
    assert!(
        r.headers.get("retry-after").is_none(),
        "retrying does not help"
    );
    let r = send(stack.http().get(stack.url("/api/v1/agents/big-5"))).await;
    assert_eq!(r.status, 404, "nothing written: {}", r.text);
    assert!(!stack.custom_dir().join("big-5.yaml").exists());
    // A delete makes room.
    let r = send(stack.http().delete(stack.url("/api/v1/agents/big-0"))).await;
    assert_eq!(r.status, 204, "{}", r.text);
    let mut body = agent_json("big-5");
    body["system_prompt"] = json!(prompt);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
