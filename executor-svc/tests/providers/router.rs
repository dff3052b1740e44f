//! `llm_config.yaml`, environment overrides, and the scripted fallback.

use std::path::Path;

use executor_svc::llm::{Env, LlmConfig, LlmRouter, Message};

use crate::support::{FakeServer, Reply, data};

const CONFIG: &str = r#"
default_provider: openai
default_model: main
models:
  main: {provider: openai, model: gpt-4.1-mini, temperature: 0.2}
  claude: {provider: anthropic, model: claude-sonnet-4-5, max_tokens: 2048}
  offline: {provider: scripted, model: scripted}
providers:
  scripted: {type: scripted}
  openai: {type: openai, base_url: "https://api.openai.com/v1", api_key_env: OPENAI_API_KEY, model: gpt-4.1}
  anthropic: {type: anthropic, api_key_env: ANTHROPIC_API_KEY}
  local: {type: openai, base_url: "http://127.0.0.1:11434/v1", model: llama3.2}
"#;

fn router(env: &[(&str, &str)]) -> LlmRouter {
    let config = LlmConfig::from_yaml(CONFIG).expect("config");
    LlmRouter::new(
        &config,
        Path::new("."),
        &Env::from_pairs(env.iter().copied()),
    )
    .expect("router")
}

#[test]
fn the_repositorys_config_parses_and_runs_offline() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/llm_config.yaml");
    let router = LlmRouter::new(
        &LlmConfig::load(&path).expect("configs/llm_config.yaml"),
        path.parent().expect("dir"),
        &Env::from_pairs::<&str, &str>([]),
    )
    .expect("router");
    let main = router.resolve(Some("main")).expect("main");
    assert_eq!(main.provider.name(), "scripted");
    assert!(router.scripted_reason().is_some());
}

#[test]
fn aliases_resolve_to_their_provider_and_model_with_defaults() {
    let router = router(&[("OPENAI_API_KEY", "sk-a"), ("ANTHROPIC_API_KEY", "sk-b")]);
    let main = router.resolve(None).expect("default");
    assert_eq!(
        (main.provider.name(), main.model.as_str(), main.temperature),
        ("openai", "gpt-4.1-mini", Some(0.2))
    );
    assert!(main.scripted_reason.is_none());
    assert!(router.scripted_reason().is_none());
    let claude = router.resolve(Some("claude")).expect("claude");
    assert_eq!(
        (claude.provider.name(), claude.max_tokens),
        ("anthropic", Some(2048))
    );
    let messages = [Message::user("hi")];
    let request = claude.request(&messages, &[]);
    assert_eq!(
        (request.model.as_str(), request.max_tokens),
        ("claude-sonnet-4-5", Some(2048))
    );
    // Not an alias: a model of the default provider.
    let raw = router.resolve(Some("gpt-4o")).expect("raw model");
    assert_eq!(
        (raw.provider.name(), raw.model.as_str()),
        ("openai", "gpt-4o")
    ); // A provider reference (the gateway's AI_DESTINATION_NAME): its model, or the one named.
    let local = router.resolve(Some("@local")).expect("provider");
    assert_eq!(
        (local.provider.name(), local.model.as_str()),
        ("local", "llama3.2")
    );
    let named = router
        .resolve(Some("@openai/gpt-4o"))
        .expect("provider/model");
    assert_eq!(
        (named.provider.name(), named.model.as_str()),
        ("openai", "gpt-4o")
    );
    let err = router
        .resolve(Some("@aicore-destination/gpt-4.1"))
        .expect_err("unknown provider")
        .to_string();
    assert!(
        err.contains("unknown provider `aicore-destination`") && err.contains("openai"),
        "{err}"
    );
}

#[test]
fn a_missing_key_falls_back_to_scripted_and_says_why() {
    let router = router(&[]);
    let main = router.resolve(None).expect("fallback");
    assert_eq!(main.provider.name(), "scripted");
    let reason = router.scripted_reason().expect("reason");
    assert!(
        reason.contains("`openai`") && reason.contains("OPENAI_API_KEY"),
        "{reason}"
    );

    let strict = CONFIG.replace(
        "default_model: main",
        "default_model: main\nfallback_to_scripted: false",
    );
    let config = LlmConfig::from_yaml(&strict).expect("config");
    let router = LlmRouter::new(&config, Path::new("."), &Env::from_pairs::<&str, &str>([]))
        .expect("router");
    let err = router.resolve(None).expect_err("no fallback");
    assert!(
        err.to_string().contains("OPENAI_API_KEY is not set"),
        "{err}"
    );
}

#[tokio::test]
async fn environment_forces_provider_model_and_base_url() {
    let server = FakeServer::start(vec![Reply::sse(vec![
        data(&serde_json::json!({ "choices": [{ "delta": { "content": "from env" }, "finish_reason": "stop" }] })),
        "data: [DONE]\n\n".to_owned(),
    ])])
    .await;
    let base = format!("{}/v1", server.url());
    let router = router(&[
        ("TASKFORCE_LLM_PROVIDER", "local"),
        ("TASKFORCE_LLM_MODEL", "qwen3"),
        ("OPENAI_BASE_URL", base.as_str()),
    ]);
    let resolved = router.resolve(Some("claude")).expect("forced");
    assert_eq!(
        (resolved.provider.name(), resolved.model.as_str()),
        ("local", "qwen3")
    );
    let response = resolved
        .provider
        .complete(&resolved.request(&[Message::user("hi")], &[]))
        .await;
    assert_eq!(response.expect("answer").text, "from env");
    assert_eq!(server.seen()[0].body["model"], "qwen3");

    let only_provider = self::router(&[("TASKFORCE_LLM_PROVIDER", "local")])
        .resolve(None)
        .expect("forced");
    assert_eq!(only_provider.model, "llama3.2", "the provider's own model");
}

#[test]
fn scripts_load_relative_to_the_config_and_from_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("demo.yaml"), "turns: [{text: from file}]").expect("write");
    let config = LlmConfig::from_yaml("providers: {scripted: {type: scripted, script: demo.yaml}}")
        .expect("config");
    let router =
        LlmRouter::new(&config, dir.path(), &Env::from_pairs::<&str, &str>([])).expect("router");
    let provider = router.resolve(None).expect("default").provider;
    let request = executor_svc::llm::LlmRequest {
        messages: vec![Message::user("x")].into(),
        ..Default::default()
    };
    let text = futures::executor::block_on(provider.complete(&request))
        .expect("answer")
        .text;
    assert_eq!(text, "from file");

    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "turns: [{text: from env}]").expect("write");
    let env = Env::from_pairs([("TASKFORCE_LLM_SCRIPT", other.to_string_lossy().into_owned())]);
    let router = LlmRouter::new(&LlmConfig::default(), dir.path(), &env).expect("router");
    let provider = router.resolve(None).expect("default").provider;
    let text = futures::executor::block_on(provider.complete(&request))
        .expect("answer")
        .text;
    assert_eq!(text, "from env");

    let err = LlmConfig::from_yaml("providers: {x: {type: openai, api_key: sk-inline}}")
        .expect_err("no inline keys");
    assert!(err.to_string().contains("api_key"), "{err}");
}

#[test]
fn a_key_pasted_in_the_wrong_field_is_not_repeated() {
    let key = "sk-proj-AbCdEf1234567890SECRET";
    let err = LlmConfig::from_yaml(&format!(
        "providers: {{o: {{type: openai, max_attempts: {key}}}}}"
    ))
    .expect_err("not a number");
    assert!(err.to_string().contains("max_attempts"), "{err}");
    assert!(!err.to_string().contains(key), "{err}");
    let config = LlmConfig::from_yaml(&format!(
        "default_model: main\nfallback_to_scripted: false\nmodels: {{main: {{provider: o, model: m}}}}\n\
         providers: {{o: {{type: openai, api_key_env: {key}}}}}"
    ))
    .expect("config");
    let router = LlmRouter::new(&config, Path::new("."), &Env::from_pairs::<&str, &str>([]))
        .expect("router");
    let err = router.resolve(None).expect_err("no key");
    assert!(
        err.to_string().contains("is no plain variable name"),
        "{err}"
    );
    assert!(!err.to_string().contains(key), "{err}");
    // A variable name a container runtime allows (a dash) works when it is set.
    let config = LlmConfig::from_yaml(
        "default_model: main\nfallback_to_scripted: false\nmodels: {main: {provider: o, model: m}}\n\
         providers: {o: {type: openai, api_key_env: openai-key}}",
    )
    .expect("config");
    let router = LlmRouter::new(
        &config,
        Path::new("."),
        &Env::from_pairs([("openai-key", "sk-from-the-env")]),
    )
    .expect("router");
    assert!(router.resolve(None).is_ok());
}

#[test]
fn a_model_or_provider_given_twice_is_refused_not_the_last_one_kept() {
    for text in [
        "models:\n  main: {provider: scripted, model: a}\n  main: {provider: scripted, model: b}\n",
        "providers:\n  s: {type: scripted}\n  s: {type: scripted}\n",
    ] {
        let err = LlmConfig::from_yaml(text).expect_err("a duplicate is refused");
        assert!(err.to_string().contains("duplicate key"), "{err}");
    }
}

#[test]
fn a_temperature_the_provider_refuses_is_a_start_up_error() {
    let config = |provider: &str, t: f64| {
        LlmConfig::from_yaml(&format!(
            "providers: {{a: {{type: anthropic, base_url: 'http://127.0.0.1:9'}}, o: {{type: openai, base_url: 'http://127.0.0.1:9'}}}}\n\
             models: {{main: {{provider: {provider}, model: m, temperature: {t}}}}}"
        ))
        .expect("config")
    };
    let none = Env::from_pairs::<&str, &str>([]);
    let build = |c: &LlmConfig| LlmRouter::new(c, Path::new("."), &none).map(drop);
    // Anthropic takes 0 to 1, OpenAI 0 to 2.
    let err = build(&config("a", 1.2)).expect_err("out of Anthropic's range");
    assert!(
        err.to_string().contains("temperature 1.2") && err.to_string().contains("0 to 1"),
        "{err}"
    );
    assert!(build(&config("o", 1.2)).is_ok());
    assert!(build(&config("o", -0.1)).is_err());
}

#[test]
fn api_keys_never_print() {
    let key = secrecy::SecretString::from("sk-secret-value");
    assert!(!format!("{key:?}").contains("secret-value"), "{key:?}");
    let config = LlmConfig::from_yaml(CONFIG).expect("config");
    let router = LlmRouter::new(
        &config,
        Path::new("."),
        &Env::from_pairs([("OPENAI_API_KEY", "sk-secret-value")]),
    )
    .expect("router");
    assert!(!format!("{router:?}").contains("sk-secret-value"));
}
