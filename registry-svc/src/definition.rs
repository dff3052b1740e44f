//! Agent definitions as they live in YAML, and the rules they must follow.
//!
//! Custom agents follow seed 000 §1 (`configs/custom/{agent_id}.yaml`); profile agents are the
//! free-form `configs/{profile}.yaml` files of which only the listed fields are read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use taskforce_proto::{
    catalog,
    error::{ApiError, ErrorKind},
    ids,
};

/// Longest allowed `name`.
pub const MAX_NAME: usize = 100;
/// Longest allowed `description`.
pub const MAX_DESCRIPTION: usize = 500;
/// Longest allowed `system_prompt` (a sanity cap, 256 KiB).
pub const MAX_PROMPT: usize = 256 * 1024;
/// Longest allowed `role` and `project`.
pub const MAX_LABEL: usize = 100;
/// Longest allowed `workspace` path.
pub const MAX_PATH: usize = 4096;
/// Longest allowed `subagents` entry: each sub-agent is offered to the model as a tool
/// `agent_<id>`, and OpenAI refuses tool names longer than 64 characters.
pub const MAX_SUBAGENT_ID: usize = 64 - "agent_".len();
/// Longest allowed `model` alias.
pub use ids::MAX_MODEL;
/// Most ids listed in `available_agents` of the `invalid_subagents` error: the error travels in
/// gRPC trailers, which clients cap (16 KiB by default), and a registry may hold thousands of
/// agents.
pub const MAX_AVAILABLE_AGENTS: usize = 100;

/// The most MCP servers one agent may name: each is a process (or a connection) started at once
/// when its tools are discovered and when it runs.
pub const MAX_MCP_SERVERS: usize = 32;

/// The problem with an agent naming `n` MCP servers, if it names too many.
fn too_many_servers(n: usize) -> Option<String> {
    (n > MAX_MCP_SERVERS).then(|| format!("must name at most {MAX_MCP_SERVERS} servers, got {n}"))
}

/// One MCP server, in the `configs/dev.yaml` style.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// `stdio`, `http`, `sse`, or `global` (one of the executor's global servers, by `name`).
    #[serde(rename = "type")]
    pub kind: String,
    /// stdio: program to start.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: extra environment (values may be `${VAR}` placeholders).
    #[serde(
        default,
        deserialize_with = "taskforce_proto::mcp_config::unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
    /// http/sse: endpoint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// http/sse: extra headers (values may be `${VAR}` placeholders).
    #[serde(
        default,
        deserialize_with = "taskforce_proto::mcp_config::unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub headers: BTreeMap<String, String>,
    /// global: the name of one of the executor's global MCP servers (`m365`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl McpServerConfig {
    /// A reference to one of the executor's global servers (nothing the registry can reach).
    pub fn is_global(&self) -> bool {
        self.kind == "global"
    }
}

/// `prompt:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// The complete system prompt.
    pub system_prompt: String,
}

/// An `allowlist:` block (`tools:` and `mcp_tools:`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowlist {
    /// Tool names, case-sensitive.
    #[serde(default)]
    pub allowlist: Vec<String>,
}

/// A custom agent file, field for field as seed 000 §1 shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomAgentFile {
    /// Must equal the file name when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Display name, 1–100 characters.
    pub name: String,
    /// 1–500 characters.
    pub description: String,
    /// The system prompt.
    pub prompt: Prompt,
    /// Native and orchestration tools the agent may use.
    pub tools: Allowlist,
    /// MCP servers whose tools the agent may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerConfig>,
    /// Restricts the MCP tools further when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tools: Option<Allowlist>,
    /// Registry agents (custom or profile) this agent may delegate to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<String>,
    /// A model alias of the executor's `llm_config.yaml`; the registry cannot resolve it, so it
    /// only checks its shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The policy mode runs of this agent default to (a request's mode wins): `readOnly`,
    /// `default` or `safeWrite`, accepted in any case and with `-`/`_` ignored. Empty or
    /// absent: no default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The agent's role in a team, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The project the agent works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// A directory with a Taskfile (`Taskfile.yml`, ...) of metadata fields (absolute, or
    /// relative to the config directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// A UUID, managed by the service; derived from the id for files written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    /// RFC 3339, managed by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// RFC 3339, managed by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

impl CustomAgentFile {
    /// The MCP allowlist, empty when unset.
    pub fn mcp_allowlist(&self) -> &[String] {
        self.mcp_tools.as_ref().map_or(&[], |a| &a.allowlist)
    }

    /// Drops the repeats of a tool in `tool_allowlist` and `mcp_tool_allowlist` (the first
    /// stays); whether there were any.
    pub fn drop_repeated_tools(&mut self) -> bool {
        fn dedupe(list: &mut Vec<String>) -> bool {
            let before = list.len();
            let mut seen = std::collections::HashSet::with_capacity(before);
            list.retain(|t| seen.insert(t.clone()));
            list.len() != before
        }
        let tools = dedupe(&mut self.tools.allowlist);
        let mcp = self
            .mcp_tools
            .as_mut()
            .is_some_and(|a| dedupe(&mut a.allowlist));
        tools || mcp
    }

    /// The stored workspace id, else one derived from the agent id (stable for files written
    /// by hand, which have none).
    pub fn workspace_id_or_derived(&self, id: &str) -> String {
        self.workspace_id
            .clone()
            .unwrap_or_else(|| derived_workspace_id(id))
    }
}

/// The file body of agent `id`'s definition, refused when the registry would not read it back
/// (over [`crate::files::MAX_DEFINITION_BYTES`]): such an agent would be saved and then not
/// served.
pub fn file_text(id: &str, def: &CustomAgentFile) -> crate::error::Result<String> {
    let yaml = to_yaml(def)?;
    if yaml.len() as u64 > crate::files::MAX_DEFINITION_BYTES {
        return Err(ApiError::new(
            ErrorKind::PayloadTooLarge,
            format!(
                "agent {id:?}: its definition file would have {} bytes, more than the {} a \
                 definition may have; shorten its lists or texts",
                yaml.len(),
                crate::files::MAX_DEFINITION_BYTES
            ),
        )
        .into());
    }
    Ok(yaml)
}

/// The file body of a definition. Timestamps are quoted as in the seed's examples, so YAML 1.1
/// readers (PyYAML, for one) keep them strings instead of turning them into dates.
pub fn to_yaml(def: &CustomAgentFile) -> Result<String, serde_yaml::Error> {
    let yaml = serde_yaml::to_string(def)?;
    let mut out = String::with_capacity(yaml.len() + 8);
    // Only a plain value of timestamp characters is wrapped: quotes in it would need escapes, and
    // anything else (a hand-written `created_at` may hold any text) serde_yaml already wrote in
    // the form that reads back.
    let timestamp_like = |v: &str| {
        v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b':' | b'.' | b'+' | b' '))
    };
    for line in yaml.lines() {
        match line.split_once(": ") {
            Some((key @ ("created_at" | "updated_at"), value)) if timestamp_like(value) => {
                out.push_str(&format!("{key}: \"{value}\""));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    Ok(out)
}

/// A UUID (v5) derived from the agent id, for agents whose file names none.
pub fn derived_workspace_id(id: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        format!("taskforce:agent:{id}").as_bytes(),
    )
    .to_string()
}

/// A workspace path as the service uses it: relative paths are relative to `root`.
pub fn resolve_workspace(root: &std::path::Path, workspace: &str) -> std::path::PathBuf {
    let p = std::path::Path::new(workspace);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

/// A profile's `tools:` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileTool {
    /// Tool type: a catalog tool's name (`web_search`) or seed 000's class name of it
    /// (`WebSearchTool`); see `catalog::profile_tool`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Where the tool lives, informational.
    #[serde(default)]
    pub module: String,
    /// Tool parameters.
    #[serde(default)]
    pub params: serde_json::Value,
}

/// A profile's `llm:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileLlm {
    /// Path of the LLM configuration.
    #[serde(default)]
    pub config_path: String,
    /// Model alias used by default.
    #[serde(default)]
    pub default_model: String,
}

/// The fields of a profile file that the registry reads; everything else is ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProfileFile {
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Specialist preset.
    #[serde(default)]
    pub specialist: String,
    /// Native tools.
    #[serde(default)]
    pub tools: Vec<ProfileTool>,
    /// MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// LLM settings.
    #[serde(default)]
    pub llm: ProfileLlm,
    /// The other top-level keys (sections of a profile the registry does not read), by name.
    #[serde(flatten)]
    pub other: std::collections::BTreeMap<String, serde::de::IgnoredAny>,
}

impl ProfileFile {
    /// Why this is no profile, when it has none of a profile's keys but others (an LLM
    /// configuration or a compose file saved beside the profiles would be served as an agent).
    pub fn not_a_profile(&self) -> Option<String> {
        let has_none = self.description.is_empty()
            && self.specialist.is_empty()
            && self.tools.is_empty()
            && self.mcp_servers.is_empty()
            && self.llm == ProfileLlm::default();
        (has_none && !self.other.is_empty()).then(|| {
            let keys: Vec<&str> = self.other.keys().map(String::as_str).take(8).collect();
            format!(
                "not a profile: none of its keys ({}) is one of a profile's (description, \
                 specialist, tools, mcp_servers, llm); if it is another kind of file, move it \
                 out of the config directory",
                keys.join(", ")
            )
        })
    }
}

/// Checks every rule that needs no I/O; all violations are reported together. Whether the
/// `subagents` exist is not one of them: hand-written files are loaded in any order, so a file
/// naming an agent whose file comes later (or is broken for a while) must still load. The API
/// checks existence on create, update and validate ([`invalid_subagents`]); the executor copes
/// with a sub-agent that has gone since.
pub fn validate(id: &str, def: &CustomAgentFile) -> Result<(), ApiError> {
    // Every violation is named together, a bad id's among them.
    let mut v: Vec<(String, String)> = Vec::new();
    let mut bad = |f: &str, d: String| v.push((f.to_owned(), d));
    if id.is_empty() {
        bad("agent_id", "is required".into());
    } else if let Err(e) = ids::validate_agent_id(id) {
        bad("agent_id", e.to_string());
    } else if def.agent_id.as_deref().is_some_and(|a| a != id) {
        bad(
            "agent_id",
            format!(
                "must equal the file name {id:?} (a file copied from another agent's keeps its \
                 agent_id: change it to {id:?}, or remove the line)"
            ),
        );
    }
    check_len(&mut bad, "name", &def.name, MAX_NAME);
    check_len(&mut bad, "description", &def.description, MAX_DESCRIPTION);
    check_len(
        &mut bad,
        "system_prompt",
        &def.prompt.system_prompt,
        MAX_PROMPT,
    );
    // Texts that reach terminals (the CLI's tables) carry no control characters: an escape
    // sequence in a name would run in the terminal of whoever lists agents.
    for (field, value, lines) in [
        ("name", Some(&def.name), false),
        ("role", def.role.as_ref(), false),
        ("project", def.project.as_ref(), false),
        ("description", Some(&def.description), true),
        ("system_prompt", Some(&def.prompt.system_prompt), true),
    ] {
        if let Some(c) = value.and_then(|v| control_char(v, lines)) {
            bad(
                field,
                format!(
                    "must not contain control characters (found U+{:04X}){}",
                    u32::from(c),
                    if lines {
                        "; line breaks and tabs are fine"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    if def.tools.allowlist.is_empty() {
        bad("tool_allowlist", "must name at least one tool".into());
    }
    for (field, value, max) in [
        ("role", &def.role, MAX_LABEL),
        ("project", &def.project, MAX_LABEL),
        ("workspace", &def.workspace, MAX_PATH),
    ] {
        let n = value.as_deref().map_or(0, |v| v.chars().count());
        if n > max {
            bad(field, format!("must be at most {max} characters, got {n}"));
        }
    }
    if def.workspace.as_deref().is_some_and(|w| w.contains('\0')) {
        bad("workspace", "must not contain NUL characters".into());
    }
    if let Some(w) = def.workspace_id.as_deref()
        && uuid::Uuid::parse_str(w).is_err()
    {
        bad("workspace_id", format!("must be a UUID, got {w:?}"));
    }
    if let Some(d) = too_many_servers(def.mcp_servers.len()) {
        bad("mcp_servers", d);
    }
    for (i, s) in def.mcp_servers.iter().enumerate() {
        if let Err(d) = validate_mcp_server(s) {
            bad(&format!("mcp_servers[{i}]"), d);
        }
    }
    if !def.mcp_allowlist().is_empty() && def.mcp_servers.is_empty() {
        bad(
            "mcp_tool_allowlist",
            "is set but no mcp_servers are configured".into(),
        );
    }
    for d in subagent_problems(id, &def.subagents) {
        bad("subagents", d);
    }
    if let Some(model) = def.model.as_deref()
        && let Err(d) = ids::check_model(model)
    {
        bad("model", d);
    }
    if let Some(mode) = def.mode.as_deref()
        && !mode.is_empty()
        && canonical_mode(mode).is_none()
    {
        bad(
            "mode",
            format!("must be one of readOnly, default, safeWrite, got {mode:?}"),
        );
    }
    let unknown = unknown_tools(&def.tools.allowlist, catalog::is_catalog_tool);
    if !v.is_empty() {
        // Said with the other problems, so one answer names them all (alone, unknown tools
        // are the `invalid_tools` answer below).
        v.extend(unknown_tools_named("tool_allowlist", &unknown));
        let mcp_only = v.iter().all(|(f, _)| f.starts_with("mcp_servers["));
        let mut e = ApiError::fields(v);
        if mcp_only {
            e.kind = ErrorKind::InvalidMcpConfig;
        }
        return Err(e);
    }
    known_tools(&unknown, "tool_allowlist")
}

/// The entries of `tools` that are not `known`.
fn unknown_tools<'a>(
    tools: impl IntoIterator<Item = &'a String>,
    known: impl Fn(&str) -> bool,
) -> Vec<&'a String> {
    tools.into_iter().filter(|t| !known(t)).collect()
}

/// The field problem of `field`'s `unknown` tools, naming up to 20 of them; for an answer that
/// has other problems to name too.
fn unknown_tools_named(field: &str, unknown: &[&String]) -> Option<(String, String)> {
    const NAMED: usize = 20;
    if unknown.is_empty() {
        return None;
    }
    let mut names: Vec<String> = unknown
        .iter()
        .take(NAMED)
        .map(|t| format!("{t:?}"))
        .collect();
    if unknown.len() > NAMED {
        names.push(format!("and {} more", unknown.len() - NAMED));
    }
    Some((
        field.to_owned(),
        format!(
            "names tools that are not in the catalog (GET /api/v1/tools): {}",
            names.join(", ")
        ),
    ))
}

/// Refuses `field`'s `unknown` tools, naming them and those there are.
fn known_tools(unknown: &[&String], field: &str) -> Result<(), ApiError> {
    if unknown.is_empty() {
        return Ok(());
    }
    let unknown: Vec<String> = unknown.iter().map(|t| (*t).clone()).collect();
    let available: Vec<String> = catalog::NATIVE_TOOL_NAMES
        .iter()
        .chain(&catalog::ORCHESTRATION_TOOL_NAMES)
        .map(|s| (*s).to_owned())
        .collect();
    Err(ApiError::invalid_tools(
        ErrorKind::InvalidTools,
        &format!("Unknown tool(s) in {field}"),
        &unknown,
        &available,
    ))
}

/// The rules a profile file follows: the texts that reach terminals carry no control
/// characters and fit their caps, its MCP servers are valid entries, and its `tools` are tools
/// of the catalog (an unknown one would be left out of its runs without a word).
pub fn validate_profile(profile: &ProfileFile) -> Result<(), ApiError> {
    let mut v: Vec<(String, String)> = Vec::new();
    for (field, value, lines) in [
        ("description", &profile.description, true),
        ("specialist", &profile.specialist, false),
    ] {
        if let Some(c) = control_char(value, lines) {
            v.push((
                field.to_owned(),
                format!(
                    "must not contain control characters (found U+{:04X})",
                    u32::from(c)
                ),
            ));
        }
    }
    let n = profile.description.chars().count();
    if n > MAX_DESCRIPTION {
        v.push((
            "description".to_owned(),
            format!("must be at most {MAX_DESCRIPTION} characters, got {n}"),
        ));
    }
    if let Some(d) = too_many_servers(profile.mcp_servers.len()) {
        v.push(("mcp_servers".to_owned(), d));
    }
    for (i, s) in profile.mcp_servers.iter().enumerate() {
        if let Err(d) = validate_mcp_server(s) {
            v.push((format!("mcp_servers[{i}]"), d));
        }
    }
    let unknown = unknown_tools(profile.tools.iter().map(|t| &t.kind), |kind| {
        catalog::profile_tool(kind).is_some()
    });
    if !v.is_empty() {
        v.extend(unknown_tools_named("tools", &unknown));
        return Err(ApiError::fields(v));
    }
    known_tools(&unknown, "tools")
}

/// The entries of `list` that repeat an earlier one, each named ("listed more than once").
fn repeated(list: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    list.iter()
        .enumerate()
        .filter(|(_, s)| !seen.insert(s.as_str()))
        .map(|(i, s)| listed_twice(i, s))
        .collect()
}

/// What [`repeated`] and [`subagent_problems`] say of entry `i`, a repeat of `s`.
fn listed_twice(i: usize, s: &str) -> String {
    format!("entry {i} ({s:?}) is listed more than once")
}

/// [`validate`] for a definition a client sends (create, update): also refuses a tool listed
/// twice in `tool_allowlist` or `mcp_tool_allowlist`, a text of only invisible characters
/// (U+200B, ...) and, in the one-line `name`, `role` and `project`, the bidirectional
/// embeddings and overrides (U+202A-U+202E) that make a terminal show one name as another. A
/// file on disk is read without these rules (a repeat dropped: [`CustomAgentFile::drop_repeated_tools`]):
/// files written before them keep their agents.
pub fn validate_new(id: &str, def: &CustomAgentFile) -> Result<(), ApiError> {
    let mut extra: Vec<(String, String)> = [
        ("tool_allowlist", def.tools.allowlist.as_slice()),
        ("mcp_tool_allowlist", def.mcp_allowlist()),
    ]
    .into_iter()
    .flat_map(|(field, list)| {
        repeated(list)
            .into_iter()
            .map(move |d| (field.to_owned(), d))
    })
    .collect();
    for (field, value) in [
        ("name", &def.name),
        ("description", &def.description),
        ("system_prompt", &def.prompt.system_prompt),
    ] {
        if !value.trim().is_empty() && value.chars().all(invisible) {
            extra.push((
                field.to_owned(),
                "is required and must not be empty (it has only invisible characters)".into(),
            ));
        }
    }
    for (field, value) in [
        ("name", Some(&def.name)),
        ("role", def.role.as_ref()),
        ("project", def.project.as_ref()),
    ] {
        if let Some(c) =
            value.and_then(|v| v.chars().find(|c| matches!(c, '\u{202A}'..='\u{202E}')))
        {
            extra.push((
                field.to_owned(),
                format!(
                    "must not contain bidirectional embeddings or overrides (found U+{:04X}): \
                     they make a terminal show the text in another order",
                    u32::from(c)
                ),
            ));
        }
    }
    match validate(id, def) {
        Err(e) if !extra.is_empty() && !e.field_violations.is_empty() => {
            let mut all = e.field_violations;
            all.extend(extra);
            Err(ApiError::fields(all))
        }
        Ok(()) if !extra.is_empty() => Err(ApiError::fields(extra)),
        other => other,
    }
}

/// The shape problems of a `subagents` list: bad ids, ids too long for a tool name, the agent
/// itself, duplicates. Whether each entry names a known agent needs the store: see
/// [`invalid_subagents`].
fn subagent_problems(id: &str, subagents: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::with_capacity(subagents.len());
    for (i, s) in subagents.iter().enumerate() {
        if let Err(e) = ids::validate_agent_id(s) {
            out.push(format!("entry {i} ({s:?}) is not a valid agent id: {e}"));
        } else if s.len() > MAX_SUBAGENT_ID {
            out.push(format!(
                "entry {i} ({s:?}) is {} characters long; at most {MAX_SUBAGENT_ID} are allowed, so that its tool name agent_<id> fits the 64-character limit of tool names",
                s.len()
            ));
        } else if s == id {
            out.push(format!("entry {i} ({s:?}) is the agent itself"));
        } else if !seen.insert(s.as_str()) {
            out.push(listed_twice(i, s));
        }
    }
    out
}

/// The stored spelling of a policy mode: `text` is matched case-insensitively with `-` and `_`
/// ignored, so `read_only` and `READONLY` are `readOnly`. `None` when it names no mode.
pub fn canonical_mode(text: &str) -> Option<&'static str> {
    taskforce_proto::mode::Mode::parse(text)
        .ok()
        .map(taskforce_proto::mode::Mode::as_str)
}

/// The `invalid_subagents` error for the `unknown` entries of agent `id`'s `subagents`, listing
/// the `known` agent ids (sorted, without `id`, at most [`MAX_AVAILABLE_AGENTS`]).
pub fn invalid_subagents(
    id: &str,
    unknown: &[String],
    known: impl IntoIterator<Item = String>,
) -> ApiError {
    let known: std::collections::BTreeSet<String> = known.into_iter().filter(|k| k != id).collect();
    let total = known.len();
    let available: Vec<String> = known.into_iter().take(MAX_AVAILABLE_AGENTS).collect();
    let mut message = "Unknown agent(s) in subagents".to_owned();
    if total > available.len() {
        message.push_str(&format!(
            " (available_agents lists the first {} of {total} agents)",
            available.len()
        ));
    }
    ApiError::invalid_subagents(&message, unknown, &available)
}

/// The first control character of `value` (line breaks and tabs allowed when `lines`).
fn control_char(value: &str, lines: bool) -> Option<char> {
    value
        .chars()
        .find(|c| c.is_control() && !(lines && matches!(c, '\n' | '\r' | '\t')))
}

/// Whether `c` shows nothing: whitespace, or a zero-width or invisible format character.
fn invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
        )
}

fn check_len(bad: &mut impl FnMut(&str, String), field: &str, value: &str, max: usize) {
    let n = value.chars().count();
    if value.trim().is_empty() {
        bad(field, "is required and must not be empty".into());
    } else if n > max {
        bad(field, format!("must be at most {max} characters, got {n}"));
    }
}

/// Checks one MCP server entry (seed 000 §5.1: `stdio` needs `command`, `sse`/`http` need `url`;
/// `global` needs the `name` of one of the executor's global servers and nothing else).
pub fn validate_mcp_server(s: &McpServerConfig) -> Result<(), String> {
    let server = taskforce_proto::v1::McpServer::from(s);
    taskforce_proto::mcp_config::validate(&server)?;
    // The server is a program or an endpoint of the agent's author: it never gets the
    // services' own secrets, so a placeholder naming one is refused when the agent is saved.
    let mut values = [&server.command, &server.url]
        .into_iter()
        .chain(&server.args)
        .chain(server.env.values())
        .chain(server.headers.values());
    values
        .try_for_each(|value| taskforce_runtime::env::no_reserved_placeholder(value))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> CustomAgentFile {
        CustomAgentFile {
            name: "Invoice Extractor".into(),
            description: "Extracts fields".into(),
            prompt: Prompt {
                system_prompt: "You are a LeanAgent.".into(),
            },
            tools: Allowlist {
                allowlist: vec!["file_read".into()],
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_complete_definition_is_valid() {
        assert_eq!(validate("invoice-extractor", &good()), Ok(()));
    }

    #[test]
    fn missing_fields_are_all_reported() {
        let e = validate("abc", &CustomAgentFile::default()).err();
        let fields: Vec<_> = e
            .iter()
            .flat_map(|e| e.field_violations.iter().map(|f| f.0.clone()))
            .collect();
        assert_eq!(
            fields,
            ["name", "description", "system_prompt", "tool_allowlist"]
        );
    }

    #[test]
    fn unknown_tools_are_named_with_the_other_problems() {
        let mut d = good();
        d.description = String::new();
        d.tools.allowlist = vec!["file_read".into(), "foo_tool".into()];
        let violations: Vec<(String, String)> = validate("invoice-extractor", &d)
            .err()
            .iter()
            .flat_map(|e| e.field_violations.clone())
            .collect();
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert_eq!(violations[0].0, "description");
        assert_eq!(violations[1].0, "tool_allowlist");
        assert!(violations[1].1.contains("\"foo_tool\""), "{violations:?}");
        // Alone, they are the invalid_tools answer.
        d.description = "Extracts".into();
        let alone = validate("invoice-extractor", &d).err();
        assert_eq!(alone.map(|e| e.kind), Some(ErrorKind::InvalidTools));
        // With a bad MCP server, the answer is no MCP config error alone.
        d.mcp_servers = vec![McpServerConfig {
            kind: "bogus".into(),
            ..Default::default()
        }];
        let both = validate("invoice-extractor", &d).err();
        assert_eq!(both.map(|e| e.kind), Some(ErrorKind::InvalidArgument));
    }

    #[test]
    fn a_bad_id_is_reported_with_the_rest_and_repeated_tools_are_refused_when_sent() {
        let mut d = CustomAgentFile::default();
        d.tools.allowlist = vec!["file_read".into(), "git".into(), "file_read".into()];
        let e = validate_new("BAD id", &d).err();
        let violations: Vec<(String, String)> =
            e.iter().flat_map(|e| e.field_violations.clone()).collect();
        let fields: Vec<&str> = violations.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "agent_id",
                "name",
                "description",
                "system_prompt",
                "tool_allowlist"
            ]
        );
        assert!(
            violations[4]
                .1
                .contains("entry 2 (\"file_read\") is listed more than once"),
            "{violations:?}"
        );
    }

    #[test]
    fn over_long_name_and_description_are_refused() {
        let mut d = good();
        d.name = "n".repeat(101);
        d.description = "d".repeat(501);
        let e = validate("abc", &d)
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(e.contains("name: must be at most 100"), "{e}");
        assert!(e.contains("description: must be at most 500"), "{e}");
    }

    #[test]
    fn more_mcp_servers_than_the_bound_are_refused_naming_the_field() {
        let server = "  - {type: stdio, command: x}\n";
        let yaml = |n: usize| {
            format!(
                "name: A\ndescription: d\nprompt: {{system_prompt: p}}\ntools: {{allowlist: [file_read]}}\nmcp_servers:\n{}",
                server.repeat(n)
            )
        };
        let parse =
            |text: String| -> CustomAgentFile { serde_yaml::from_str(&text).expect("yaml") };
        assert!(validate("agent-x", &parse(yaml(MAX_MCP_SERVERS))).is_ok());
        let refused = format!(
            "{:?}",
            validate("agent-x", &parse(yaml(MAX_MCP_SERVERS + 1)))
        );
        assert!(
            refused.contains("mcp_servers") && refused.contains("at most 32 servers, got 33"),
            "{refused}"
        );
    }

    #[test]
    fn a_key_given_twice_in_an_mcp_servers_env_is_an_error_not_last_wins() {
        let yaml = "name: A\ndescription: d\nprompt: {system_prompt: p}\ntools: {allowlist: [file_read]}\nmcp_servers:\n  - {type: stdio, command: x, env: {X: one, X: two}}\n";
        let err = crate::files::yaml::<CustomAgentFile>(yaml.as_bytes())
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("duplicate key `X`")));
    }

    #[test]
    fn control_characters_are_refused_but_line_breaks_in_texts_are_fine() {
        let mut d = good();
        d.name = "Evil\u{1b}]0;pwned\u{7}".into();
        d.role = Some("a\nb".into());
        d.description = "two\r\nlines\tand a tab".into();
        d.prompt.system_prompt = "clear\u{1b}[2J".into();
        let e = validate("abc", &d)
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(
            e.contains("name: must not contain control characters (found U+001B)"),
            "{e}"
        );
        assert!(
            e.contains("role: must not contain control characters (found U+000A)"),
            "{e}"
        );
        assert!(e.contains("system_prompt: must not contain control"), "{e}");
        assert!(!e.contains("description"), "{e}");
    }

    #[test]
    fn a_client_cannot_send_invisible_or_reordering_names_that_files_keep() {
        // A one-line field cannot reorder what a terminal shows; a text may hold RTL marks,
        // and a name balanced isolates.
        let mut d = good();
        d.name = "invoice-\u{202E}txt.exe".into();
        d.project = Some("a\u{202B}b".into());
        d.role = Some("\u{2067}שלום\u{2069} team".into());
        d.description = "\u{202B}שלום\u{202C} and more".into();
        let e = validate_new("abc", &d)
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(
            e.contains("name: must not contain bidirectional") && e.contains("U+202E"),
            "{e}"
        );
        assert!(e.contains("project: must not contain bidirectional"), "{e}");
        assert!(!e.contains("role") && !e.contains("description"), "{e}");
        // A name of nothing visible is blank.
        let mut d = good();
        d.name = "\u{200B}\u{FEFF}".into();
        let e = validate_new("abc", &d)
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(e.contains("name: is required and must not be empty"), "{e}");
        // A file written before these rules keeps its agent.
        assert_eq!(validate("abc", &d), Ok(()));
    }

    #[test]
    fn unknown_and_wrong_case_tools_give_the_invalid_tools_error() {
        let mut d = good();
        d.tools.allowlist = vec!["file_read".into(), "foo_tool".into(), "Python".into()];
        let e = validate("abc", &d).err();
        assert_eq!(e.as_ref().map(|e| e.kind), Some(ErrorKind::InvalidTools));
        let body = e.map(|e| e.to_json()).unwrap_or_default();
        assert_eq!(
            body["invalid_tools"],
            serde_json::json!(["foo_tool", "Python"])
        );
    }

    #[test]
    fn mcp_server_shapes_are_checked() {
        let stdio = McpServerConfig {
            kind: "stdio".into(),
            ..Default::default()
        };
        assert!(validate_mcp_server(&stdio).is_err());
        let sse = McpServerConfig {
            kind: "sse".into(),
            url: "http://x/sse".into(),
            ..Default::default()
        };
        assert!(validate_mcp_server(&sse).is_ok());
        let mut leaky = sse;
        leaky.headers.insert(
            "Authorization".into(),
            "Bearer ${TASKFORCE_SERVICE_TOKEN}".into(),
        );
        assert!(
            validate_mcp_server(&leaky).is_err_and(|e| e.contains("TASKFORCE_SERVICE_TOKEN")),
            "a service secret in a header"
        );
        let ws = McpServerConfig {
            kind: "websocket".into(),
            ..Default::default()
        };
        assert!(validate_mcp_server(&ws).is_err());
    }

    #[test]
    fn timestamps_are_written_quoted_and_read_back_as_strings() {
        let mut d = good();
        d.created_at = Some("2026-11-22T09:00:00Z".into());
        let yaml = to_yaml(&d).unwrap_or_default();
        assert!(
            yaml.contains("created_at: \"2026-11-22T09:00:00Z\"\n"),
            "{yaml}"
        );
        let back: CustomAgentFile = serde_yaml::from_str(&yaml).unwrap_or_default();
        assert_eq!(back, d);
    }

    #[test]
    fn timestamps_with_any_text_survive_to_yaml() {
        // Found by the `agent_definition` fuzz target: a hand-written `created_at` with a quote
        // was wrapped in quotes again, and the file written on the next update did not load.
        for odd in [
            "612-06\"1-22T09:00:00Z\"",
            "C:\\time\\now",
            "two\nlines",
            "|-",
            " padded ",
            "",
            "'single'",
            "2026-11-22 09:00:00",
        ] {
            let mut d = good();
            d.created_at = Some(odd.into());
            d.updated_at = Some(format!("{odd}x"));
            let yaml = to_yaml(&d).unwrap_or_default();
            let back: Result<CustomAgentFile, _> = serde_yaml::from_str(&yaml);
            assert_eq!(back.ok().as_ref(), Some(&d), "{odd:?} gave\n{yaml}");
        }
    }

    fn fields_of(e: Option<ApiError>) -> Vec<(String, String)> {
        e.map(|e| {
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
            e.field_violations
        })
        .unwrap_or_default()
    }

    #[test]
    fn orchestration_tools_may_be_allowlisted_and_are_offered_when_a_tool_is_unknown() {
        let mut d = good();
        d.tools.allowlist = vec!["delegate_to_agent".into(), "update_todolist".into()];
        assert_eq!(validate("orchestrator", &d), Ok(()));
        d.tools.allowlist.push("agent_researcher".into());
        let body = validate("orchestrator", &d)
            .err()
            .map(|e| e.to_json())
            .unwrap_or_default();
        assert_eq!(
            body["invalid_tools"],
            serde_json::json!(["agent_researcher"])
        );
        let available = body["available_tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(available.len(), 11, "{available:?}");
        assert!(available.contains(&"delegate_to_agent".into()));
        assert!(available.contains(&"web_search".into()));
    }

    #[test]
    fn well_formed_subagents_are_valid() {
        let mut d = good();
        d.subagents = vec![
            "researcher".into(),
            "dev".into(),
            "a".repeat(MAX_SUBAGENT_ID),
        ];
        assert_eq!(validate("orchestrator", &d), Ok(()));
    }

    #[test]
    fn malformed_self_duplicate_and_overlong_subagents_are_field_errors() {
        let mut d = good();
        d.subagents = vec![
            "Researcher".into(),
            "orchestrator".into(),
            "dev".into(),
            "dev".into(),
            "a".repeat(MAX_SUBAGENT_ID + 1),
            "../x".into(),
        ];
        let fields = fields_of(validate("orchestrator", &d).err());
        assert_eq!(fields.len(), 5, "{fields:?}");
        assert!(fields.iter().all(|(f, _)| f == "subagents"), "{fields:?}");
        let text = |i: usize| fields[i].1.as_str();
        assert!(text(0).contains("entry 0") && text(0).contains("not a valid agent id"));
        assert!(text(1).contains("the agent itself"), "{}", text(1));
        assert!(text(2).contains("entry 3") && text(2).contains("more than once"));
        assert!(text(3).contains("at most 58"), "{}", text(3));
        assert!(text(4).contains("entry 5"), "{}", text(4));
    }

    #[test]
    fn model_aliases_are_short_and_without_whitespace() {
        for ok in [
            "fast",
            "openai/gpt-4o-mini:2024-07-18",
            &"m".repeat(MAX_MODEL),
        ] {
            let mut d = good();
            d.model = Some(ok.to_owned());
            assert_eq!(validate("abc", &d), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "gpt 4o",
            "fast\n",
            "a\u{7}b",
            "\u{a0}x",
            &"m".repeat(MAX_MODEL + 1),
        ] {
            let mut d = good();
            d.model = Some(bad.to_owned());
            let fields = fields_of(validate("abc", &d).err());
            assert_eq!(fields.len(), 1, "{bad:?}: {fields:?}");
            assert_eq!(fields[0].0, "model");
        }
    }

    #[test]
    fn subagents_and_model_round_trip_and_are_omitted_when_unset() {
        let plain = to_yaml(&good()).unwrap_or_default();
        assert!(
            !plain.contains("subagents") && !plain.contains("model"),
            "{plain}"
        );
        let mut d = good();
        d.subagents = vec!["researcher".into(), "coder".into()];
        d.model = Some("fast".into());
        let yaml = to_yaml(&d).unwrap_or_default();
        assert!(
            yaml.contains("subagents:\n- researcher\n- coder\nmodel: fast\n"),
            "{yaml}"
        );
        let back: CustomAgentFile = serde_yaml::from_str(&yaml).unwrap_or_default();
        assert_eq!(back, d);
        let hand: CustomAgentFile = serde_yaml::from_str(
            "name: n\ndescription: d\nprompt: {system_prompt: p}\ntools: {allowlist: [python]}\nsubagents: [a-b, c_d]\nmodel: small\n",
        )
        .unwrap_or_default();
        assert_eq!(hand.subagents, ["a-b", "c_d"]);
        assert_eq!(hand.model.as_deref(), Some("small"));
    }

    #[test]
    fn modes_are_matched_ignoring_case_dashes_and_underscores() {
        for (text, mode) in [
            ("readOnly", "readOnly"),
            ("read_only", "readOnly"),
            ("READ-ONLY", "readOnly"),
            ("readonly", "readOnly"),
            ("default", "default"),
            ("Default", "default"),
            ("safeWrite", "safeWrite"),
            ("safe_write", "safeWrite"),
            ("safe-write", "safeWrite"),
        ] {
            assert_eq!(canonical_mode(text), Some(mode), "{text}");
        }
        for text in [
            "",
            " readOnly",
            "read only",
            "write",
            "readOnly!",
            "saféWrite",
        ] {
            assert_eq!(canonical_mode(text), None, "{text:?}");
        }
    }

    #[test]
    fn known_or_empty_modes_are_valid() {
        for mode in [
            None,
            Some(""),
            Some("readOnly"),
            Some("safe_write"),
            Some("DEFAULT"),
        ] {
            let mut d = good();
            d.mode = mode.map(str::to_owned);
            assert_eq!(validate("abc", &d), Ok(()), "{mode:?}");
        }
    }

    #[test]
    fn an_unknown_mode_is_a_field_error_naming_mode() {
        for bad in ["yolo", " ", "read only", "readOnly "] {
            let mut d = good();
            d.mode = Some(bad.to_owned());
            let fields = fields_of(validate("abc", &d).err());
            assert_eq!(fields.len(), 1, "{bad:?}: {fields:?}");
            assert_eq!(fields[0].0, "mode");
            assert!(
                fields[0].1.contains("readOnly, default, safeWrite"),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn mode_round_trips_in_yaml_and_is_omitted_when_unset() {
        assert!(!to_yaml(&good()).unwrap_or_default().contains("mode"));
        let mut d = good();
        d.model = Some("fast".into());
        d.mode = Some("readOnly".into());
        let yaml = to_yaml(&d).unwrap_or_default();
        assert!(yaml.contains("model: fast\nmode: readOnly\n"), "{yaml}");
        let back: CustomAgentFile = serde_yaml::from_str(&yaml).unwrap_or_default();
        assert_eq!(back, d);
        let hand: CustomAgentFile = serde_yaml::from_str(
            "name: n\ndescription: d\nprompt: {system_prompt: p}\ntools: {allowlist: [python]}\nmode: safe_write\n",
        )
        .unwrap_or_default();
        assert_eq!(hand.mode.as_deref(), Some("safe_write"));
        assert_eq!(validate("abc", &hand), Ok(()));
    }

    #[test]
    fn invalid_subagents_lists_the_other_known_agents_sorted_and_capped() {
        let e = invalid_subagents(
            "orchestrator",
            &["nope".into()],
            ["researcher", "dev", "orchestrator", "dev"].map(String::from),
        );
        assert_eq!(e.kind, ErrorKind::InvalidSubagents);
        assert_eq!(
            e.to_json(),
            serde_json::json!({
                "error": "invalid_subagents",
                "message": "Unknown agent(s) in subagents",
                "invalid_subagents": ["nope"],
                "available_agents": ["dev", "researcher"]
            })
        );
        let many = (0..MAX_AVAILABLE_AGENTS + 5).map(|i| format!("agent-{i:04}"));
        let e = invalid_subagents("orchestrator", &["nope".into()], many);
        let body = e.to_json();
        assert_eq!(
            body["available_agents"].as_array().map(Vec::len),
            Some(MAX_AVAILABLE_AGENTS)
        );
        assert_eq!(body["available_agents"][0], "agent-0000");
        assert!(e.message.contains("first 100 of 105"), "{}", e.message);
    }

    #[test]
    fn id_must_match_the_file_name() {
        let mut d = good();
        d.agent_id = Some("other".into());
        assert!(validate("abc", &d).is_err());
    }
}
