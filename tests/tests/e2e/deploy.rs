//! The deployment files of `deploy/`, checked offline: this machine has no container engine and
//! no cluster, so real tools check what they can without one, and the real binaries are started
//! exactly the way the files start them.
//!
//! - Compose: the real docker-compose (1.29, PyPI) validates and renders `deploy/compose.yaml`
//!   for the default profile and for `observability` (by flag and by env file), with the two
//!   variables of API keys the user sets (and refuses to render without them).
//! - Dockerfiles: the real hadolint; what they build (`cargo build --release --locked -p <pkg>`
//!   with the CLI, BuildKit cache mounts) and run (base image, non-root user, ports, health check).
//! - Kubernetes: the real `kubectl kustomize` renders both overlays and `kubernetes-validate
//!   --strict` checks them against the API schemas; workloads, replicas, probes, security context,
//!   resources, NetworkPolicy, API keys from the Secret `taskforce-auth`; the manifests' copy
//!   of `configs/` is the repository's.
//! - One machine: the three binaries started with exactly the command, environment, image content
//!   (the Dockerfile's COPY, ENV, ENTRYPOINT, CMD, WORKDIR) and volumes that the compose file
//!   gives them, then those of the dev overlay's pods (ConfigMaps, PVCs, the seed initContainer,
//!   `fieldRef`, `envFrom` and Secret environment, readiness probes). Only what one machine
//!   cannot do is mapped: host names of containers and Services to 127.0.0.1, container ports
//!   to free local ports, paths inside a container to a directory per container (and per
//!   volume). Since `0.0.0.0` becomes 127.0.0.1, where a service without keys would start, the
//!   test refuses to start a container that listens on every interface without API keys. The
//!   services must find each other: health checks pass, the gateway is ready, the API refuses a
//!   caller without a key, the seeded agents are listed with the operator's key, runs go through
//!   the executors, every `/metrics` answers, and an agent created over REST lands in the
//!   registry's config volume.

use std::{
    collections::{BTreeSet, HashMap},
    fs,
    net::{Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, bail};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use serde_json::json;
use serde_yaml::Value;
use taskforce_runtime::auth::{Keys, Scope};
use taskforce_tests::{paths, process::ChildProcess, stack::STARTUP_TIMEOUT};
use tokio::time::Instant;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::helpers::{agent_json, send};

/// The services of the stack, as compose names them.
const SERVICES: [&str; 3] = ["executor", "gateway", "registry"];
/// The binaries of the workspace a container may run.
const BINARIES: [&str; 4] = ["registry-svc", "executor-svc", "gateway", "taskforce"];
/// Kubernetes versions the rendered manifests are validated against: the oldest the manifests
/// support (native gRPC probes are GA since 1.27) and the newest the validator knows.
const K8S_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// The key the services call each other with, and the operator's key: what the user exports
/// for compose and puts in the Secret `taskforce-auth` for Kubernetes (docs/deploy.md).
const SERVICE_TOKEN: &str = "deploy-test-services-0123456789abcdef";
const OPERATOR_KEY: &str = "deploy-test-operator-0123456789abcdef";
/// The compose variables of the two keys, as the user exported them.
const USER_ENV: [(&str, &str); 2] = [
    ("TASKFORCE_SERVICE_TOKEN", SERVICE_TOKEN),
    ("TASKFORCE_API_KEY", OPERATOR_KEY),
];
/// The Secret of API keys the manifests read, as docs/deploy.md has the user create it.
const AUTH_SECRET: &str = "taskforce-auth";

// ---- tools ------------------------------------------------------------------------------------

/// Runs a tool in the workspace with a clean environment (a developer's `COMPOSE_*`, `OTEL_*`,
/// `TASKFORCE_*` or `KUBECONFIG` must not change what it renders) plus `env`; returns its
/// output, whatever its exit status.
fn tool_output(program: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let home = tempfile::tempdir().expect("a temp HOME");
    Command::new(program)
        .args(args)
        .current_dir(paths::workspace_root())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("LANG", "C.UTF-8")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

/// [`tool_output`] of a run that must succeed: its stdout.
fn run_tool(program: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = tool_output(program, args, env);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// `docker-compose -f deploy/compose.yaml ARGS` with `env` set, which must succeed: its stdout.
fn compose(args: &[&str], env: &[(&str, &str)]) -> String {
    compose_with(run_tool, args, env)
}

/// `docker-compose -f deploy/compose.yaml ARGS` run by `run` ([`run_tool`], [`tool_output`]).
fn compose_with<T>(
    run: impl FnOnce(&Path, &[&str], &[(&str, &str)]) -> T,
    args: &[&str],
    env: &[(&str, &str)],
) -> T {
    let file = paths::deploy_dir().join("compose.yaml");
    let file = file.to_str().expect("a UTF-8 path");
    let mut all = vec!["-f", file];
    all.extend_from_slice(args);
    run(&paths::docker_compose().expect("docker-compose"), &all, env)
}

/// The services `up` starts with the profiles `active` (docker-compose 1.x renders every service
/// with its `profiles`; Compose v2 leaves the inactive ones out).
fn started_by_up(config: &Value, active: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = config["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .filter(|(_, svc)| {
            let profiles = strings(&svc["profiles"]);
            profiles.is_empty() || profiles.iter().any(|p| active.contains(&p.as_str()))
        })
        .filter_map(|(name, _)| name.as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `kubectl kustomize deploy/k8s/overlays/OVERLAY`: the rendered text and its documents.
fn kustomize(overlay: &str) -> (String, Vec<Value>) {
    let dir = paths::deploy_dir().join("k8s/overlays").join(overlay);
    let text = run_tool(
        &paths::kubectl().expect("kubectl"),
        &["kustomize", dir.to_str().expect("a UTF-8 path")],
        &[],
    );
    let docs = text
        .split("\n---\n")
        .map(|d| serde_yaml::from_str::<Value>(d).expect("a YAML document"))
        .filter(|d| !d.is_null())
        .collect();
    (text, docs)
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key].as_str().unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_owned(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

// ---- compose ----------------------------------------------------------------------------------

#[test]
fn compose_renders_the_stack_and_the_observability_profile() {
    let config: Value = serde_yaml::from_str(&compose(&["config"], &USER_ENV))
        .expect("the rendered config is YAML");
    // The default profile: the three services, nothing else.
    assert_eq!(started_by_up(&config, &[]), SERVICES);
    let services = &config["services"];
    let metrics_port = |svc: &str| -> String {
        let args = strings(&services[svc]["command"]);
        flag(&args, "--metrics-listen")
            .map_or("8080", |a| a.rsplit(':').next().unwrap_or_default())
            .to_owned()
    };
    for (svc, port) in [("registry", 50051), ("executor", 50052), ("gateway", 8080)] {
        let s = &services[svc];
        assert!(
            str_of(&s["build"], "dockerfile").starts_with("deploy/docker/"),
            "{svc} is built from deploy/docker: {s:?}"
        );
        assert!(str_of(s, "image").starts_with("taskforce/"), "{svc}: {s:?}");
        let args = strings(&s["command"]);
        assert_eq!(
            flag(&args, "--listen"),
            Some(format!("0.0.0.0:{port}").as_str()),
            "{svc} listens on every interface of its container"
        );
        let test = strings(&s["healthcheck"]["test"]);
        assert_eq!(
            test[..3],
            ["CMD", "/usr/local/bin/taskforce", "health"],
            "{svc}'s health check is the CLI (no shell in distroless)"
        );
        assert!(
            test.last()
                .is_some_and(|t| t.contains(&format!("127.0.0.1:{port}"))),
            "{svc}: {test:?}"
        );
        // Tracing is off unless the endpoint is given; every service names itself.
        assert_eq!(s["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"], "", "{svc}");
        assert_eq!(
            s["environment"]["OTEL_SERVICE_NAME"],
            format!("taskforce-{svc}").as_str()
        );
        // Every service has both keys, the services' and the operator's (admins both), and
        // calls the others with the services' key.
        assert_eq!(
            s["environment"]["TASKFORCE_SERVICE_TOKEN"], SERVICE_TOKEN,
            "{svc}"
        );
        let keys = Keys::parse(str_of(&s["environment"], "TASKFORCE_API_KEYS"), svc)
            .unwrap_or_else(|e| panic!("{svc}: {e}"));
        for (token, name) in [(SERVICE_TOKEN, "services"), (OPERATOR_KEY, "operator")] {
            let key = keys
                .verify(token)
                .unwrap_or_else(|| panic!("{svc}: no {name} key"));
            assert_eq!(&*key.name, name, "{svc}");
            assert!(key.has(Scope::Admin), "{svc}: {name} is an admin key");
        }
        if svc != "gateway" {
            assert_eq!(
                flag(&args, "--metrics-listen"),
                Some(format!("0.0.0.0:{}", metrics_port(svc)).as_str()),
                "{svc} serves metrics beyond its container"
            );
        }
    }
    assert_eq!(metrics_port("registry"), "9465");
    assert_eq!(metrics_port("executor"), "9464");

    // Without either key variable (or with one empty), compose refuses to render and says
    // which one to set.
    for (missing, env) in [
        ("TASKFORCE_SERVICE_TOKEN", [USER_ENV[1]].as_slice()),
        (
            "TASKFORCE_API_KEY",
            &[USER_ENV[0], ("TASKFORCE_API_KEY", "")],
        ),
    ] {
        let out = compose_with(tool_output, &["config"], env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(&format!("set {missing},")),
            "compose without {missing}: {stderr}"
        );
    }

    // Start order gated by health.
    let healthy = |svc: &str, on: &str| services[svc]["depends_on"][on]["condition"].clone();
    assert_eq!(healthy("executor", "registry"), "service_healthy");
    assert_eq!(healthy("gateway", "registry"), "service_healthy");
    assert_eq!(healthy("gateway", "executor"), "service_healthy");

    // The gateway on 8080; the state in named volumes.
    assert!(
        strings(&services["gateway"]["ports"])
            .iter()
            .any(|p| p.trim_end_matches("/tcp").ends_with(":8080:8080")),
        "{:?}",
        services["gateway"]["ports"]
    );
    let volumes: BTreeSet<&str> = config["volumes"]
        .as_mapping()
        .expect("top-level volumes")
        .keys()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        volumes,
        BTreeSet::from(["executor-data", "registry-config", "registry-data"])
    );
    let mounts = |svc: &str| strings(&services[svc]["volumes"]);
    let registry_args = strings(&services["registry"]["command"]);
    for (volume, flag_name) in [
        ("registry-config", "--config-dir"),
        ("registry-data", "--data-dir"),
    ] {
        let dir = flag(&registry_args, flag_name).expect("the registry's dirs are given");
        assert!(
            mounts("registry").contains(&format!("{volume}:{dir}:rw")),
            "{volume} holds the registry's {flag_name} {dir}: {:?}",
            mounts("registry")
        );
    }
    let executor_dir = flag(&strings(&services["executor"]["command"]), "--data-dir")
        .expect("the executor's data dir")
        .to_owned();
    assert!(mounts("executor").contains(&format!("executor-data:{executor_dir}:rw")));

    // The profile `observability`, by flag and through the env file; the services then send
    // their traces to the collector.
    let endpoint = "http://otel-collector:4317";
    let with_all = [
        "executor",
        "gateway",
        "jaeger",
        "otel-collector",
        "registry",
    ];
    assert_eq!(started_by_up(&config, &["observability"]), with_all);
    let env_file = paths::deploy_dir().join("observability.env");
    let env_file = env_file.to_str().expect("a UTF-8 path");
    for (args, env) in [
        (
            vec!["--profile", "observability", "config"],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)],
        ),
        (vec!["--env-file", env_file, "config"], vec![]),
    ] {
        let env = [env, USER_ENV.to_vec()].concat();
        let config: Value = serde_yaml::from_str(&compose(&args, &env)).expect("YAML");
        for svc in SERVICES {
            assert_eq!(
                config["services"][svc]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"], endpoint,
                "{svc} with {args:?}"
            );
        }
        let jaeger_ui = strings(&config["services"]["jaeger"]["ports"]);
        assert!(
            jaeger_ui.iter().any(|p| p.contains(":16686:16686")),
            "{jaeger_ui:?}"
        );
        assert!(
            str_of(&config["services"]["otel-collector"], "image")
                .starts_with("otel/opentelemetry-collector-contrib:")
        );
        assert!(
            str_of(&config["services"]["jaeger"], "image").starts_with("jaegertracing/all-in-one:")
        );
    }

    // The env file turns the profile on by itself.
    let env_vars = dotenv(&paths::deploy_dir().join("observability.env"));
    let profiles: Vec<&str> = env_vars
        .get("COMPOSE_PROFILES")
        .map(|p| p.split(',').collect())
        .unwrap_or_default();
    assert_eq!(started_by_up(&config, &profiles), with_all);

    // The collector takes OTLP on 4317, sends traces to Jaeger, and scrapes the very ports the
    // services serve their metrics on.
    let collector: Value = serde_yaml::from_str(
        &fs::read_to_string(paths::deploy_dir().join("otel-collector.yaml")).expect("read"),
    )
    .expect("the collector config is YAML");
    assert_eq!(
        collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        "0.0.0.0:4317"
    );
    assert_eq!(
        collector["exporters"]["otlp/jaeger"]["endpoint"],
        "jaeger:4317"
    );
    assert!(
        strings(&collector["service"]["pipelines"]["traces"]["exporters"])
            .contains(&"otlp/jaeger".to_owned())
    );
    let targets: BTreeSet<String> =
        collector["receivers"]["prometheus"]["config"]["scrape_configs"]
            .as_sequence()
            .expect("scrape configs")
            .iter()
            .flat_map(|c| strings(&c["static_configs"][0]["targets"]))
            .collect();
    let expected: BTreeSet<String> = ["registry", "executor", "gateway"]
        .iter()
        .map(|svc| format!("{svc}:{}", metrics_port(svc)))
        .collect();
    assert_eq!(targets, expected);
}

// ---- Dockerfiles ------------------------------------------------------------------------------

/// What a Dockerfile builds and what its final stage (the image) starts from.
#[derive(Debug, Default)]
struct Image {
    /// The base image of each stage, in order (`ARG` defaults substituted).
    stages: Vec<String>,
    /// Every `RUN` of every stage, continuation lines joined.
    runs: Vec<String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: Vec<(String, String)>,
    /// `COPY` from the build context (the repository) into the image: (sources, destination).
    copies: Vec<(Vec<String>, String)>,
    user: Option<String>,
    workdir: Option<String>,
    expose: Vec<u16>,
    healthcheck: Vec<String>,
}

impl Image {
    /// Parses the instructions this test relies on (exec-form `ENTRYPOINT`, `CMD` and
    /// `HEALTHCHECK`, `ENV KEY=VALUE`, `COPY`); everything else is kept as `RUN` text or ignored.
    fn parse(text: &str) -> Self {
        let mut instructions = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(body) = line.strip_suffix('\\') {
                current.push_str(body.trim_end());
                current.push(' ');
            } else {
                current.push_str(line);
                instructions.push(std::mem::take(&mut current));
            }
        }
        let json = |s: &str| -> Vec<String> {
            serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("exec form {s:?}: {e}"))
        };
        let mut args: HashMap<String, String> = HashMap::new();
        let mut image = Self::default();
        for instruction in instructions {
            let (keyword, rest) = instruction
                .split_once(char::is_whitespace)
                .unwrap_or((instruction.as_str(), ""));
            let rest = rest.trim();
            match keyword.to_ascii_uppercase().as_str() {
                "ARG" if image.stages.is_empty() => {
                    if let Some((k, v)) = rest.split_once('=') {
                        args.insert(format!("${{{k}}}"), v.to_owned());
                    }
                }
                "FROM" => {
                    let base = rest.split_whitespace().next().unwrap_or_default();
                    let base = args.get(base).cloned().unwrap_or_else(|| base.to_owned());
                    let runs = std::mem::take(&mut image.runs);
                    let mut stages = std::mem::take(&mut image.stages);
                    stages.push(base);
                    image = Self {
                        stages,
                        runs,
                        ..Self::default()
                    };
                }
                "RUN" => image.runs.push(rest.to_owned()),
                "ENTRYPOINT" => image.entrypoint = json(rest),
                "CMD" => image.cmd = json(rest),
                "ENV" => {
                    image.env.extend(rest.split_whitespace().filter_map(|t| {
                        t.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
                    }))
                }
                "COPY" => {
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    if words.iter().any(|w| w.starts_with("--from=")) {
                        continue;
                    }
                    let paths: Vec<String> = words
                        .iter()
                        .filter(|w| !w.starts_with("--"))
                        .map(|w| (*w).to_owned())
                        .collect();
                    if let Some((dest, sources)) = paths.split_last() {
                        image.copies.push((sources.to_vec(), dest.clone()));
                    }
                }
                "USER" => image.user = Some(rest.to_owned()),
                "WORKDIR" => image.workdir = Some(rest.to_owned()),
                "EXPOSE" => image.expose.extend(
                    rest.split_whitespace()
                        .filter_map(|p| p.parse::<u16>().ok()),
                ),
                "HEALTHCHECK" => {
                    if let Some((_, cmd)) = rest.split_once("CMD ") {
                        image.healthcheck = json(cmd);
                    }
                }
                _ => {}
            }
        }
        image
    }

    fn read(path: &Path) -> Self {
        Self::parse(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
    }
}

#[test]
fn dockerfiles_lint_clean_and_build_their_binary_with_the_cli() {
    let hadolint = paths::hadolint().expect("hadolint");
    let dir = paths::deploy_dir().join("docker");
    let distroless = "gcr.io/distroless/cc-debian12:nonroot";
    for (file, package, base, ports) in [
        (
            "registry.Dockerfile",
            "registry-svc",
            distroless,
            vec![50051, 9465],
        ),
        (
            "executor.Dockerfile",
            "executor-svc",
            "debian:bookworm-slim",
            vec![50052, 9464],
        ),
        ("gateway.Dockerfile", "gateway", distroless, vec![8080]),
    ] {
        let path = dir.join(file);
        run_tool(&hadolint, &[path.to_str().expect("a UTF-8 path")], &[]);
        let image = Image::read(&path);
        assert_eq!(
            image.stages.first().map(String::as_str),
            Some("rust:1-bookworm"),
            "{file}"
        );
        assert_eq!(
            image.stages.last().map(String::as_str),
            Some(base),
            "{file}"
        );
        let build = format!("cargo build --release --locked -p {package} -p taskforce-cli");
        assert!(
            image.runs.iter().any(|r| r.contains(&build)
                && r.contains("--mount=type=cache,id=taskforce-cargo-registry")
                && r.contains("target=/src/target")),
            "{file} builds with `{build}` and cache mounts: {:?}",
            image.runs
        );
        assert_eq!(
            image.user.as_deref(),
            Some("65532:65532"),
            "{file} runs as non-root"
        );
        assert_eq!(
            image.entrypoint.last().map(String::as_str),
            Some(format!("/usr/local/bin/{package}").as_str()),
            "{file}"
        );
        assert_eq!(image.expose, ports, "{file}");
        assert_eq!(
            image.healthcheck[..2],
            ["/usr/local/bin/taskforce", "health"],
            "{file}"
        );
        assert_eq!(
            flag(&image.cmd, "--listen").map(|l| l.starts_with("0.0.0.0:")),
            Some(true)
        );
    }
    let ignore = fs::read_to_string(paths::workspace_root().join(".dockerignore"))
        .expect(".dockerignore at the repository root");
    let ignored: Vec<&str> = ignore.lines().map(str::trim).collect();
    for dir in ["target/", ".tools/", ".tf-data/", ".git/"] {
        assert!(ignored.contains(&dir), ".dockerignore leaves out {dir}");
    }
}

// ---- Kubernetes -------------------------------------------------------------------------------

fn of_kind<'d>(docs: &'d [Value], kind: &str) -> Vec<&'d Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn named<'d>(docs: &'d [Value], kind: &str, name: &str) -> &'d Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The `env` entry `name` of a container.
fn env_entry<'c>(container: &'c Value, name: &str) -> Option<&'c Value> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The value of the environment variable `name` of a container (`value` entries only).
fn env_value<'c>(container: &'c Value, name: &str) -> Option<&'c str> {
    env_entry(container, name).and_then(|e| e["value"].as_str())
}

#[test]
fn kustomize_overlays_render_valid_manifests() {
    let validate = paths::kubernetes_validate().expect("kubernetes-validate");
    for (overlay, namespace, executors, gateways) in
        [("dev", "taskforce-dev", 2, 1), ("prod", "taskforce", 4, 2)]
    {
        let (text, docs) = kustomize(overlay);
        let file = tempfile::NamedTempFile::new().expect("temp file");
        fs::write(file.path(), &text).expect("write");
        for version in K8S_VERSIONS {
            run_tool(
                &validate,
                &[
                    "--strict",
                    "--quiet",
                    "-k",
                    version,
                    file.path().to_str().expect("UTF-8"),
                ],
                &[],
            );
        }

        assert_eq!(
            named(&docs, "Namespace", namespace)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        for doc in &docs {
            if doc["kind"] != "Namespace" {
                assert_eq!(
                    doc["metadata"]["namespace"], namespace,
                    "{overlay}: {doc:?}"
                );
            }
        }

        let registry = named(&docs, "StatefulSet", "registry");
        assert_eq!(
            registry["spec"]["replicas"], 1,
            "one writer of the config dir"
        );
        let executor = named(&docs, "StatefulSet", "executor");
        assert_eq!(
            registry["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "state"
        );
        assert_eq!(executor["spec"]["replicas"], executors, "{overlay}");
        assert_eq!(executor["spec"]["serviceName"], "executor");
        assert_eq!(
            executor["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "data"
        );
        assert_eq!(
            named(&docs, "Service", "executor")["spec"]["clusterIP"],
            "None"
        );
        let gateway = named(&docs, "Deployment", "gateway");
        assert_eq!(gateway["spec"]["replicas"], gateways, "{overlay}");

        // The images: dev runs what compose builds (tag `dev`), prod the workspace's version.
        let built: BTreeSet<String> = ComposeFile::read()
            .services
            .into_iter()
            .map(|(_, _, _, image)| image)
            .collect();
        for workload in [registry, executor, gateway] {
            let reference = str_of(
                &workload["spec"]["template"]["spec"]["containers"][0],
                "image",
            );
            if overlay == "dev" {
                assert!(built.contains(reference), "{reference} is one of {built:?}");
            } else {
                assert!(
                    built.iter().any(|b| repository(b) == repository(reference))
                        && reference.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
                    "{reference}"
                );
            }
        }

        // The gateway knows every executor replica by its pod name.
        let gateway_container = &gateway["spec"]["template"]["spec"]["containers"][0];
        let expected: Vec<String> = (0..executors)
            .map(|i| format!("executor-{i}=http://executor-{i}.executor:50052"))
            .collect();
        assert_eq!(
            env_value(gateway_container, "TASKFORCE_EXECUTOR_URL"),
            Some(expected.join(",").as_str()),
            "{overlay}"
        );
        let executor_container = &executor["spec"]["template"]["spec"]["containers"][0];
        let instance = env_entry(executor_container, "TASKFORCE_EXECUTOR_INSTANCE")
            .expect("the executor's instance name");
        assert_eq!(
            instance["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );

        // Probes: native gRPC for the gRPC services, HTTP for the gateway.
        for (workload, port, service) in [
            (registry, 50051, "taskforce.v1.AgentRegistry"),
            (executor, 50052, "taskforce.v1.Executor"),
        ] {
            let c = &workload["spec"]["template"]["spec"]["containers"][0];
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                assert_eq!(c[probe]["grpc"]["port"], port, "{probe}");
                assert_eq!(c[probe]["grpc"]["service"], service, "{probe}");
            }
        }
        // A tool process's memory limit leaves room in the executor's container: a tool over
        // its own limit fails alone instead of the container being OOM-killed with its runs.
        let tool_mib: u64 = env_entry(executor_container, "TASKFORCE_TOOL_MEMORY_MB")
            .and_then(|e| e["value"].as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{overlay}: the executor sets TASKFORCE_TOOL_MEMORY_MB"));
        let limit = executor_container["resources"]["limits"]["memory"]
            .as_str()
            .unwrap_or_default();
        let limit_mib: u64 = match limit.strip_suffix("Gi") {
            Some(gi) => gi.parse::<u64>().map(|g| g * 1024).unwrap_or(0),
            None => limit
                .strip_suffix("Mi")
                .and_then(|m| m.parse().ok())
                .unwrap_or(0),
        };
        assert!(
            tool_mib * 2 <= limit_mib,
            "{overlay}: a tool may use {tool_mib} MiB of the executor's {limit}"
        );
        assert_eq!(
            gateway_container["livenessProbe"]["httpGet"]["path"],
            "/healthz"
        );
        // Readiness too: /readyz as readiness would take every gateway out at once whenever
        // the one registry restarts.
        assert_eq!(
            gateway_container["readinessProbe"]["httpGet"]["path"],
            "/healthz"
        );
        // Requests routed to it until its endpoint is gone are still taken.
        assert_eq!(
            gateway_container["lifecycle"]["preStop"]["sleep"]["seconds"],
            5
        );

        // Every pod: non-root, RuntimeDefault seccomp; every container (init ones too): no
        // privilege escalation, read-only root, no capabilities, requests and limits.
        for workload in [registry, executor, gateway] {
            let pod = &workload["spec"]["template"]["spec"];
            let name = str_of(&workload["metadata"], "name");
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
            assert_eq!(pod["securityContext"]["runAsUser"], 65532, "{name}");
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            assert_eq!(pod["automountServiceAccountToken"], false, "{name}");
            let containers = [&pod["initContainers"], &pod["containers"]]
                .into_iter()
                .filter_map(Value::as_sequence)
                .flatten();
            for c in containers {
                let sc = &c["securityContext"];
                let cname = str_of(c, "name");
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{cname}");
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{cname}");
                assert_eq!(sc["runAsNonRoot"], true, "{cname}");
                assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{cname}");
                for kind in ["requests", "limits"] {
                    for resource in ["cpu", "memory"] {
                        assert!(
                            !c["resources"][kind][resource].is_null(),
                            "{cname} has {kind}.{resource}"
                        );
                    }
                }
            }
            let args = strings(&pod["containers"][0]["args"]);
            assert!(
                flag(&args, "--listen").is_some_and(|l| l.starts_with("0.0.0.0:")),
                "{name}: {args:?}"
            );
            // ... so its API keys, and the key it calls the others with, come from the Secret
            // the user creates; without it the pod waits rather than starts unprotected.
            for (var, key) in [
                ("TASKFORCE_API_KEYS", "api-keys.yaml"),
                ("TASKFORCE_SERVICE_TOKEN", "service-token"),
            ] {
                let entry = env_entry(&pod["containers"][0], var)
                    .unwrap_or_else(|| panic!("{overlay}: {name} has no {var}"));
                let secret = &entry["valueFrom"]["secretKeyRef"];
                assert_eq!(secret["name"], AUTH_SECRET, "{overlay}: {name} {var}");
                assert_eq!(secret["key"], key, "{overlay}: {name} {var}");
                assert!(
                    secret["optional"].is_null() || secret["optional"] == false,
                    "{overlay}: {name} {var} is not optional"
                );
            }
        }

        // Ingress: only the gateway reaches the executors; the gateway and the executors reach
        // the registry; everything else is denied.
        let policies: BTreeSet<&str> = of_kind(&docs, "NetworkPolicy")
            .iter()
            .map(|p| str_of(&p["metadata"], "name"))
            .collect();
        assert_eq!(
            policies,
            BTreeSet::from([
                "default-deny-ingress",
                "executor-ingress",
                "executor-registry-egress",
                "gateway-ingress",
                "registry-ingress"
            ])
        );
        // Egress: the executors and the registry, where what agents' authors and models choose
        // runs, reach public addresses but not the cloud metadata endpoint, the nodes, nor the
        // cluster's other pods and services.
        let egress = &named(&docs, "NetworkPolicy", "executor-registry-egress")["spec"];
        assert_eq!(strings(&egress["policyTypes"]), ["Egress"]);
        assert_eq!(
            strings(&egress["podSelector"]["matchExpressions"][0]["values"]),
            ["executor", "registry"]
        );
        let blocks: Vec<Value> = egress["egress"]
            .as_sequence()
            .expect("rules")
            .iter()
            .flat_map(|r| r["to"].as_sequence().cloned().unwrap_or_default())
            .map(|t| t["ipBlock"].clone())
            .collect();
        for (all, private) in [
            (
                "0.0.0.0/0",
                &[
                    "10.0.0.0/8",
                    "100.64.0.0/10",
                    "169.254.0.0/16",
                    "172.16.0.0/12",
                    "192.168.0.0/16",
                ][..],
            ),
            ("::/0", &["fc00::/7", "fe80::/10"][..]),
        ] {
            let block = blocks
                .iter()
                .find(|b| b["cidr"] == all)
                .unwrap_or_else(|| panic!("{overlay}: no rule for {all}"));
            let except = strings(&block["except"]);
            for range in private {
                assert!(
                    except.iter().any(|e| e == range),
                    "{overlay}: the executors and the registry reach {range}"
                );
            }
        }
        let deny = named(&docs, "NetworkPolicy", "default-deny-ingress");
        assert_eq!(
            deny["spec"]["podSelector"],
            Value::Mapping(Default::default())
        );
        assert!(deny["spec"]["ingress"].is_null());
        let from = |policy: &str, port: u64| -> BTreeSet<String> {
            named(&docs, "NetworkPolicy", policy)["spec"]["ingress"]
                .as_sequence()
                .expect("rules")
                .iter()
                .filter(|r| r["ports"][0]["port"] == port)
                .flat_map(|r| r["from"].as_sequence().cloned().unwrap_or_default())
                .map(|f| {
                    str_of(&f["podSelector"]["matchLabels"], "app.kubernetes.io/name").to_owned()
                })
                .collect()
        };
        assert_eq!(
            from("registry-ingress", 50051),
            BTreeSet::from(["executor".into(), "gateway".into()])
        );
        assert_eq!(
            from("executor-ingress", 50052),
            BTreeSet::from(["gateway".to_owned()])
        );

        if overlay == "prod" {
            let pdbs: BTreeSet<&str> = of_kind(&docs, "PodDisruptionBudget")
                .iter()
                .map(|p| str_of(&p["metadata"], "name"))
                .collect();
            assert_eq!(pdbs, BTreeSet::from(["executor", "gateway"]));
        }
    }
}

/// The files of `configs/` the deployments use, relative to it: profiles, custom agents, the
/// catalog (the registry's), `llm_config.yaml` and `mcp/global.yaml` (the executor's).
fn deployed_configs(root: &Path) -> BTreeSet<String> {
    let yaml_in = |dir: &str| -> Vec<String> {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| n.ends_with(".yaml"))
            .map(|n| {
                if dir.is_empty() {
                    n
                } else {
                    format!("{dir}/{n}")
                }
            })
            .collect()
    };
    let mut files: BTreeSet<String> = ["", "custom", "catalog", "mcp"]
        .iter()
        .flat_map(|d| yaml_in(d))
        .collect();
    files.insert("llm_config.yaml".to_owned());
    files
}

#[test]
fn k8s_configs_match_the_repository() {
    let repo = paths::sample_configs();
    let copy = paths::deploy_dir().join("k8s/base/configs");
    let expected = deployed_configs(&repo);
    assert_eq!(
        deployed_configs(&copy),
        expected,
        "deploy/k8s/base/configs/ must hold a copy of every file of configs/ the services use"
    );
    for file in &expected {
        assert_eq!(
            fs::read_to_string(copy.join(file)).expect("the copy"),
            fs::read_to_string(repo.join(file)).expect("the original"),
            "deploy/k8s/base/configs/{file} differs from configs/{file}: copy it again"
        );
    }
    // ... and the kustomization generates ConfigMaps from every one of them.
    let kustomization: Value = serde_yaml::from_str(
        &fs::read_to_string(paths::deploy_dir().join("k8s/base/kustomization.yaml")).expect("read"),
    )
    .expect("YAML");
    let generated: BTreeSet<String> = kustomization["configMapGenerator"]
        .as_sequence()
        .expect("configMapGenerator")
        .iter()
        .flat_map(|g| strings(&g["files"]))
        .filter_map(|f| f.strip_prefix("configs/").map(str::to_owned))
        .collect();
    assert_eq!(generated, expected);
}

// ---- one machine: the emulation ----------------------------------------------------------------

/// A container's file system on this machine: a root directory and mounts (container path →
/// local directory), the longest mount path first.
#[derive(Debug, Clone)]
struct Fs {
    root: PathBuf,
    mounts: Vec<(String, PathBuf)>,
}

/// `path` below `dir` (`Some("")` for `dir` itself).
fn below<'p>(path: &'p str, dir: &str) -> Option<&'p str> {
    let rest = path.strip_prefix(dir.trim_end_matches('/'))?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

impl Fs {
    fn new(root: PathBuf, mut mounts: Vec<(String, PathBuf)>) -> anyhow::Result<Self> {
        fs::create_dir_all(&root)?;
        for (_, local) in &mounts {
            fs::create_dir_all(local)?;
        }
        mounts.sort_by_key(|(at, _)| std::cmp::Reverse(at.len()));
        Ok(Self { root, mounts })
    }

    /// Where the container path `path` is on this machine.
    fn path(&self, path: &str) -> PathBuf {
        for (at, local) in &self.mounts {
            if let Some(rest) = below(path, at) {
                return local.join(rest);
            }
        }
        self.root.join(path.trim_start_matches('/'))
    }

    fn mounted(&self, path: &str) -> bool {
        self.mounts.iter().any(|(at, _)| below(path, at).is_some())
    }

    /// Puts the image's files from the build context in place. `hidden`: container paths whose
    /// mount hides the image's files (Kubernetes volumes and bind mounts do; a new Docker named
    /// volume starts as a copy of them instead).
    fn install(&self, image: &Image, hidden: impl Fn(&str) -> bool) -> anyhow::Result<()> {
        for (sources, dest) in &image.copies {
            if hidden(dest) {
                continue;
            }
            for source in sources {
                let from = paths::workspace_root().join(source.trim_end_matches('/'));
                let to = self.path(dest);
                if from.is_dir() {
                    paths::copy_dir(&from, &to)?;
                } else {
                    let to = if dest.ends_with('/') {
                        to.join(from.file_name().context("a file name")?)
                    } else {
                        to
                    };
                    fs::create_dir_all(to.parent().context("a parent")?)?;
                    fs::copy(&from, &to).with_context(|| format!("COPY {source} {dest}"))?;
                }
            }
        }
        Ok(())
    }
}

/// Container ports of this machine: (host name, port) → local port. Host names are compose
/// services, pods, Services, and `<pod>.<headless Service>`.
///
/// Each local port stays bound by this test until its container starts ([`Net::release`]):
/// a port probed free and let go at once could be handed to another test's listener (or to a
/// second container here) before the container binds it, which left a pod that never came up.
#[derive(Debug, Default)]
struct Net {
    routes: HashMap<(String, u16), u16>,
    held: HashMap<String, Vec<TcpListener>>,
}

impl Net {
    /// A free local port for `port` of the container `host`, held until `host` starts.
    fn listen(&mut self, host: &str, port: u16) -> u16 {
        if let Some(local) = self.route(host, port) {
            return local;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a local port");
        let local = listener.local_addr().expect("a bound address").port();
        self.held.entry(host.to_owned()).or_default().push(listener);
        self.routes.insert((host.to_owned(), port), local);
        local
    }

    /// Lets go of `host`'s ports, for its process to bind them.
    fn release(&mut self, host: &str) {
        self.held.remove(host);
    }

    fn route(&self, host: &str, port: u16) -> Option<u16> {
        self.routes.get(&(host.to_owned(), port)).copied()
    }

    fn alias(&mut self, host: &str, port: u16, to: (&str, u16)) {
        if let Some(local) = self.route(to.0, to.1) {
            self.routes.insert((host.to_owned(), port), local);
        }
    }
}

/// The parts of a value (comma-separated, each maybe `NAME=`), as (prefix, rest) pairs.
fn parts(value: &str) -> Vec<(&str, &str)> {
    value
        .split(',')
        .map(|part| match part.split_once('=') {
            Some((name, rest)) if !name.is_empty() && !name.contains(['/', ':']) => {
                (&part[..=name.len()], rest)
            }
            _ => ("", part),
        })
        .collect()
}

/// The container ports a value has the container listen on (`0.0.0.0:PORT`).
fn listens(value: &str) -> Vec<u16> {
    parts(value)
        .into_iter()
        .filter_map(|(_, v)| v.strip_prefix("0.0.0.0:")?.parse().ok())
        .collect()
}

fn loopback(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// Why a container with this command line and environment would serve without
/// authentication beyond itself, if it would: it listens on `0.0.0.0` without API keys, or
/// with authentication switched off. Here `0.0.0.0` becomes 127.0.0.1, where the services'
/// own rule (no keys off loopback, no start) lets them start, so the test applies it instead,
/// and refuses `--insecure-no-auth` too.
fn unauthenticated(argv: &[String], env: &[(String, String)]) -> Option<String> {
    let values = argv.iter().chain(env.iter().map(|(_, v)| v));
    let ports: Vec<u16> = values.flat_map(|v| listens(v)).collect();
    if ports.is_empty() {
        return None;
    }
    // The last entry of a variable wins, as in a container.
    let vars: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let has_flag = |name: &str| {
        argv.iter()
            .any(|a| a == name || a.starts_with(&format!("{name}=")))
    };
    // A switch, as the services read it: on alone or with 1/true/yes/on.
    let on = |v: &str| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    };
    let insecure_flag = argv.iter().any(|a| {
        a == "--insecure-no-auth" || a.strip_prefix("--insecure-no-auth=").is_some_and(&on)
    });
    if insecure_flag
        || vars
            .get("TASKFORCE_INSECURE_NO_AUTH")
            .is_some_and(|v| on(v))
    {
        return Some(format!(
            "listens on 0.0.0.0 ({ports:?}) with authentication switched off"
        ));
    }
    let keys = ["TASKFORCE_API_KEYS", "TASKFORCE_API_KEYS_FILE"]
        .iter()
        .any(|k| vars.get(k).is_some_and(|v| !v.trim().is_empty()))
        || has_flag("--api-keys")
        || has_flag("--api-keys-file");
    (!keys).then(|| {
        format!(
            "listens on 0.0.0.0 ({ports:?}) without API keys (TASKFORCE_API_KEYS or \
             TASKFORCE_API_KEYS_FILE): it would refuse to start"
        )
    })
}

/// One argument or environment value of the container `me`, mapped to this machine: URLs of
/// containers and `0.0.0.0:PORT` to 127.0.0.1 and local ports, absolute paths into its [`Fs`].
fn map_value(net: &Net, me: &str, fs: &Fs, value: &str) -> anyhow::Result<String> {
    let mut out = Vec::new();
    for (prefix, v) in parts(value) {
        out.push(format!("{prefix}{}", map_one(net, me, fs, v)?));
    }
    Ok(out.join(","))
}

fn map_one(net: &Net, me: &str, fs: &Fs, value: &str) -> anyhow::Result<String> {
    if let Some((scheme, rest)) = value.split_once("://") {
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let Some((host, port)) = authority.rsplit_once(':') else {
            return Ok(value.to_owned());
        };
        let Ok(port) = port.parse::<u16>() else {
            return Ok(value.to_owned());
        };
        let host = if loopback(host) { me } else { host };
        let local = net
            .route(host, port)
            .with_context(|| format!("{value}: no container here serves {host}:{port}"))?;
        return Ok(format!("{scheme}://127.0.0.1:{local}{path}"));
    }
    if let Some(port) = value.strip_prefix("0.0.0.0:") {
        let port: u16 = port.parse().with_context(|| format!("port of {value}"))?;
        let local = net.route(me, port).context("a listening port")?;
        return Ok(format!("127.0.0.1:{local}"));
    }
    if value.starts_with('/') {
        return Ok(fs.path(value).display().to_string());
    }
    Ok(value.to_owned())
}

/// A health check or readiness probe, as the file gives it.
#[derive(Debug, Clone)]
enum Probe {
    /// A command in the container (compose `CMD`, an `exec` probe).
    Exec(Vec<String>),
    /// `grpc.health.v1` on a container port.
    Grpc { port: u16, service: String },
    /// A GET on a container port.
    Http { port: u16, path: String },
}

/// A container as its file describes it, before mapping.
#[derive(Debug)]
struct Spec {
    name: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    probe: Probe,
    fs: Fs,
    workdir: String,
}

/// The workspace binary an argv runs and its arguments. The binary comes first: no init such as
/// `tini` in front of it (a service started as PID 1 is its own init, and `tini` would keep the
/// container's secrets readable in its `/proc/1/environ`; see `init.rs`).
fn program(argv: &[String]) -> anyhow::Result<(PathBuf, Vec<String>)> {
    let Some(first) = argv.first() else {
        bail!("an empty command line")
    };
    let name = Path::new(first)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if BINARIES.contains(&name) {
        return Ok((paths::binary(name)?, argv[1..].to_vec()));
    }
    bail!("{argv:?} does not start with a binary of the workspace (no init in front of it)")
}

impl Spec {
    /// Registers the ports this container listens on.
    fn listen(&self, net: &mut Net) {
        let values = self.argv.iter().chain(self.env.iter().map(|(_, v)| v));
        for port in values.flat_map(|v| listens(v)) {
            net.listen(&self.name, port);
        }
    }

    /// Starts the container's process, its output in `logs/<name>.log`.
    fn start(&self, net: &mut Net, logs: &Path) -> anyhow::Result<ChildProcess> {
        if let Some(why) = unauthenticated(&self.argv, &self.env) {
            bail!("{}: {why}", self.name);
        }
        let argv = self
            .argv
            .iter()
            .map(|a| map_value(net, &self.name, &self.fs, a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (binary, args) = program(&argv)?;
        let workdir = self.fs.path(&self.workdir);
        fs::create_dir_all(&workdir)?;
        let home = self.fs.path("/home");
        fs::create_dir_all(&home)?;
        let mut cmd = Command::new(binary);
        // A container's environment is its image's and its file's, not this process's; PATH
        // stays (python3 and git of the executor's tools are this machine's).
        cmd.args(args)
            .current_dir(workdir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("HOSTNAME", &self.name);
        for (key, value) in &self.env {
            cmd.env(key, map_value(net, &self.name, &self.fs, value)?);
        }
        fs::create_dir_all(logs)?;
        net.release(&self.name);
        ChildProcess::spawn(&self.name, cmd, &logs.join(format!("{}.log", self.name)))
    }

    /// True when the probe passes now.
    async fn healthy(&self, net: &Net, http: &reqwest::Client) -> anyhow::Result<bool> {
        let local = |port: u16| {
            net.route(&self.name, port)
                .with_context(|| format!("{} does not listen on {port}", self.name))
        };
        Ok(match &self.probe {
            Probe::Exec(argv) => {
                let argv = argv
                    .iter()
                    .map(|a| map_value(net, &self.name, &self.fs, a))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let (binary, args) = program(&argv)?;
                tokio::process::Command::new(binary)
                    .args(args)
                    .env_clear()
                    .output()
                    .await?
                    .status
                    .success()
            }
            Probe::Grpc { port, service } => {
                let channel = tonic::transport::Endpoint::from_shared(format!(
                    "http://127.0.0.1:{}",
                    local(*port)?
                ))?
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(2))
                .connect_lazy();
                HealthClient::new(channel)
                    .check(HealthCheckRequest {
                        service: service.clone(),
                    })
                    .await
                    .is_ok_and(|r| r.get_ref().status == ServingStatus::Serving as i32)
            }
            Probe::Http { port, path } => http
                .get(format!("http://127.0.0.1:{}{path}", local(*port)?))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
        })
    }

    /// Waits until the probe passes, failing early when the process ends.
    async fn wait_healthy(
        &self,
        child: &mut ChildProcess,
        net: &Net,
        http: &reqwest::Client,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        loop {
            if self.healthy(net, http).await? {
                return Ok(());
            }
            if let Some(status) = child.exited() {
                bail!("{} exited ({status})\n{}", self.name, child.log_tail(60));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} not healthy ({:?}) in time\n{}",
                    self.name,
                    self.probe,
                    child.log_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The processes of one emulated deployment; on a failing test their logs are printed.
#[derive(Default)]
struct Running(Vec<ChildProcess>);

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for child in &self.0 {
                eprintln!("{}", child.log_tail(60));
            }
        }
    }
}

/// Variables of a `.env` file (`KEY=VALUE` lines).
fn dotenv(path: &Path) -> HashMap<String, String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Compose interpolation with `vars` and nothing else set: `$$`, `${VAR}`, `${VAR:-default}`
/// (unset or empty), `${VAR-default}` (unset), and `${VAR:?message}` (unset or empty) and
/// `${VAR?message}` (unset), which are errors carrying the message.
fn interpolate(text: &str, vars: &HashMap<String, String>) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').context("an unclosed ${...}")?;
            let expr = &body[..end];
            let name_end = expr
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(expr.len());
            let (name, operator) = expr.split_at(name_end);
            let set = vars.get(name);
            let non_empty = set.filter(|v| !v.is_empty());
            let required = |value: Option<&String>, message: &str| match value {
                Some(v) => Ok(v.clone()),
                None if message.is_empty() => bail!("{name} is not set"),
                None => bail!("{name}: {message}"),
            };
            let value = if operator.is_empty() {
                set.cloned().unwrap_or_default()
            } else if let Some(default) = operator.strip_prefix(":-") {
                non_empty.map_or(default, String::as_str).to_owned()
            } else if let Some(message) = operator.strip_prefix(":?") {
                required(non_empty, message)?
            } else if let Some(default) = operator.strip_prefix('-') {
                set.map_or(default, String::as_str).to_owned()
            } else if let Some(message) = operator.strip_prefix('?') {
                required(set, message)?
            } else {
                bail!("not a compose substitution: ${{{expr}}}");
            };
            out.push_str(&value);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[test]
fn interpolation_follows_compose() {
    let vars: HashMap<String, String> = [("SET", "value"), ("EMPTY", "")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
    let ok = |text: &str| interpolate(text, &vars).expect(text);
    let err = |text: &str| interpolate(text, &vars).expect_err(text).to_string();
    assert_eq!(ok("a ${SET} $$b ${UNSET}."), "a value $b .");
    assert_eq!(
        ok("${EMPTY:-d} ${EMPTY-d} ${UNSET-d} ${SET:-d}"),
        "d  d value"
    );
    assert_eq!(ok("${SET:?why} ${SET?why} ${EMPTY?why}"), "value value ");
    assert_eq!(
        err("${UNSET:?set UNSET, please}"),
        "UNSET: set UNSET, please"
    );
    assert_eq!(err("${EMPTY:?set EMPTY}"), "EMPTY: set EMPTY");
    assert_eq!(err("${UNSET?}"), "UNSET is not set");
}

#[test]
fn a_container_listening_on_every_interface_needs_api_keys() {
    let argv = |a: &[&str]| -> Vec<String> { a.iter().map(|s| (*s).to_owned()).collect() };
    let env = |e: &[(&str, &str)]| -> Vec<(String, String)> {
        e.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let exposed = argv(&["registry-svc", "--listen", "0.0.0.0:50051"]);
    let keys = env(&[("TASKFORCE_API_KEYS", "{keys: [...]}")]);
    assert!(unauthenticated(&exposed, &keys).is_none());
    assert!(unauthenticated(&exposed, &env(&[("TASKFORCE_API_KEYS_FILE", "/k.yaml")])).is_none());
    assert!(
        unauthenticated(&argv(&["gateway", "--listen", "127.0.0.1:8080"]), &[]).is_none(),
        "loopback needs no keys"
    );
    for (argv, env) in [
        (exposed.clone(), vec![]),
        (exposed.clone(), env(&[("TASKFORCE_API_KEYS", " ")])),
        (
            argv(&["gateway", "--metrics-listen", "0.0.0.0:9464"]),
            env(&[("TASKFORCE_API_KEYS", "")]),
        ),
        (
            argv(&["gateway"]),
            env(&[("TASKFORCE_LISTEN", "0.0.0.0:8080")]),
        ),
        (
            [exposed.clone(), argv(&["--insecure-no-auth"])].concat(),
            vec![],
        ),
        (
            exposed,
            [keys, env(&[("TASKFORCE_INSECURE_NO_AUTH", "true")])].concat(),
        ),
    ] {
        assert!(unauthenticated(&argv, &env).is_some(), "{argv:?} {env:?}");
    }
}

/// The compose file's services that are built here (the observability profile's images are
/// third-party), each with the Dockerfile it is built from and the image name it gets.
struct ComposeFile {
    /// Compose's variables: `deploy/.env`, then what the user exported ([`USER_ENV`]).
    vars: HashMap<String, String>,
    services: Vec<(String, Value, PathBuf, String)>,
}

impl ComposeFile {
    fn read() -> Self {
        let deploy = paths::deploy_dir();
        let mut vars = dotenv(&deploy.join(".env"));
        vars.extend(USER_ENV.map(|(k, v)| (k.to_owned(), v.to_owned())));
        let interp =
            |s: &str| interpolate(s, &vars).unwrap_or_else(|e| panic!("deploy/compose.yaml: {e}"));
        let file: Value = serde_yaml::from_str(
            &fs::read_to_string(deploy.join("compose.yaml")).expect("deploy/compose.yaml"),
        )
        .expect("YAML");
        let mut services = Vec::new();
        for (name, svc) in file["services"].as_mapping().expect("services") {
            let name = name.as_str().expect("a service name").to_owned();
            if svc["build"].is_null() {
                continue;
            }
            let context = deploy.join(interp(str_of(&svc["build"], "context")));
            let dockerfile = context.join(interp(str_of(&svc["build"], "dockerfile")));
            let image = interp(str_of(svc, "image"));
            services.push((name, svc.clone(), dockerfile, image));
        }
        Self { vars, services }
    }

    /// Image repository (the name without its tag: overlays pick the version) → the image
    /// built from its Dockerfile.
    fn images(&self) -> HashMap<String, Image> {
        self.services
            .iter()
            .map(|(_, _, dockerfile, image)| {
                (repository(image).to_owned(), Image::read(dockerfile))
            })
            .collect()
    }
}

/// An image reference without its tag (`taskforce/gateway:dev` → `taskforce/gateway`).
fn repository(reference: &str) -> &str {
    let name_start = reference.rfind('/').map_or(0, |i| i + 1);
    reference[name_start..]
        .find(':')
        .map_or(reference, |i| &reference[..name_start + i])
}

/// A list of strings, or `text` split on white space (compose's string form of `command`).
fn words(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.split_whitespace().map(str::to_owned).collect()),
        other => Some(strings(other)),
    }
}

/// The compose services as containers of this machine, with the order `depends_on` gives.
fn compose_specs(root: &Path) -> anyhow::Result<Vec<(Spec, Vec<String>)>> {
    let compose = ComposeFile::read();
    let mut specs = Vec::new();
    for (name, svc, dockerfile, _) in &compose.services {
        let image = Image::read(dockerfile);
        let interp =
            |s: &str| interpolate(s, &compose.vars).with_context(|| format!("service {name}"));
        // argv: the image's ENTRYPOINT, then `command` (else the image's CMD).
        let mut argv = image.entrypoint.clone();
        argv.extend(words(&svc["command"]).unwrap_or_else(|| image.cmd.clone()));
        let argv = argv
            .iter()
            .map(|a| interp(a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // env: the image's ENV, then `environment` (a key without a value comes from the shell
        // running compose, which sets none here).
        let mut env = image.env.clone();
        match &svc["environment"] {
            Value::Mapping(m) => {
                for (k, v) in m {
                    let key = k.as_str().context("a variable name")?.to_owned();
                    let value = match v {
                        Value::Null => continue,
                        Value::String(s) => interp(s)?,
                        other => serde_yaml::to_string(other)?.trim().to_owned(),
                    };
                    env.push((key, value));
                }
            }
            Value::Sequence(list) => {
                for item in list.iter().filter_map(Value::as_str) {
                    if let Some((k, v)) = item.split_once('=') {
                        env.push((k.to_owned(), interp(v)?));
                    }
                }
            }
            _ => {}
        }
        // Volumes: named volumes are directories shared by name, bind mounts the host's paths.
        let mut mounts = Vec::new();
        let mut binds = Vec::new();
        for volume in words(&svc["volumes"]).unwrap_or_default() {
            let volume = interp(&volume)?;
            let mut fields = volume.split(':');
            let (Some(source), Some(target)) = (fields.next(), fields.next()) else {
                bail!("{name}: volume {volume:?} is not SOURCE:TARGET");
            };
            let local = if source.starts_with('.') || source.starts_with('/') {
                binds.push(target.to_owned());
                paths::deploy_dir().join(source)
            } else {
                root.join("volumes").join(source)
            };
            mounts.push((target.to_owned(), local));
        }
        let fs = Fs::new(root.join("containers").join(name), mounts)?;
        fs.install(&image, |dest| {
            binds.iter().any(|b| below(dest, b).is_some())
        })?;
        let test = words(&svc["healthcheck"]["test"]).unwrap_or_default();
        let probe = match test.split_first() {
            Some((kind, argv)) if kind == "CMD" => Probe::Exec(
                argv.iter()
                    .map(|a| interp(a))
                    .collect::<anyhow::Result<_>>()?,
            ),
            None => Probe::Exec(image.healthcheck.clone()),
            Some(_) => bail!("{name}: only exec-form (CMD) health checks run without a shell"),
        };
        let depends_on = match &svc["depends_on"] {
            Value::Mapping(m) => m
                .keys()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            other => strings(other),
        };
        specs.push((
            Spec {
                name: name.clone(),
                argv,
                env,
                probe,
                fs,
                workdir: image.workdir.clone().unwrap_or_else(|| "/".to_owned()),
            },
            depends_on,
        ));
    }
    Ok(specs)
}

/// What a running deployment must do: the gateway is ready, refuses callers without a key and
/// lists the seeded agents to the operator, `runs` runs complete through the executors, every
/// metrics endpoint answers without a key, and a created agent is written to the registry's
/// config dir. `http` sends no key (as probes and scrapers); the API calls send the operator's.
/// Returns the session ids of the runs.
async fn check_stack(
    http: &reqwest::Client,
    gateway: &str,
    metrics: &[String],
    config_dir: &Path,
    runs: usize,
) -> Vec<String> {
    let ready = http
        .get(format!("{gateway}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(
        ready.status(),
        200,
        "the gateway is ready, to a probe without a key"
    );

    // Authentication is on as deployed: no key, or one the deployment does not know, is 401.
    let agents = format!("{gateway}/api/v1/agents");
    for (caller, request) in [
        ("no key", http.get(&agents)),
        (
            "an unknown key",
            http.get(&agents)
                .bearer_auth("not-a-key-of-this-deployment"),
        ),
    ] {
        let r = send(request).await;
        assert_eq!(r.status, 401, "{caller}: {}", r.text);
        assert_eq!(r.body["error"], "unauthenticated", "{caller}: {}", r.text);
        assert!(
            r.headers
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("Bearer ")),
            "{caller}: {:?}",
            r.headers
        );
    }

    let operator = http_client(Some(OPERATOR_KEY));
    let r = send(operator.get(&agents)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ids = crate::helpers::listed_ids(&r.body);
    assert!(
        ids.contains(&"invoice-extractor"),
        "the agents of configs/ seeded the registry: {ids:?}"
    );

    let r = send(operator.post(&agents).json(&agent_json("deploy-check"))).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(
        config_dir.join("custom/deploy-check.yaml").is_file(),
        "an agent created over REST is written to the registry's config volume"
    );

    let mut sessions = Vec::new();
    for _ in 0..runs {
        let r = send(
            operator
                .post(format!("{gateway}/api/v1/execute"))
                .json(&json!({"mission": "Say hello", "agent_id": "invoice-extractor"})),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["status"], "completed", "{}", r.text);
        sessions.push(
            r.body["session_id"]
                .as_str()
                .expect("a session id")
                .to_owned(),
        );
    }

    for url in metrics {
        let r = http.get(url).send().await.expect("metrics");
        assert_eq!(r.status(), 200, "{url}");
        let text = r.text().await.expect("text");
        assert!(text.contains("taskforce_"), "{url}: {text}");
    }
    sessions
}

/// An HTTP client that sends `Authorization: Bearer KEY` with every request, when given one.
fn http_client(key: Option<&str>) -> reqwest::Client {
    let mut headers = HeaderMap::new();
    if let Some(key) = key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).expect("a header value");
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

#[tokio::test]
async fn the_compose_stack_runs_as_the_compose_file_says() {
    let dir = tempfile::Builder::new()
        .prefix("taskforce-compose-")
        .tempdir()
        .expect("temp dir");
    let specs = compose_specs(dir.path()).expect("the compose services");
    let mut names: Vec<&str> = specs.iter().map(|(s, _)| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, SERVICES);
    let mut net = Net::default();
    for (spec, _) in &specs {
        spec.listen(&mut net);
    }
    // Start in dependency order, each once its dependencies are healthy (service_healthy).
    let http = http_client(None);
    let mut running = Running::default();
    let mut started: Vec<String> = Vec::new();
    while started.len() < specs.len() {
        let (spec, _) = specs
            .iter()
            .find(|(s, deps)| {
                !started.contains(&s.name) && deps.iter().all(|d| started.contains(d))
            })
            .expect("depends_on has no cycle and names known services");
        let mut child = spec
            .start(&mut net, &dir.path().join("logs"))
            .expect("the service starts");
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let healthy = spec.wait_healthy(&mut child, &net, &http, deadline).await;
        running.0.push(child);
        healthy.expect("the service's health check passes");
        started.push(spec.name.clone());
    }

    let port = |svc: &str, port: u16| net.route(svc, port).expect("a mapped port");
    let metrics = [
        format!("http://127.0.0.1:{}/metrics", port("registry", 9465)),
        format!("http://127.0.0.1:{}/metrics", port("executor", 9464)),
        format!("http://127.0.0.1:{}/metrics", port("gateway", 8080)),
    ];
    let sessions = check_stack(
        &http,
        &format!("http://127.0.0.1:{}", port("gateway", 8080)),
        &metrics,
        &dir.path().join("volumes/registry-config"),
        1,
    )
    .await;
    assert!(
        dir.path()
            .join("volumes/executor-data")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "the executor keeps its sessions in its volume ({sessions:?})"
    );
}

// ---- one machine: the dev overlay ---------------------------------------------------------------

/// A rendered ConfigMap's data.
fn config_map<'d>(docs: &'d [Value], name: &str) -> &'d serde_yaml::Mapping {
    named(docs, "ConfigMap", name)["data"]
        .as_mapping()
        .unwrap_or_else(|| panic!("ConfigMap {name} has data"))
}

/// A pod of a workload: its name, labels and spec.
struct Pod<'d> {
    name: String,
    labels: &'d Value,
    spec: &'d Value,
    claims: Vec<String>,
}

/// The pods the workloads make (a StatefulSet's are `<name>-<ordinal>`; a Deployment's get the
/// same form here instead of a random suffix).
fn pods(docs: &[Value]) -> Vec<Pod<'_>> {
    let mut out = Vec::new();
    for workload in docs
        .iter()
        .filter(|d| d["kind"] == "StatefulSet" || d["kind"] == "Deployment")
    {
        let name = str_of(&workload["metadata"], "name");
        let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
        let claims: Vec<String> = workload["spec"]["volumeClaimTemplates"]
            .as_sequence()
            .map(|t| {
                t.iter()
                    .map(|c| str_of(&c["metadata"], "name").to_owned())
                    .collect()
            })
            .unwrap_or_default();
        for i in 0..replicas {
            out.push(Pod {
                name: format!("{name}-{i}"),
                labels: &workload["spec"]["template"]["metadata"]["labels"],
                spec: &workload["spec"]["template"]["spec"],
                claims: claims.clone(),
            });
        }
    }
    out
}

/// The pod's volumes as local directories: ConfigMaps written out (with their `items`), PVCs
/// per pod, emptyDirs.
fn pod_volumes(
    docs: &[Value],
    pod: &Pod<'_>,
    root: &Path,
) -> anyhow::Result<HashMap<String, PathBuf>> {
    let mut out = HashMap::new();
    for claim in &pod.claims {
        out.insert(
            claim.clone(),
            root.join("pvc").join(format!("{claim}-{}", pod.name)),
        );
    }
    for volume in pod.spec["volumes"].as_sequence().into_iter().flatten() {
        let name = str_of(volume, "name").to_owned();
        let local = root
            .join("pods")
            .join(&pod.name)
            .join("volumes")
            .join(&name);
        fs::create_dir_all(&local)?;
        if !volume["configMap"].is_null() {
            let data = config_map(docs, str_of(&volume["configMap"], "name"));
            let items: Vec<(String, String)> = match volume["configMap"]["items"].as_sequence() {
                Some(items) => items
                    .iter()
                    .map(|i| (str_of(i, "key").to_owned(), str_of(i, "path").to_owned()))
                    .collect(),
                None => data
                    .keys()
                    .filter_map(Value::as_str)
                    .map(|k| (k.to_owned(), k.to_owned()))
                    .collect(),
            };
            for (key, path) in items {
                let text = data
                    .get(key.as_str())
                    .and_then(Value::as_str)
                    .with_context(|| format!("key {key} of volume {name}"))?;
                let file = local.join(path);
                fs::create_dir_all(file.parent().context("a parent")?)?;
                fs::write(file, text)?;
            }
        } else if volume["emptyDir"].is_null() {
            bail!(
                "volume {name} of {}: only ConfigMaps, emptyDirs and PVCs here",
                pod.name
            );
        }
        out.insert(name, local);
    }
    Ok(out)
}

/// A container's file system: its volume mounts over a root of its own.
fn container_fs(
    c: &Value,
    pod: &Pod<'_>,
    volumes: &HashMap<String, PathBuf>,
    root: &Path,
) -> anyhow::Result<Fs> {
    let mut mounts = Vec::new();
    for m in c["volumeMounts"].as_sequence().into_iter().flatten() {
        if !m["subPath"].is_null() {
            bail!("subPath mounts are not emulated");
        }
        let volume = volumes
            .get(str_of(m, "name"))
            .with_context(|| format!("volume {} of {}", str_of(m, "name"), pod.name))?;
        mounts.push((str_of(m, "mountPath").to_owned(), volume.clone()));
    }
    Fs::new(
        root.join("pods").join(&pod.name).join(str_of(c, "name")),
        mounts,
    )
}

/// Secrets the user created in the namespace before applying the manifests: name → key →
/// value.
type Secrets = HashMap<&'static str, HashMap<&'static str, String>>;

/// The Secret `taskforce-auth` as docs/deploy.md has the user create it: a keys file with the
/// services' key and the operator's, and the services' key again, for them to send.
fn user_secrets() -> Secrets {
    let keys = format!(
        "keys:\n  - name: services\n    token: \"{SERVICE_TOKEN}\"\n    scopes: [admin]\n  \
         - name: operator\n    token: \"{OPERATOR_KEY}\"\n    scopes: [admin]\n"
    );
    HashMap::from([(
        AUTH_SECRET,
        HashMap::from([
            ("api-keys.yaml", keys),
            ("service-token", SERVICE_TOKEN.to_owned()),
        ]),
    )])
}

/// A container's environment: the image's, then `envFrom` ConfigMaps, then `env` (values,
/// `fieldRef: metadata.name`, keys of `secrets`, optional Secrets that do not exist here).
fn container_env(
    docs: &[Value],
    c: &Value,
    pod: &Pod<'_>,
    image: &Image,
    secrets: &Secrets,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut env = image.env.clone();
    for from in c["envFrom"].as_sequence().into_iter().flatten() {
        if !from["secretRef"].is_null() {
            let name = str_of(&from["secretRef"], "name");
            match secrets.get(name) {
                Some(data) => env.extend(data.iter().map(|(k, v)| ((*k).to_owned(), v.clone()))),
                None if from["secretRef"]["optional"] == true => {}
                None => bail!(
                    "{}: envFrom needs the Secret {name}, which the user was not told to create",
                    pod.name
                ),
            }
            continue;
        }
        let data = config_map(docs, str_of(&from["configMapRef"], "name"));
        for (k, v) in data {
            env.push((
                k.as_str().context("a key")?.to_owned(),
                v.as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    for e in c["env"].as_sequence().into_iter().flatten() {
        let name = str_of(e, "name").to_owned();
        if let Some(value) = e["value"].as_str() {
            env.push((name, value.to_owned()));
        } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
            env.push((name, pod.name.clone()));
        } else if !e["valueFrom"]["secretKeyRef"].is_null() {
            let r = &e["valueFrom"]["secretKeyRef"];
            let (secret, key) = (str_of(r, "name"), str_of(r, "key"));
            match secrets.get(secret).and_then(|s| s.get(key)) {
                Some(value) => env.push((name, value.clone())),
                // The variable stays unset, as in a cluster without the Secret.
                None if r["optional"] == true => {}
                // A cluster would not start the pod.
                None => bail!(
                    "{}: env {name} needs key {key} of the Secret {secret}, which the user \
                     was not told to create",
                    pod.name
                ),
            }
        } else {
            bail!("{}: env {name} is not emulated: {e:?}", pod.name);
        }
    }
    Ok(env)
}

/// Port `port` (a number or a container port's name) of a container.
fn container_port(c: &Value, port: &Value) -> anyhow::Result<u16> {
    if let Some(n) = port.as_u64() {
        return Ok(u16::try_from(n)?);
    }
    let name = port.as_str().context("a port")?;
    c["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .with_context(|| format!("container port {name}"))
}

/// Runs an initContainer's `sh -c SCRIPT` with this machine's `sh`, its mount paths replaced by
/// the local directories, and waits for it to succeed.
fn run_init(c: &Value, fs: &Fs) -> anyhow::Result<()> {
    let command = strings(&c["command"]);
    let [sh, dash_c, script] = command.as_slice() else {
        bail!(
            "initContainer {}: only `sh -c SCRIPT` is emulated",
            str_of(c, "name")
        );
    };
    if sh != "sh" || dash_c != "-c" {
        bail!(
            "initContainer {}: only `sh -c SCRIPT` is emulated",
            str_of(c, "name")
        );
    }
    let mut script = script.clone();
    for (at, local) in &fs.mounts {
        script = script.replace(at.as_str(), &local.display().to_string());
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()?;
    if !out.status.success() {
        bail!(
            "initContainer {} failed ({}): {}{}",
            str_of(c, "name"),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// An overlay's pods as containers of this machine (initContainers already run), with the
/// user's `secrets`, and the Service routes added to `net`.
fn k8s_specs(
    docs: &[Value],
    secrets: &Secrets,
    root: &Path,
    net: &mut Net,
) -> anyhow::Result<Vec<Spec>> {
    let images = ComposeFile::read().images();
    let pods = pods(docs);
    let mut specs = Vec::new();
    for pod in &pods {
        let volumes = pod_volumes(docs, pod, root)?;
        for init in pod.spec["initContainers"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            run_init(init, &container_fs(init, pod, &volumes, root)?)?;
        }
        for c in pod.spec["containers"].as_sequence().into_iter().flatten() {
            let reference = str_of(c, "image");
            let image = images.get(repository(reference)).with_context(|| {
                format!("{}: image {reference} is not one compose builds", pod.name)
            })?;
            let fs = container_fs(c, pod, &volumes, root)?;
            // A Kubernetes volume hides the image's files below its mount path.
            fs.install(image, |dest| fs.mounted(dest))?;
            // `command` replaces ENTRYPOINT (and then CMD too); `args` replaces CMD.
            let mut argv = words(&c["command"]).unwrap_or_else(|| image.entrypoint.clone());
            argv.extend(words(&c["args"]).unwrap_or_else(|| {
                if c["command"].is_null() {
                    image.cmd.clone()
                } else {
                    Vec::new()
                }
            }));
            let probe = &c["readinessProbe"];
            let probe = if !probe["grpc"].is_null() {
                Probe::Grpc {
                    port: container_port(c, &probe["grpc"]["port"])?,
                    service: str_of(&probe["grpc"], "service").to_owned(),
                }
            } else if !probe["httpGet"].is_null() {
                Probe::Http {
                    port: container_port(c, &probe["httpGet"]["port"])?,
                    path: str_of(&probe["httpGet"], "path").to_owned(),
                }
            } else {
                Probe::Exec(strings(&probe["exec"]["command"]))
            };
            specs.push(Spec {
                name: pod.name.clone(),
                argv,
                env: container_env(docs, c, pod, image, secrets)?,
                probe,
                fs,
                workdir: c["workingDir"]
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| image.workdir.clone())
                    .unwrap_or_else(|| "/".to_owned()),
            });
        }
    }
    for spec in &specs {
        spec.listen(net);
    }
    // Services: a Service's port reaches its target port on the (first) pod it selects; a
    // headless Service also names each pod, `<pod>.<service>`.
    for svc in of_kind(docs, "Service") {
        let name = str_of(&svc["metadata"], "name");
        let selector = svc["spec"]["selector"].as_mapping().context("a selector")?;
        let selected: Vec<&Pod<'_>> = pods
            .iter()
            .filter(|p| selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
            .collect();
        for port in svc["spec"]["ports"].as_sequence().into_iter().flatten() {
            let svc_port = u16::try_from(port["port"].as_u64().context("a port")?)?;
            for (i, pod) in selected.iter().enumerate() {
                let c = &pod.spec["containers"][0];
                let target = container_port(c, &port["targetPort"])?;
                if i == 0 {
                    net.alias(name, svc_port, (&pod.name, target));
                }
                if svc["spec"]["clusterIP"] == "None" {
                    net.alias(
                        &format!("{}.{name}", pod.name),
                        svc_port,
                        (&pod.name, target),
                    );
                }
            }
        }
    }
    Ok(specs)
}

/// Starts the pods of `overlay` as its manifests say and checks they find each other: `runs`
/// runs go one to each executor replica.
async fn overlay_runs(overlay: &str, executors: usize, gateways: usize) {
    let (_, docs) = kustomize(overlay);
    let dir = tempfile::Builder::new()
        .prefix("taskforce-k8s-")
        .tempdir()
        .expect("temp dir");
    let mut net = Net::default();
    let specs =
        k8s_specs(&docs, &user_secrets(), dir.path(), &mut net).expect("the overlay's pods");
    let mut names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    names.sort_unstable();
    let executor_names: Vec<String> = (0..executors).map(|i| format!("executor-{i}")).collect();
    let mut expected: Vec<String> = executor_names.clone();
    expected.extend((0..gateways).map(|i| format!("gateway-{i}")));
    expected.push("registry-0".to_owned());
    expected.sort_unstable();
    assert_eq!(names, expected, "{overlay}");

    // Kubernetes starts every pod at once; each must become ready.
    let http = http_client(None);
    let mut running = Running::default();
    for spec in &specs {
        running.0.push(
            spec.start(&mut net, &dir.path().join("logs"))
                .expect("the pod starts"),
        );
    }
    // Waited for together: the first pod that dies or stays unready is named at once, not a
    // pod waiting for it.
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let waits = specs
        .iter()
        .zip(running.0.iter_mut())
        .map(|(spec, child)| spec.wait_healthy(child, &net, &http, deadline));
    futures::future::try_join_all(waits)
        .await
        .expect("every pod becomes ready");

    let port = |host: &str, port: u16| net.route(host, port).expect("a mapped port");
    let mut metrics = vec![
        format!("http://127.0.0.1:{}/metrics", port("registry", 9465)),
        format!("http://127.0.0.1:{}/metrics", port("gateway", 8080)),
    ];
    for name in &executor_names {
        metrics.push(format!(
            "http://127.0.0.1:{}/metrics",
            port(&format!("{name}.executor"), 9464)
        ));
    }
    let sessions = check_stack(
        &http,
        &format!("http://127.0.0.1:{}", port("gateway", 8080)),
        &metrics,
        &dir.path().join("pvc/state-registry-0/config"),
        executors,
    )
    .await;
    // New runs take turns over the executors the gateway lists by pod name, and each session
    // id names the executor that owns it.
    let mut owners: Vec<String> = sessions
        .iter()
        .filter_map(|s| s.split_once('_').map(|(owner, _)| owner.to_owned()))
        .collect();
    owners.sort_unstable();
    assert_eq!(owners, executor_names, "{sessions:?}");
    assert!(
        dir.path()
            .join("pvc/state-registry-0/config/.seeded")
            .is_file(),
        "the initContainer seeded the registry's volume"
    );
}

#[tokio::test]
async fn the_dev_overlay_runs_as_its_manifests_say() {
    overlay_runs("dev", 2, 1).await;
}

#[tokio::test]
async fn the_prod_overlay_runs_as_its_manifests_say() {
    overlay_runs("prod", 4, 2).await;
}
