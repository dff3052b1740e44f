//! The sample profile (`dev`) and custom agents (`invoice-extractor`, `time-keeper`) as seen
//! through gRPC and REST.

use serde_json::{Value, json};
use taskforce_proto::{
    json::from_struct,
    v1::{self, AgentSource, agent::Kind},
};
use taskforce_tests::{spawn_registry, spawn_stack};

use crate::helpers::{
    SAMPLE_IDS, custom_of, custom_spec, grpc_list_all, is_version, listed_ids, send,
};

const DEV_TOOLS: [&str; 7] = [
    "web_search",
    "web_fetch",
    "file_read",
    "file_write",
    "python",
    "git",
    "ask_user",
];

#[tokio::test]
async fn sample_agents_are_listed_over_grpc_with_their_seed_fields() {
    let stack = spawn_registry().await.expect("stack starts");
    let agents = grpc_list_all(&stack, AgentSource::Unspecified).await;
    let ids: Vec<&str> = agents.iter().map(|a| a.agent_id.as_str()).collect();
    assert_eq!(
        ids, SAMPLE_IDS,
        "profiles first, then custom agents, each by id"
    );

    let dev = &agents[0];
    assert_eq!(dev.source(), AgentSource::Profile);
    assert!(!dev.version.is_empty());
    let Some(Kind::Profile(p)) = &dev.kind else {
        panic!("dev is not a profile agent: {dev:?}");
    };
    assert_eq!(p.profile, "dev");
    assert_eq!(p.specialist, "generic");
    assert!(
        p.description
            .starts_with("General-purpose development agent"),
        "{}",
        p.description
    );
    let types: Vec<&str> = p.tools_config.iter().map(|t| t.r#type.as_str()).collect();
    assert_eq!(types, DEV_TOOLS);
    let python_params = p.tools_config[4].params.as_ref().map(from_struct);
    assert_eq!(python_params, Some(json!({"timeout_seconds": 60})));
    assert!(p.mcp_servers.is_empty());
    let llm = p.llm.as_ref().expect("dev has an llm block");
    assert_eq!(
        (llm.config_path.as_str(), llm.default_model.as_str()),
        ("configs/llm_config.yaml", "main")
    );

    let invoice = &agents[1];
    assert_eq!(invoice.source(), AgentSource::Custom);
    let spec = custom_spec(invoice);
    assert_eq!(spec.agent_id, "invoice-extractor");
    assert_eq!(spec.name, "Invoice Extractor");
    assert_eq!(
        spec.description,
        "Extracts structured fields from invoice text and returns JSON."
    );
    assert!(
        spec.system_prompt.starts_with("You are a LeanAgent."),
        "{}",
        spec.system_prompt
    );
    assert_eq!(spec.tool_allowlist, ["file_read", "file_write", "python"]);
    assert_eq!(custom_of(invoice).created_at, "2026-11-22T09:00:00Z");
    assert_eq!(custom_of(invoice).updated_at, "2026-11-22T09:00:00Z");

    let m365 = custom_spec(&agents[2]);
    assert_eq!(m365.agent_id, "m365-assistant");
    assert_eq!(
        (
            m365.mcp_servers[0].r#type.as_str(),
            m365.mcp_servers[0].name.as_str()
        ),
        ("global", "m365")
    );
    let time = custom_spec(&agents[3]);
    assert_eq!(time.mcp_servers.len(), 1);
    let server = &time.mcp_servers[0];
    assert_eq!(
        (server.r#type.as_str(), server.command.as_str()),
        ("stdio", "uvx")
    );
    assert_eq!(server.args, ["mcp-server-time"]);
    assert_eq!(
        server.env.get("LOCAL_TIMEZONE").map(String::as_str),
        Some("${TZ:-}"),
        "placeholders are returned as written"
    );
    assert_eq!(
        time.mcp_tool_allowlist,
        ["get_current_time", "convert_time"]
    );

    let custom: Vec<String> = grpc_list_all(&stack, AgentSource::Custom)
        .await
        .into_iter()
        .map(|a| a.agent_id)
        .collect();
    assert_eq!(custom, &SAMPLE_IDS[1..]);
    let profiles: Vec<String> = grpc_list_all(&stack, AgentSource::Profile)
        .await
        .into_iter()
        .map(|a| a.agent_id)
        .collect();
    assert_eq!(profiles, ["dev"]);

    let got = stack
        .registry()
        .get_agent(v1::GetAgentRequest {
            agent_id: "dev".into(),
        })
        .await
        .expect("GetAgent dev")
        .into_inner();
    assert_eq!(&got, dev, "GetAgent returns what ListAgents lists");
}

#[tokio::test]
async fn grpc_listing_pages_through_every_agent_once() {
    let stack = spawn_registry().await.expect("stack starts");
    let mut client = stack.registry();
    let mut seen = Vec::new();
    let mut token = String::new();
    for _ in 0..10 {
        let page = client
            .list_agents(v1::ListAgentsRequest {
                page_size: 1,
                page_token: token.clone(),
                source: AgentSource::Unspecified.into(),
            })
            .await
            .expect("ListAgents page")
            .into_inner();
        assert!(
            page.agents.len() <= 1,
            "page_size 1 gave {} agents",
            page.agents.len()
        );
        seen.extend(page.agents.into_iter().map(|a| a.agent_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, SAMPLE_IDS);
}

#[tokio::test]
async fn sample_agents_are_listed_over_rest_with_their_seed_fields() {
    let stack = spawn_stack().await.expect("stack starts");
    let r = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let agents = r.body["agents"]
        .as_array()
        .expect("agents is an array")
        .clone();
    let ids: Vec<&str> = agents
        .iter()
        .filter_map(|a| a["agent_id"].as_str())
        .collect();
    assert_eq!(ids, SAMPLE_IDS);

    let dev = &agents[0];
    assert_eq!(dev["source"], "profile");
    assert_eq!(dev["profile"], "dev");
    assert_eq!(dev["specialist"], "generic");
    assert_eq!(
        dev["tools_config"][0],
        json!({"type": "web_search", "module": "", "params": {}})
    );
    let types: Vec<&str> = dev["tools_config"]
        .as_array()
        .expect("tools_config is an array")
        .iter()
        .filter_map(|t| t["type"].as_str())
        .collect();
    assert_eq!(types, DEV_TOOLS);
    assert_eq!(
        dev["tools_config"][4]["params"],
        json!({"timeout_seconds": 60})
    );
    assert_eq!(dev["mcp_servers"], json!([]));
    assert_eq!(
        dev["llm"],
        json!({"config_path": "configs/llm_config.yaml", "default_model": "main"})
    );
    assert!(
        dev["version"].as_str().is_some_and(|v| !v.is_empty()),
        "{dev}"
    );

    let invoice = &agents[1];
    assert_eq!(invoice["source"], "custom");
    assert_eq!(invoice["name"], "Invoice Extractor");
    assert_eq!(
        invoice["description"],
        "Extracts structured fields from invoice text and returns JSON."
    );
    assert!(
        invoice["system_prompt"]
            .as_str()
            .is_some_and(|s| s.starts_with("You are a LeanAgent."))
    );
    assert_eq!(
        invoice["tool_allowlist"],
        json!(["file_read", "file_write", "python"])
    );
    assert_eq!(invoice["mcp_servers"], json!([]));
    assert_eq!(invoice["mcp_tool_allowlist"], json!([]));
    assert_eq!(invoice["created_at"], "2026-11-22T09:00:00Z");
    assert_eq!(invoice["updated_at"], "2026-11-22T09:00:00Z");
    assert!(
        invoice["version"].as_str().is_some_and(is_version),
        "{invoice}"
    );

    assert_eq!(
        agents[2]["mcp_servers"],
        json!([{"type": "global", "name": "m365"}]),
        "a global server is only its name"
    );
    assert_eq!(agents[2]["mode"], "readOnly");
    let time = &agents[3];
    assert_eq!(
        time["mcp_servers"],
        json!([{"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": {"LOCAL_TIMEZONE": "${TZ:-}"}}]),
        "empty fields omitted, placeholders as written"
    );
    assert_eq!(
        time["mcp_tool_allowlist"],
        json!(["get_current_time", "convert_time"])
    );

    for (source, expected) in [("custom", &SAMPLE_IDS[1..]), ("profile", &SAMPLE_IDS[..1])] {
        let r = send(
            stack
                .http()
                .get(stack.url(&format!("/api/v1/agents?source={source}"))),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let ids = listed_ids(&r.body);
        assert_eq!(ids, expected, "source={source}");
    }

    for (i, id) in SAMPLE_IDS.iter().enumerate() {
        let r = send(stack.http().get(stack.url(&format!("/api/v1/agents/{id}")))).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body, agents[i], "GET {id} returns what the listing shows");
        assert_eq!(
            r.etag().as_deref(),
            agents[i]["version"].as_str(),
            "ETag of {id} is its version"
        );
    }
}

#[tokio::test]
async fn rest_listing_pages_through_every_agent_once() {
    let stack = spawn_stack().await.expect("stack starts");
    let mut seen: Vec<String> = Vec::new();
    let mut url = stack.url("/api/v1/agents?page_size=1");
    for _ in 0..10 {
        let r = send(stack.http().get(&url)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.body["agents"].as_array().expect("agents is an array");
        assert!(page.len() <= 1, "page_size=1 gave {}", r.text);
        seen.extend(
            page.iter()
                .filter_map(|a| a["agent_id"].as_str().map(str::to_owned)),
        );
        match &r.body["next_page_token"] {
            Value::String(t) if !t.is_empty() => {
                url = stack.url(&format!(
                    "/api/v1/agents?page_size=1&page_token={}",
                    encode(t)
                ));
            }
            _ => break,
        }
    }
    assert_eq!(seen, SAMPLE_IDS);
}

/// Percent-encodes a query value (tokens may hold `:`).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn a_large_rest_list_is_sent_in_pieces_and_reads_as_one_list() {
    let stack = spawn_stack().await.expect("stack starts");
    // A small list is sent whole, with its length.
    let r = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers.get("content-length").is_some(), "{:?}", r.headers);
    // Past 64 KiB it is written as the connection takes it: no length ahead, the same JSON.
    let prompt = "word ".repeat(4000);
    for i in 0..20 {
        let mut body = crate::helpers::agent_json(&format!("wordy-{i:02}"));
        body["system_prompt"] = json!(prompt);
        let r = crate::helpers::create(&stack, &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let r = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers.get("content-length").is_none(), "{:?}", r.headers);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let ids = listed_ids(&r.body);
    assert_eq!(ids.len(), SAMPLE_IDS.len() + 20, "{ids:?}");
    assert!(ids.contains(&"wordy-19"));
    assert!(
        r.body["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .all(|a| a["status"] == "idle")
    );
}
