//! The process environment: what configuration reads from it (`${VAR}` placeholders) and what a
//! child process gets of it ([`minimal_command`]).
//!
//! One rule for every file that holds placeholders (`llm_config.yaml`, MCP server entries of
//! agents and of the services' own files): `${VAR}` needs `VAR` set and not empty, and is an
//! error naming `VAR` otherwise; `${VAR:-default}` is `default` when `VAR` is unset or empty (as
//! in the shell), so an optional value says so where it is written. Errors name variables,
//! never values.

use std::{collections::BTreeSet, ffi::OsStr, sync::OnceLock};

/// What a tool's or a task's process gets of this process's environment: the executor's native
/// tools and the registry's metadata tasks.
pub const TOOL_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// What a stdio MCP server gets of this process's environment; mirrors the MCP SDKs' default.
pub const MCP_SERVER_ENV: [&str; 8] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR",
];

/// `program` with a cleared environment plus those of `inherited` that this process has set: the
/// one way every service starts a child, so its secrets (API keys, service tokens) never reach
/// one. Callers add what the child needs on top; a Tokio caller converts with
/// `tokio::process::Command::from`.
pub fn minimal_command(program: impl AsRef<OsStr>, inherited: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.env_clear().envs(
        inherited
            .iter()
            .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
    );
    cmd
}

/// The prefix of the services' own settings and secrets (`TASKFORCE_SERVICE_TOKEN`,
/// `TASKFORCE_API_KEYS`, ...): an MCP server's `${VAR}` never reads one.
pub const RESERVED_PREFIX: &str = "TASKFORCE_";

/// Variables that hold the services' own secrets whatever `llm_config.yaml` names: the model
/// providers' conventional keys and the `github` tool's token. An MCP server that needs a token
/// of its own gets it under another name (e.g. `GITHUB_PERSONAL_ACCESS_TOKEN: ${MCP_GITHUB_TOKEN}`).
pub const RESERVED_NAMES: [&str; 5] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GITHUB_TOKEN",
    "GH_TOKEN",
];

/// The variables [`reserve_secrets_of_llm_config`] reserved.
static RESERVED: OnceLock<BTreeSet<String>> = OnceLock::new();

/// Reserves the variables an `llm_config.yaml` reads the model providers' keys from (every
/// `api_key_env:` value, and the variables of its `${VAR}` placeholders), so that no MCP
/// server's `${VAR}` reads them. Call once at start-up with the file's text; later calls change
/// nothing.
///
/// A text that is not YAML (a key given twice) still reserves its `${VAR}`s and what is written
/// after each `api_key_env` in it, and the parse error is returned: a broken file must not turn
/// the reservation off.
pub fn reserve_secrets_of_llm_config(text: &str) -> Result<(), serde_yaml::Error> {
    let mut names: BTreeSet<String> = placeholders(text).map(str::to_owned).collect();
    let parsed = serde_yaml::from_str::<serde_yaml::Value>(text);
    match &parsed {
        Ok(config) => key_variables(config, &mut names),
        Err(_) => written_key_variables(text, &mut names),
    }
    let _ = RESERVED.set(names);
    parsed.map(drop)
}

/// What is written after each `api_key_env` key of `text` (block or flow style, quoted or
/// not), read from the text alone. Reserving a name too many (from a comment) is harmless.
fn written_key_variables(text: &str, names: &mut BTreeSet<String>) {
    const KEY: &str = "api_key_env";
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        rest = &rest[at + KEY.len()..];
        let Some(value) = rest
            .trim_start_matches(['"', '\''])
            .trim_start()
            .strip_prefix(':')
        else {
            continue;
        };
        let value = value.trim_start_matches([' ', '\t']);
        let end = value
            .find([',', '}', '#', '\n', '\r'])
            .unwrap_or(value.len());
        let name = value[..end].trim().trim_matches(['"', '\'']).trim();
        if !name.is_empty() {
            names.insert(name.to_owned());
        }
    }
}

/// The values of every `api_key_env` key in `value`, at any depth.
fn key_variables(value: &serde_yaml::Value, names: &mut BTreeSet<String>) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (key, value) in map {
                if key.as_str() == Some("api_key_env")
                    && let Some(name) = value.as_str().map(str::trim).filter(|n| !n.is_empty())
                {
                    names.insert(name.to_owned());
                }
                key_variables(value, names);
            }
        }
        serde_yaml::Value::Sequence(items) => {
            for item in items {
                key_variables(item, names);
            }
        }
        serde_yaml::Value::Tagged(tagged) => key_variables(&tagged.value, names),
        _ => {}
    }
}

/// Whether an MCP server's `${name}` is refused: a variable of the service's own (its prefix is
/// [`RESERVED_PREFIX`], it is one of [`RESERVED_NAMES`], or
/// [`reserve_secrets_of_llm_config`] reserved it).
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
        || RESERVED_NAMES.contains(&name)
        || RESERVED.get().is_some_and(|r| r.contains(name))
}

/// Whether `name` is one of the settings every process has and no one keeps secret (`HOME`,
/// `PATH`, `HOSTNAME`, locale, `XDG_*`, `OTEL_SERVICE_NAME`, ...): an MCP server may read it,
/// and its value is not masked in the logs (masking `executor-0` or `/home/app` would blank
/// them in every later line, about every agent). Other `OTEL_*` variables are not among them:
/// `OTEL_EXPORTER_OTLP_HEADERS` often holds a vendor's API key.
pub fn is_plain_setting(name: &str) -> bool {
    const NAMES: [&str; 14] = [
        "HOME",
        "PATH",
        "HOSTNAME",
        "USER",
        "LOGNAME",
        "PWD",
        "OLDPWD",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TMPDIR",
        "TZ",
        "OTEL_SERVICE_NAME",
    ];
    NAMES.contains(&name) || ["LC_", "XDG_"].iter().any(|p| name.starts_with(p))
}

/// The variable names of the placeholders in `text` (`${VAR}` and `${VAR:-default}`).
pub fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    text.split("${").skip(1).filter_map(|rest| {
        let body = &rest[..rest.find('}')?];
        Some(body.split_once(":-").map_or(body, |(name, _)| name))
    })
}

/// The values `lookup` gives the placeholders of `template` (those set, 8 characters or more):
/// what a configuration takes from the environment, to be kept out of whatever the services
/// show, also when a server echoes it back in part (`Bearer ${TOKEN}` echoed as the token).
pub fn placeholder_values(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
    placeholders(template)
        .filter_map(|name| lookup(name).filter(|v| v.len() >= 8))
        .collect()
}

/// Values this process never writes to its log: the model providers' keys, the service token,
/// and the values `${VAR}` placeholders of MCP servers and providers take ([`never_log`]).
static NEVER_LOGGED: std::sync::RwLock<BTreeSet<String>> = std::sync::RwLock::new(BTreeSet::new());

/// Masks `values` (8 characters or more; shorter ones are too common to mask) in every log
/// line written from now on, as written and as JSON escapes them: a library's own log line
/// (an MCP server's output rmcp logs, an HTTP error body) shows `***` instead.
pub fn never_log<S: AsRef<str>>(values: impl IntoIterator<Item = S>) {
    let mut fresh = Vec::new();
    for value in values {
        let value = value.as_ref();
        if value.len() < 8 {
            continue;
        }
        fresh.push(value.to_owned());
        // A JSON log line writes `"` and `\` escaped (a token holds no control characters).
        if value.contains(['"', '\\']) {
            fresh.push(value.replace('\\', "\\\\").replace('"', "\\\""));
        }
    }
    // Most calls (each run's MCP connections) bring nothing new: no write lock for them, which
    // every log line's read would wait on.
    let known = |set: &BTreeSet<String>| fresh.iter().all(|v| set.contains(v));
    if fresh.is_empty()
        || known(
            &NEVER_LOGGED
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    {
        return;
    }
    let mut set = NEVER_LOGGED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    set.extend(fresh);
}

/// `line` with the [`never_log`] values masked; `None` when it holds none.
pub fn mask_logged(line: &str) -> Option<String> {
    let set = NEVER_LOGGED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Longest first, so a value holding another is masked whole.
    let mut found: Vec<&String> = set.iter().filter(|v| line.contains(v.as_str())).collect();
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|v| std::cmp::Reverse(v.len()));
    Some(scrub(line, &found))
}

/// `text` with what the URLs in it may carry as credentials left out: a user and password
/// (`https://user:key@host/`) and a query (`?token=...`), each replaced by `…`. For error
/// texts that quote a URL (a configuration's, or the one a request failed on).
pub fn without_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, from) = rest.split_at(at + 3);
        out.push_str(before);
        // The URL ends at what cannot be in one unquoted.
        let end = from
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | '`'))
            .unwrap_or(from.len());
        let (url, after) = from.split_at(end);
        let (url, query) = match url.find(['?', '#']) {
            Some(q) => (&url[..q], true),
            None => (url, false),
        };
        let authority_end = url.find('/').unwrap_or(url.len());
        match url[..authority_end].rfind('@') {
            Some(at) => {
                out.push('…');
                out.push_str(&url[at..]);
            }
            None => out.push_str(url),
        }
        if query {
            out.push_str("?…");
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `text` with each of `secrets` (as [`placeholder_values`] gives them) replaced by `***`.
pub fn scrub(text: &str, secrets: &[impl AsRef<str>]) -> String {
    secrets.iter().fold(text.to_owned(), |out, secret| {
        let secret = secret.as_ref();
        if !secret.is_empty() && out.contains(secret) {
            out.replace(secret, "***")
        } else {
            out
        }
    })
}

/// Why a placeholder could not be expanded. Carries variable names only, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${VAR}` with `VAR` unset or empty.
    #[error("environment variable {0} is not set (write ${{{0}:-}} where an empty value will do)")]
    Unset(String),
    /// A `${` without its `}`.
    #[error("unclosed `${{` (a placeholder is `${{VAR}}` or `${{VAR:-default}}`)")]
    Unclosed,
    /// `${VAR}` of an MCP server naming one of the service's own secrets.
    #[error(
        "${{{0}}} names one of the services' own secrets (`TASKFORCE_*`, the model providers' keys, `GITHUB_TOKEN`/`GH_TOKEN`); an MCP server cannot read it"
    )]
    Reserved(String),
}

/// Expands `${VAR}` and `${VAR:-default}` in `template`, reading variables through `lookup`
/// (an empty value counts as unset).
pub fn expand(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(ExpandError::Unclosed)?;
        let (name, default) = match after[..end].split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (&after[..end], None),
        };
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => return Err(ExpandError::Unset(name.to_owned())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// [`expand`] of an MCP server's configuration value from this process's environment: a
/// placeholder naming one of the service's own secrets ([`is_reserved`]) is an error, never its
/// value.
pub fn expand_for_mcp_server(template: &str) -> Result<String, ExpandError> {
    no_reserved_placeholder(template)?;
    expand(template, |name| std::env::var(name).ok())
}

/// An error naming the first placeholder of `template` that names one of the service's own
/// secrets ([`is_reserved`]), if one does: what an MCP server's configuration may not hold.
pub fn no_reserved_placeholder(template: &str) -> Result<(), ExpandError> {
    match placeholders(template).find(|name| is_reserved(name)) {
        Some(name) => Err(ExpandError::Reserved(name.to_owned())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "SET" => Some("value".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn credentials_in_urls_are_left_out_of_texts() {
        assert_eq!(
            without_url_credentials(
                "base_url gives \"https://user:sk-SECRET@exa mple.com/v1\": invalid domain"
            ),
            "base_url gives \"https://…@exa mple.com/v1\": invalid domain"
        );
        assert_eq!(
            without_url_credentials(
                "error sending request for url (http://127.0.0.1:9/mcp?token=SECRET&a=b): refused"
            ),
            "error sending request for url (http://127.0.0.1:9/mcp?…): refused"
        );
        let plain = "connecting to http://registry:50051 failed; see https://example.com/a/b";
        assert_eq!(without_url_credentials(plain), plain);
        assert_eq!(without_url_credentials("no url here"), "no url here");
    }

    #[test]
    fn key_variables_are_read_from_a_file_that_is_not_yaml() {
        // A key given twice: not a YAML mapping serde takes, but the executor's own reading
        // may differ, and the names must be reserved either way.
        let text = "models:\n  main: {provider: corp, model: m}\n  main: {provider: corp, model: m}\n\
                    providers:\n  corp: {type: openai, api_key_env: CORP_KEY, base_url: x}\n  \
                    other:\n    type: anthropic\n    api_key_env: \"OTHER_KEY\"  # comment\n  \
                    third: {\"api_key_env\": 'THIRD_KEY'}\n";
        assert!(serde_yaml::from_str::<serde_yaml::Value>(text).is_err());
        let mut names = BTreeSet::new();
        written_key_variables(text, &mut names);
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["CORP_KEY", "OTHER_KEY", "THIRD_KEY"]
        );
    }

    #[test]
    fn an_mcp_server_cannot_read_the_services_own_secrets() {
        reserve_secrets_of_llm_config(
            "providers:\n  a: {api_key: \"${TF_TEST_PROVIDER_KEY}\", base_url: \"${TF_TEST_BASE:-x}\"}\n  \
             b: {type: openai, api_key_env: TF_TEST_NAMED_KEY}\n",
        )
        .expect("YAML");
        assert!(reserve_secrets_of_llm_config("providers: [unclosed").is_err());
        let names: Vec<&str> = placeholders("a ${ONE} b ${TWO:-d} ${unclosed").collect();
        assert_eq!(names, ["ONE", "TWO"]);
        for reserved in [
            "${TASKFORCE_SERVICE_TOKEN}",
            "Bearer ${TASKFORCE_API_KEYS:-}",
            "${TF_TEST_PROVIDER_KEY}",
            "x ${TF_TEST_BASE:-y}",
            "${TF_TEST_NAMED_KEY}",
            "${OPENAI_API_KEY:-}",
            "${GITHUB_TOKEN}",
        ] {
            let Err(ExpandError::Reserved(name)) = expand_for_mcp_server(reserved) else {
                panic!("{reserved} is reserved");
            };
            assert!(reserved.contains(&name), "{name}");
        }
        assert_eq!(
            expand_for_mcp_server("${TF_TEST_FREE:-ok}"),
            Ok("ok".into())
        );
    }

    #[test]
    fn set_variables_expand_and_text_around_them_stays() {
        assert_eq!(
            expand("a ${SET} b ${SET}", vars),
            Ok("a value b value".into())
        );
        assert_eq!(
            expand("no placeholder $SET", vars),
            Ok("no placeholder $SET".into())
        );
    }

    #[test]
    fn an_unset_or_empty_variable_is_an_error_naming_it() {
        assert_eq!(
            expand("x ${UNSET} y", vars),
            Err(ExpandError::Unset("UNSET".into()))
        );
        assert_eq!(
            expand("${EMPTY}", vars),
            Err(ExpandError::Unset("EMPTY".into()))
        );
        let message = ExpandError::Unset("TZ".into()).to_string();
        assert!(
            message.contains("TZ is not set") && message.contains("${TZ:-}"),
            "{message}"
        );
    }

    #[test]
    fn a_default_covers_an_unset_or_empty_variable_only() {
        assert_eq!(expand("${UNSET:-}", vars), Ok(String::new()));
        assert_eq!(expand("${UNSET:-UTC}", vars), Ok("UTC".into()));
        assert_eq!(expand("${EMPTY:-d}", vars), Ok("d".into()));
        assert_eq!(expand("${SET:-d}", vars), Ok("value".into()));
    }

    #[test]
    fn a_minimal_command_passes_only_the_named_variables() {
        // `cargo test` sets CARGO_* in this process; PATH is set everywhere.
        let out = minimal_command("env", &["PATH", "TASKFORCE_SURELY_UNSET_VAR"])
            .output()
            .expect("env runs");
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
            .collect();
        assert_eq!(names, ["PATH"]);
    }

    #[test]
    fn an_unclosed_placeholder_is_an_error_that_shows_no_text() {
        let e = expand("Bearer sk-literal ${TOKEN", vars);
        assert_eq!(e, Err(ExpandError::Unclosed));
        assert!(!ExpandError::Unclosed.to_string().contains("sk-literal"));
    }
}
