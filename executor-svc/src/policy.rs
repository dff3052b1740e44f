//! The one policy check every tool call passes before it runs (seed 004 §3.3, §6.2, §9).
//!
//! A [`Policy`] is a value built once from configuration ([`PolicyConfig`], from the
//! environment) and carried by every run; a run's [`Mode`] (from the request, else none) picks
//! the rules:
//! - `readOnly`: only reads. A call reads when it is a read-only tool of the executor's own
//!   (judged by its name: an MCP server may name its tools anything, so its tools never are),
//!   or when its command reads: an MCP tool's command line reads when every command in it
//!   starts with a program whose commands name their verb last (`AGENT_COMMAND_PROGRAMS`,
//!   `m365`) and its verb (the last word of its command path, the words before its first
//!   option: `get` in `m365 spo site get --url …`) is a read verb (`get|list|show|status|export`),
//!   no word of the path is a deny verb (`remove|delete|set|add|grant|revoke|update|create|disable|enable`)
//!   and no argument follows the options that is not an option's value; option values never
//!   count, so `--subject "weekly status"` does not make a `send` a read and
//!   `--url …/sites/add-ins` does not make a `get` a write. A tool without a command line reads
//!   when its name holds a read verb and no deny verb (`get_current_time`). Deny verbs are
//!   always refused here, whatever the allowlist says.
//! - `default`: reads, plus the writes the operator allowlisted.
//! - `safeWrite`: reads, plus allowlisted writes only with the user's confirmation of that exact
//!   call ([`Decision::Confirm`] names it by a stable id).
//!
//! A run without a mode keeps the behaviour of runs before modes existed: the agent's allowlist
//! is the whole policy. A blocked call must not run: the loop hands the reason to the model as
//! a `policy_blocked` error result and the run goes on.

use std::collections::HashSet;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use taskforce_proto::mode::Mode;

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Do not run it; the reason goes to the model and the audit log.
    Block {
        /// Why, in a sentence the model can act on.
        reason: String,
    },
    /// An allowlisted write in `safeWrite`: runs once the user confirms `id`.
    Confirm {
        /// What the user sees and confirms: the first 12 hex digits of `key`.
        id: String,
        /// The call's full [`confirmation_key`]: what a confirmation is bound to.
        key: String,
        /// The call as the user should see it.
        command: String,
    },
}

/// Where a tool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The executor's own (native and orchestration tools): its name says what it does.
    Executor,
    /// An MCP server's: a server may name a tool anything (`file_read`, `agent_x`), so only its
    /// command line, or an operator's `AGENT_READ_TOOLS`, or the verbs in its name, decide.
    Mcp,
}

/// The call being checked.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The agent making it.
    pub agent_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// Where the tool comes from.
    pub origin: Origin,
    /// The model's arguments.
    pub arguments: &'a Value,
}

/// The policy's configuration; [`PolicyConfig::from_env`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Verbs that make a command a read.
    pub read_verbs: Vec<String>,
    /// Verbs that make a command a write that `readOnly` always refuses.
    pub deny_verbs: Vec<String>,
    /// Writes `default` and `safeWrite` allow: a tool name (`file_write`), or a command prefix
    /// (`spo list get`, matched word by word, case-insensitively, at the start of a command's
    /// path or right after its program).
    pub write_allowlist: Vec<String>,
    /// Argument names that hold an MCP tool's command line.
    pub command_arguments: Vec<String>,
    /// Programs whose commands name their verb last (`m365 spo site get`): only their command
    /// lines can be reads.
    pub command_programs: Vec<String>,
    /// Options that make such a command write a local file whatever its verb
    /// (`m365 spo file get --asFile --path …`): a command with one is never a read.
    pub write_options: Vec<String>,
    /// MCP tools that only read although their name holds no read verb (by name).
    pub read_tools: Vec<String>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let words = |s: &str| s.split('|').map(str::to_owned).collect();
        Self {
            read_verbs: words("get|list|show|status|export"),
            deny_verbs: words("remove|delete|set|add|grant|revoke|update|create|disable|enable"),
            write_allowlist: Vec::new(),
            command_arguments: words("command|cmd|commandLine|command_line"),
            command_programs: words("m365"),
            write_options: words("asFile|path|outputFile|outputDirectory|outDir"),
            // The CLI for Microsoft 365 MCP server's tools that look commands up.
            read_tools: words("m365_search_commands|m365_get_command_docs|m365_get_best_practices"),
        }
    }
}

impl PolicyConfig {
    /// The defaults, overridden by `AGENT_READ_VERBS`, `AGENT_DENY_VERBS` (`|` or `,`
    /// separated), `AGENT_WRITE_ALLOWLIST` (`,` separated), `AGENT_COMMAND_ARGUMENTS`,
    /// `AGENT_COMMAND_PROGRAMS`, `AGENT_WRITE_OPTIONS` and `AGENT_READ_TOOLS`.
    pub fn from_env() -> Self {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// [`PolicyConfig::from_env`] over any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let mut config = Self::default();
        let list = |value: String, seps: &[char]| -> Vec<String> {
            value
                .split(seps)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        if let Some(v) = get("AGENT_READ_VERBS") {
            config.read_verbs = list(v, &['|', ',']);
        }
        if let Some(v) = get("AGENT_DENY_VERBS") {
            config.deny_verbs = list(v, &['|', ',']);
        }
        if let Some(v) = get("AGENT_WRITE_ALLOWLIST") {
            config.write_allowlist = list(v, &[',']);
        }
        if let Some(v) = get("AGENT_COMMAND_ARGUMENTS") {
            config.command_arguments = list(v, &['|', ',']);
        }
        if let Some(v) = get("AGENT_WRITE_OPTIONS") {
            config.write_options = list(v, &['|', ',']);
        }
        if let Some(v) = get("AGENT_COMMAND_PROGRAMS") {
            config.command_programs = list(v, &['|', ',']);
        }
        if let Some(v) = get("AGENT_READ_TOOLS") {
            config.read_tools = list(v, &['|', ',']);
        }
        config
    }
}

/// Whether a call reads or writes, and the command it amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Access {
    Read,
    /// A write; `denied` when a deny verb names it. `paths` are the command paths an allowlist
    /// entry may match (lower-case words), every one of which must match; empty when only the
    /// tool's name can allowlist it (an MCP command line with strays, a tool without one).
    Write {
        command: String,
        denied: bool,
        paths: Vec<Vec<String>>,
        /// The arguments that kept a command line from being judged ([`Policy::other_text`]).
        other_text: Vec<String>,
    },
}

/// The policy every run carries.
#[derive(Debug, Clone)]
pub struct Policy {
    read: HashSet<String>,
    deny: HashSet<String>,
    /// Lower-case allowlist entries, split into words.
    allow: Vec<Vec<String>>,
    /// Allowlist entries as written: a tool is allowlisted by its exact name.
    allow_tools: HashSet<String>,
    command_arguments: Vec<String>,
    /// Lower-case [`PolicyConfig::command_programs`].
    programs: HashSet<String>,
    /// Lower-case [`PolicyConfig::write_options`].
    write_options: HashSet<String>,
    read_tools: HashSet<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(&PolicyConfig::default())
    }
}

/// Native tools that only read (everything else native writes or runs code).
const NATIVE_READS: [&str; 4] = ["web_search", "web_fetch", "file_read", "ask_user"];

/// Tools of the run itself: the plan is session state, and a sub-agent's own calls are checked
/// one by one.
const ORCHESTRATION: [&str; 2] = ["delegate_to_agent", "update_todolist"];

/// git subcommands that only read.
const GIT_READS: [&str; 12] = [
    "status",
    "log",
    "diff",
    "show",
    "ls-files",
    "rev-parse",
    "blame",
    "grep",
    "describe",
    "shortlog",
    "ls-tree",
    "cat-file",
];

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Characters that end one command of a command line and may start another (`;`, `&&`, `|`,
/// a subshell, a redirection, a new line).
fn separates_commands(c: char) -> bool {
    matches!(
        c,
        ';' | '&' | '|' | '\n' | '\r' | '`' | '$' | '(' | ')' | '<' | '>'
    )
}

/// The commands of `line`: cut at [`separates_commands`] characters outside quotes (inside
/// quotes they are the text of an argument, as for a shell).
fn split_commands(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quote, mut escaped) = (0, None, false);
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            _ if escaped => escaped = false,
            Some('\'') if c == '\'' => quote = None,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\\' => escaped = true,
            None if c == '\'' || c == '"' => quote = Some(c),
            None if separates_commands(c) => {
                out.push(&line[start..i]);
                start = i + c.len_utf8();
                // `&&` and `||` are one separator each.
                if matches!(c, '&' | '|') && chars.next_if(|(_, n)| *n == c).is_some() {
                    start += c.len_utf8();
                }
            }
            None => {}
        }
    }
    out.push(&line[start..]);
    out
}

/// Whether a command line reads the same to this policy and to any shell and CLI parser that
/// may run it, so its words can be judged at all: outside quotes only printable ASCII, spaces
/// and command separators (no tab or other white space a shell does not split at, no glob,
/// brace, tilde, comment, history or escape character, no substitution, subshell or
/// redirection), quotes closed, and nothing inside double quotes that a shell expands. A line
/// that is not is never a read, and only its tool's name can allowlist it.
fn strictly_plain(line: &str) -> bool {
    let mut quote = None;
    for c in line.chars() {
        // What cmd.exe expands or escapes anywhere.
        if matches!(c, '%' | '^') {
            return false;
        }
        match quote {
            Some('\'') if c == '\'' => quote = None,
            Some('"') if c == '"' => quote = None,
            Some('"') if matches!(c, '$' | '`' | '\\' | '!') => return false,
            // cmd.exe does not quote with single quotes.
            Some('\'') if matches!(c, '&' | '|' | '<' | '>' | '!') => return false,
            Some(_) if c.is_control() => return false,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == ' ' || matches!(c, ';' | '&' | '|') => {}
            None if !c.is_ascii_graphic() => return false,
            None if matches!(
                c,
                '\\' | '$'
                    | '`'
                    | '('
                    | ')'
                    | '<'
                    | '>'
                    | '{'
                    | '}'
                    | '*'
                    | '?'
                    | '['
                    | ']'
                    | '~'
                    | '#'
                    | '!'
                    // PowerShell makes a list of words joined by commas.
                    | ','
            ) =>
            {
                return false;
            }
            None => {}
        }
    }
    quote.is_none()
}

/// Whether `token` is an option as the policy reads options: `--`, `--name`, `--name=value`,
/// `--no-name` or `-x` (one letter). Other shapes (`-c1`, `-xy.z`, `---`) are parsed
/// differently by different CLIs, so a command holding one is never a read.
fn is_plain_option(token: &str) -> bool {
    let name_ok = |name: &str| {
        let mut chars = name.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    match token.strip_prefix("--") {
        Some("") => true,
        Some(long) => name_ok(long.split_once('=').map_or(long, |(name, _)| name)),
        None => token.len() == 2 && token[1..].chars().all(|c| c.is_ascii_alphabetic()),
    }
}

/// A word of a command path: a letter, then letters, digits, `-` or `_` (`spo`, `m365`,
/// `app-setup-policy`). Anything else (an option, a quoted value, a URL) ends the path.
fn is_path_word(token: &str) -> bool {
    let mut chars = token.chars();
    chars.next().is_some_and(char::is_alphabetic)
        && chars.all(|c| c.is_alphanumeric() || c == '-' || c == '_')
}

/// One command of a command line, lower-cased: its *path*, the plain words before its first
/// other token (`m365 spo site get` in `m365 spo site get --url x`), and its *strays*, the
/// arguments after the options that are not an option's value (`item remove` in
/// `m365 spo list --output json item remove`): a command-line parser may read them as more of
/// the command, so a command with strays is never taken for a read. Quotes and backslashes are
/// taken off as a shell does (`'item'` and `\item` reach the program as `item`).
#[derive(Debug, Default, PartialEq)]
struct Command {
    path: Vec<String>,
    strays: Vec<String>,
    /// Option values that are one plain word (`remove` in `--force remove`).
    values: Vec<String>,
    /// The options' names, lower-case (`asfile` for `--asFile`).
    options: Vec<String>,
}

/// The commands of a command line (`m365 spo site get --url x; m365 status` gives two). A
/// command that starts with something else (a quote, a path, a variable) has an empty path.
fn commands(line: &str) -> Vec<Command> {
    split_commands(line)
        .into_iter()
        .filter(|command| !command.trim().is_empty())
        .map(|command| {
            let mut out = Command::default();
            let mut tokens = shell_words(command).into_iter().peekable();
            while let Some((t, false)) = tokens.peek() {
                if !is_path_word(t) {
                    break;
                }
                out.path.push(t.to_lowercase());
                tokens.next();
            }
            // Options and their values as yargs-parser reads them by default (the CLI for
            // Microsoft 365 finds its command with it, before it knows the command's options):
            // `--name` takes the next argument unless that is an option (a negative number is
            // a value); `--no-name` and `--name=value` take none; after `--` all are arguments.
            let mut takes_value = false;
            let mut rest_are_arguments = false;
            for (token, _) in tokens {
                // A value the CLI replaces with a file's contents (`@path`, `--name=@path`):
                // a read of any file of the server's host, so never a plain argument.
                if token.starts_with('@') || token.contains("=@") {
                    out.strays.push(token.to_lowercase());
                    takes_value = false;
                    continue;
                }
                if !rest_are_arguments && token == "--" {
                    rest_are_arguments = true;
                    takes_value = false;
                    continue;
                }
                let option = !rest_are_arguments
                    && token.len() > 1
                    && token.starts_with('-')
                    && !is_negative_number(&token);
                if option && !is_plain_option(&token) {
                    // Read differently by different parsers: as if it were an argument.
                    out.strays.push(token.to_lowercase());
                    takes_value = false;
                    continue;
                }
                if option {
                    takes_value = !token.contains('=') && !token.starts_with("--no-");
                    let name = token.trim_start_matches('-');
                    let name = name.split_once('=').map_or(name, |(name, _)| name);
                    out.options.push(name.to_lowercase());
                    continue;
                }
                if takes_value {
                    // A value of several words is one argument the program reads as a value.
                    if is_path_word(&token) {
                        out.values.push(token.to_lowercase());
                    }
                } else {
                    out.strays.push(token.to_lowercase());
                }
                takes_value = false;
            }
            out
        })
        .collect()
}

/// Whether any string in `arguments` names a path outside wherever it is read from: an
/// absolute path (`/…`, `\…`, `C:…`), the home (`~…`), or one that climbs (`..`).
fn names_a_path_outside(arguments: &Value) -> bool {
    match arguments {
        Value::String(text) => {
            let t = text.trim();
            t.starts_with(['/', '\\', '~'])
                || t.as_bytes().get(1) == Some(&b':')
                    && t.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
                || t.split(['/', '\\']).any(|segment| segment.trim() == "..")
        }
        Value::Array(items) => items.iter().any(names_a_path_outside),
        Value::Object(fields) => fields.values().any(names_a_path_outside),
        _ => false,
    }
}

/// Whether `token` is a negative number (`-1`, `-.5`), which option parsers take as a value.
fn is_negative_number(token: &str) -> bool {
    let digits = token.trim_start_matches('-');
    digits.len() < token.len()
        && digits
            .trim_start_matches('.')
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
}

/// A command's tokens split at white space outside quotes, quotes and backslash escapes taken
/// off as a shell does, each with whether any of it was quoted or escaped (`'Set Remove'` is
/// one quoted token).
fn shell_words(command: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let (mut token, mut quoted, mut quote) = (String::new(), false, None);
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            // Inside double quotes a backslash escapes only these.
            Some('"') if c == '\\' => match chars.next() {
                Some(next @ ('"' | '\\' | '$' | '`')) => token.push(next),
                Some(next) => {
                    token.push(c);
                    token.push(next);
                }
                None => token.push(c),
            },
            Some(_) => token.push(c),
            None if c == '\\' => {
                quoted = true;
                if let Some(next) = chars.next().filter(|n| *n != '\n') {
                    token.push(next);
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                quoted = true;
            }
            None if c.is_whitespace() => {
                if !token.is_empty() || quoted {
                    out.push((std::mem::take(&mut token), quoted));
                }
                quoted = false;
            }
            None => token.push(c),
        }
    }
    if !token.is_empty() || quoted {
        out.push((token, quoted));
    }
    out
}

/// Where the `git` tool's subcommand is in `args` (past the global options and their
/// values: `log` is `-C`'s directory in `-C log commit`), if the git tool would run them.
fn git_subcommand<'a>(args: &[&'a str]) -> Option<&'a str> {
    let owned: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let at = crate::tools::native::git_subcommand_at(&owned)?;
    args.get(at).copied()
}

impl Policy {
    /// The policy of `config`.
    pub fn new(config: &PolicyConfig) -> Self {
        let set = |v: &[String]| v.iter().map(|w| w.to_lowercase()).collect();
        Self {
            read: set(&config.read_verbs),
            deny: set(&config.deny_verbs),
            allow: config
                .write_allowlist
                .iter()
                .map(|e| words(e))
                .filter(|w| !w.is_empty())
                .collect(),
            allow_tools: config
                .write_allowlist
                .iter()
                .map(|e| e.trim().to_owned())
                .collect(),
            command_arguments: config.command_arguments.clone(),
            programs: set(&config.command_programs),
            write_options: set(&config.write_options),
            read_tools: config.read_tools.iter().cloned().collect(),
        }
    }

    /// The arguments besides the command arguments that a server may add to the line it runs
    /// (`spawn(command, args, {shell: true})`, or options made of argument names): any text (a
    /// string, list or object), a name that is not a plain word, or a name of
    /// [`PolicyConfig::write_options`]. Numbers and booleans under plain names are fine
    /// (`timeout: 30`, `verbose: true`).
    fn other_text(&self, arguments: &Value) -> Vec<String> {
        let Some(fields) = arguments.as_object() else {
            return Vec::new();
        };
        fields
            .iter()
            .filter(|(name, value)| {
                !self.command_arguments.contains(*name)
                    && (matches!(value, Value::String(_) | Value::Array(_) | Value::Object(_))
                        || !is_path_word(name)
                        || self.write_options.contains(&name.to_lowercase()))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The command lines a call carries in its command arguments: every one present, since
    /// the policy cannot know which of them the tool runs.
    /// With each, whether it can be judged as a line: a list of words (an argv a tool may run
    /// without a shell) only when joining them with spaces gives back the same words. With
    /// `other_text` (see [`Policy::other_text`]) no line can be judged. A command argument
    /// that holds neither text nor a list of words cannot be judged either.
    fn command_lines(&self, arguments: &Value, other_text: bool) -> Vec<(String, bool)> {
        self.command_arguments
            .iter()
            .filter_map(|name| {
                let argument = arguments.get(name.as_str()).filter(|v| !v.is_null())?;
                let Some(text) = taskforce_proto::json::command_text(argument) else {
                    return Some((argument.to_string(), false));
                };
                let judged = !other_text
                    && match argument {
                        Value::Array(words) => words.iter().all(|w| {
                            w.as_str().is_some_and(|w| {
                                !w.is_empty()
                                    && strictly_plain(w)
                                    && !w.contains([' ', '\'', '"', ';', '&', '|'])
                            })
                        }),
                        _ => true,
                    };
                Some((text, judged))
            })
            .collect()
    }

    fn classify(&self, tool: &str, origin: Origin, arguments: &Value) -> Access {
        let write = |command: String, denied: bool, paths: Vec<Vec<String>>| Access::Write {
            command,
            denied,
            paths,
            other_text: Vec::new(),
        };
        if origin == Origin::Executor {
            if NATIVE_READS.contains(&tool)
                || ORCHESTRATION.contains(&tool)
                || tool.starts_with(crate::tools::orchestration::AGENT_TOOL_PREFIX)
            {
                return Access::Read;
            }
            return match tool {
                "git" => {
                    let args: Vec<&str> = arguments["args"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let command = format!("git {}", args.join(" "));
                    // `--output` makes `diff`, `log` and `show` write a file.
                    let writes_file = args
                        .iter()
                        .any(|a| *a == "--output" || a.starts_with("--output="));
                    match git_subcommand(&args) {
                        Some(sub) if GIT_READS.contains(&sub) && !writes_file => Access::Read,
                        Some(sub) => {
                            let path = vec!["git".to_owned(), sub.to_lowercase()];
                            write(command, false, vec![path])
                        }
                        None => write(command, false, Vec::new()),
                    }
                }
                "github" => {
                    let method = arguments["method"].as_str().unwrap_or("GET").to_uppercase();
                    let path = arguments["path"].as_str().unwrap_or_default();
                    if method == "GET" {
                        Access::Read
                    } else {
                        let words = vec!["github".to_owned(), method.to_lowercase()];
                        write(
                            format!("github {method} {path}"),
                            method == "DELETE",
                            vec![words],
                        )
                    }
                }
                // `file_write`, `python`, `powershell`: they change files or run code.
                _ => write(tool.to_owned(), false, Vec::new()),
            };
        }
        // A tool read by its name reads what its server lets it: an argument that names a path
        // outside its own files (`../../.cli-m365-tokens.json` to `m365_get_command_docs`)
        // makes it a read of any file of the server's host, so no read.
        let outside = names_a_path_outside(arguments);
        if self.read_tools.contains(tool) && !outside {
            return Access::Read;
        }
        let other_text = self.other_text(arguments);
        let lines = self.command_lines(arguments, !other_text.is_empty());
        if lines.is_empty() {
            // Without a command line, its name (chosen by the server, not the model).
            let verbs = words(tool);
            let denied = verbs.iter().any(|w| self.deny.contains(w));
            return if !denied && !outside && verbs.iter().any(|w| self.read.contains(w)) {
                Access::Read
            } else {
                write(tool.to_owned(), denied, Vec::new())
            };
        }
        // Each command's path decides; every command argument given counts.
        let judged = lines.iter().all(|(_, judged)| *judged);
        let line = lines
            .into_iter()
            .map(|(line, _)| line)
            .collect::<Vec<_>>()
            .join(" ; ");
        let commands = commands(&line);
        let denied = commands
            .iter()
            .flat_map(|c| c.path.iter().chain(&c.strays).chain(&c.values))
            .any(|w| words(w).iter().any(|w| self.deny.contains(w)));
        // A line with an empty command (`a ; ; b`, or one that ends with a separator, which a
        // server that appends options would run as a program of its own) is not plain either.
        let plain = judged
            && strictly_plain(&line)
            && split_commands(&line).iter().all(|c| !c.trim().is_empty());
        let reads = plain
            && !commands.is_empty()
            && commands.iter().all(|c| {
                c.strays.is_empty()
                    && !c.options.iter().any(|o| self.write_options.contains(o))
                    && c.path.first().is_some_and(|p| self.programs.contains(p))
                    && c.path.last().is_some_and(|verb| self.read.contains(verb))
            });
        if !denied && reads {
            return Access::Read;
        }
        // Allowlisted by its command path only when its program's options are understood
        // (`AGENT_COMMAND_PROGRAMS`): a shell tool's `git push --receive-pack=…` runs a
        // program whatever an entry `git push` meant (the `git` tool refuses that option).
        let understood = plain
            && commands.iter().all(|c| {
                c.strays.is_empty() && c.path.first().is_some_and(|p| self.programs.contains(p))
            });
        let paths = if understood {
            commands.iter().map(|c| words(&c.path.join(" "))).collect()
        } else {
            Vec::new()
        };
        Access::Write {
            command: format!("{tool} {line}"),
            denied,
            paths,
            other_text,
        }
    }

    /// Whether the operator allowlisted this write: its tool by name, or every command in it by
    /// its command path (an entry's words in a row at the start of the path, or right after its
    /// program: `spo list add` allows `m365 spo list add --title x`, `git push` the `git`
    /// tool's `push`; never a command that only mentions them further on or in an option).
    fn allowlisted(&self, tool: &str, paths: &[Vec<String>]) -> bool {
        let listed = |path: &[String]| {
            let after_program = path
                .first()
                .is_some_and(|p| self.programs.contains(p) || p == "git" || p == "github");
            self.allow.iter().any(|entry| {
                path.starts_with(entry) || (after_program && path[1..].starts_with(entry))
            })
        };
        self.allow_tools.contains(tool) || (!paths.is_empty() && paths.iter().all(|p| listed(p)))
    }

    /// Checks one call in `mode` (`None`: a run without a mode; its allowlist is the policy).
    /// `confirmed` holds the confirmation ids the user gave (`safeWrite`).
    pub fn check(
        &self,
        mode: Option<Mode>,
        call: Call<'_>,
        confirmed: &HashSet<String>,
    ) -> Decision {
        let Some(mode) = mode else {
            return Decision::Allow;
        };
        let (command, denied, paths, other_text) =
            match self.classify(call.tool, call.origin, call.arguments) {
                Access::Read => return Decision::Allow,
                Access::Write {
                    command,
                    denied,
                    paths,
                    other_text,
                } => (command, denied, paths, other_text),
            };
        let listed = self.allowlisted(call.tool, &paths);
        // Why the command's own words could not decide, when other arguments kept them from it.
        let because = |then: &str| {
            if other_text.is_empty() {
                return String::new();
            }
            let names: Vec<String> = other_text.iter().map(|n| format!("`{n}`")).collect();
            format!(
                " (the call also passes {}, which a server may add to the command it runs, so \
                 the command alone cannot be judged{then})",
                names.join(", ")
            )
        };
        match mode {
            Mode::ReadOnly => Decision::Block {
                reason: if denied {
                    format!(
                        "readOnly mode: `{command}` changes something (a denied verb); only reads run"
                    )
                } else {
                    format!(
                        "readOnly mode: `{command}` is not a read{}; only reads run",
                        because("")
                    )
                },
            },
            Mode::Default | Mode::SafeWrite if !listed => Decision::Block {
                reason: format!(
                    "{} mode: `{command}` is a write the operator has not allowlisted{}",
                    mode.as_str(),
                    because(": only an allowlist entry with the tool's exact name allows it")
                ),
            },
            Mode::Default => Decision::Allow,
            Mode::SafeWrite => {
                let key = confirmation_key(call.agent_id, call.tool, call.arguments);
                if confirmed.contains(&key) {
                    Decision::Allow
                } else {
                    Decision::Confirm {
                        id: short_id(&key).to_owned(),
                        key,
                        command,
                    }
                }
            }
        }
    }
}

/// The full key of one call: `c-` and the SHA-256 of the agent making it, the tool and its
/// arguments (keys in canonical order). A confirmation is bound to it, not to the short id the
/// user sees: a model that made two calls share a short id (48 bits, found by brute force in
/// seconds) cannot run the second on the first's confirmation, and a sub-agent's call is not
/// its parent's.
pub fn confirmation_key(agent_id: &str, tool: &str, arguments: &Value) -> String {
    // serde_json's map is ordered by key: the text is canonical.
    let digest = Sha256::digest(format!("{agent_id}\0{tool}\0{arguments}").as_bytes());
    format!("c-{}", hex::encode(digest))
}

/// The confirmation id the user sees and types: `c-` and the key's first 12 hex digits.
pub fn short_id(key: &str) -> &str {
    key.get(..14).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The executor's own tools by these names; any other name is an MCP server's.
    const OWN: [&str; 9] = [
        "file_read",
        "file_write",
        "python",
        "git",
        "github",
        "ask_user",
        "web_fetch",
        "agent_reviewer",
        "update_todolist",
    ];

    fn origin(tool: &str) -> Origin {
        if OWN.contains(&tool) {
            Origin::Executor
        } else {
            Origin::Mcp
        }
    }

    fn check(policy: &Policy, mode: Mode, tool: &str, args: Value) -> Decision {
        let call = Call {
            agent_id: "a",
            tool,
            origin: origin(tool),
            arguments: &args,
        };
        policy.check(Some(mode), call, &HashSet::new())
    }

    /// An MCP tool's call with `line` as its command.
    fn line(policy: &Policy, mode: Mode, tool: &str, line: &str) -> Decision {
        check(policy, mode, tool, json!({ "command": line }))
    }

    fn allowed(d: &Decision) -> bool {
        matches!(d, Decision::Allow)
    }

    #[test]
    fn read_only_runs_reads_and_refuses_every_deny_verb() {
        let p = Policy::default();
        for (tool, args) in [
            ("file_read", json!({"path": "x"})),
            ("git", json!({"args": ["--no-pager", "log", "-3"]})),
            ("github", json!({"method": "GET", "path": "/repos/a/b"})),
            ("m365", json!({"command": "m365 spo site list"})),
            ("get_current_time", json!({})),
            ("agent_reviewer", json!({"task": "t"})),
            ("m365_search_commands", json!({"query": "site"})),
            ("m365_run_command", json!({"command": "m365 spo site list"})),
        ] {
            assert!(allowed(&check(&p, Mode::ReadOnly, tool, args)), "{tool}");
        }
        for verb in [
            "remove", "delete", "set", "add", "grant", "revoke", "update", "create", "disable",
            "enable",
        ] {
            let d = check(
                &p,
                Mode::ReadOnly,
                "m365",
                json!({"command": format!("spo list {verb} --id 1")}),
            );
            assert!(
                matches!(&d, Decision::Block { reason } if reason.contains(verb)),
                "{verb}: {d:?}"
            );
        }
        // A read verb does not launder a deny verb.
        assert!(!allowed(&line(
            &p,
            Mode::ReadOnly,
            "m365",
            "spo list get; spo site remove"
        )));
        for (tool, args) in [
            ("file_write", json!({"path": "x", "content": ""})),
            ("python", json!({"code": "1"})),
            ("git", json!({"args": ["push"]})),
            (
                "github",
                json!({"method": "POST", "path": "/repos/a/b/issues"}),
            ),
            ("convert_time", json!({})),
        ] {
            assert!(!allowed(&check(&p, Mode::ReadOnly, tool, args)), "{tool}");
        }
    }

    #[test]
    fn a_command_is_judged_by_its_verb_never_by_its_option_values() {
        let p = Policy::default();
        let run = |command: &str| line(&p, Mode::ReadOnly, "m365_run_command", command);
        // Reads whose option values hold deny words.
        for command in [
            "m365 spo site get --url https://contoso.sharepoint.com/sites/add-ins",
            "m365 entra user list --displayName 'Set Remove'",
            "m365 spo site get --url x && m365 status",
        ] {
            assert!(allowed(&run(command)), "{command}");
        }
        // Writes whose option values hold read words, and writes hidden after a read.
        for command in [
            "m365 outlook mail send --to boss@contoso.com --subject 'Weekly status' --bodyContents 'hi'",
            "m365 teams message send --message list",
            "m365 spo site get --url x; m365 outlook mail send --to y",
            "m365 spo site get --url $(m365 spo site remove --url y)",
            "m365 spo site get | m365 spo file move",
            "'m365' spo site get",
            "   ",
        ] {
            assert!(
                matches!(run(command), Decision::Block { .. }),
                "{command:?}"
            );
        }
        let Decision::Block { reason } = run("m365 spo site get --url $(m365 spo site remove)")
        else {
            panic!("a hidden remove is blocked");
        };
        assert!(reason.contains("denied verb"), "{reason}");
    }

    #[test]
    fn read_only_sees_commands_hidden_after_options_and_lines_that_are_not_m365() {
        let p = Policy::default();
        let run = |tool: &str, command: &str| {
            check(&p, Mode::ReadOnly, tool, json!({ "command": command }))
        };
        for command in [
            // Not an m365 command at all.
            "rm list",
            "m365 spo site get; rm -rf list",
            // More of the command after an option: `spo list item remove`.
            "m365 spo list --output json item remove --listTitle Docs --id 1 --force",
            "m365 spo list --output json item move --id 1",
            // A deny verb as an unquoted option value.
            "m365 spo list get --force remove",
        ] {
            assert!(
                matches!(run("m365_run_command", command), Decision::Block { .. }),
                "{command}"
            );
        }
        let Decision::Block { reason } = run(
            "m365_run_command",
            "m365 spo list --output json item remove",
        ) else {
            panic!("blocked");
        };
        assert!(reason.contains("denied verb"), "{reason}");
        // Quoted values and values after options stay values.
        for command in [
            "m365 entra user list --displayName 'Set Remove list'",
            "m365 spo list list --webUrl https://contoso.sharepoint.com --output json",
            "m365 spo site get --url x --withPermissions",
        ] {
            assert!(allowed(&run("m365_run_command", command)), "{command}");
        }
        // git: `--output` writes a file, whatever the subcommand; global options and their
        // values are not the subcommand (audit F5: `-C log commit` commits).
        for args in [
            json!(["diff", "--output=notes.txt"]),
            json!(["log", "--output", "notes.txt"]),
            json!(["-C", "log", "commit", "--allow-empty", "-m", "x"]),
            json!(["-Clog", "commit"]),
            json!(["--no-pager", "-C", "status", "push"]),
        ] {
            assert!(
                !allowed(&check(&p, Mode::ReadOnly, "git", json!({ "args": args }))),
                "{args}"
            );
        }
        assert!(allowed(&check(
            &p,
            Mode::ReadOnly,
            "git",
            json!({"args": ["diff", "--stat"]})
        )));
        assert!(allowed(&check(
            &p,
            Mode::ReadOnly,
            "git",
            json!({"args": ["-C", "sub", "log", "-3"]})
        )));
    }

    #[test]
    fn an_allowlist_entry_matches_the_command_path_of_every_command() {
        let config = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "spo list add, git push".to_owned())
        });
        let p = Policy::new(&config);
        let run = |command: &str| line(&p, Mode::Default, "m365", command);
        assert!(allowed(&run("m365 spo list add --title Tasks")));
        assert!(allowed(&run(
            "m365 spo list add --title a && m365 spo list add --title b"
        )));
        for command in [
            "m365 outlook mail send --subject 'spo list add'",
            "m365 spo list add --title a; m365 spo site remove --url x",
            "m365 spo list add --title a item remove",
        ] {
            assert!(!allowed(&run(command)), "{command}");
        }
        assert!(allowed(&check(
            &p,
            Mode::Default,
            "git",
            json!({"args": ["push", "origin", "main"]})
        )));
        assert!(!allowed(&check(
            &p,
            Mode::Default,
            "git",
            json!({"args": ["commit", "-m", "git push"]})
        )));
        assert!(allowed(&check(
            &p,
            Mode::Default,
            "git",
            json!({"args": ["-C", "sub", "push", "origin"]})
        )));
        // A tool is allowlisted by its exact name: not `git_commit` by `git commit`.
        let p2 = Policy::new(&PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "file_write, git commit".to_owned())
        }));
        for tool in ["git_commit", "File.Write", "FILE_WRITE"] {
            let d = check(&p2, Mode::Default, tool, json!({"x": 1}));
            assert!(!allowed(&d), "{tool}");
        }
        // Only at the start of a path or right after its program: another program's command
        // that holds the words further on is not allowed (audit F6).
        // Nor a command whose program's options are not understood: `git push` is the git
        // tool's (which refuses `--receive-pack`), not a shell tool's (recheck F2).
        for command in [
            "touch pwned spo list add",
            "touch pwned git push",
            "rm spo list add",
            "git push origin",
            "git push --repo=x --receive-pack=touch --all",
        ] {
            let d = line(&p, Mode::Default, "exec_command", command);
            assert!(!allowed(&d), "{command}");
        }
    }

    #[test]
    fn default_runs_only_allowlisted_writes_and_read_only_ignores_the_allowlist() {
        let config = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "file_write, spo list add".to_owned())
        });
        let p = Policy::new(&config);
        let add = json!({"command": "m365 spo list add --title Tasks"});
        assert!(allowed(&check(&p, Mode::Default, "m365", add.clone())));
        assert!(allowed(&check(
            &p,
            Mode::Default,
            "file_write",
            json!({"path": "a"})
        )));
        assert!(!allowed(&line(
            &p,
            Mode::Default,
            "m365",
            "spo list remove"
        )));
        assert!(!allowed(&check(
            &p,
            Mode::Default,
            "python",
            json!({"code": "1"})
        )));
        assert!(!allowed(&check(&p, Mode::ReadOnly, "m365", add)));
    }

    #[test]
    fn safe_write_asks_for_a_confirmation_of_exactly_that_call() {
        let config = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "spo list add".to_owned())
        });
        let p = Policy::new(&config);
        let args = json!({"command": "m365 spo list add --title Tasks"});
        let Decision::Confirm { id, key, command } =
            check(&p, Mode::SafeWrite, "m365", args.clone())
        else {
            panic!("a confirmation is needed");
        };
        assert!(command.contains("spo list add --title Tasks"));
        // The user sees 12 hex digits; the grant is the whole key.
        assert_eq!((id.len(), key.len()), (14, 66));
        assert_eq!(short_id(&key), id);
        let call = Call {
            agent_id: "a",
            tool: "m365",
            origin: Origin::Mcp,
            arguments: &args,
        };
        let confirmed: HashSet<String> = [id].into();
        assert!(
            matches!(
                p.check(Some(Mode::SafeWrite), call, &confirmed),
                Decision::Confirm { .. }
            ),
            "the short id alone confirms nothing"
        );
        let confirmed: HashSet<String> = [key].into();
        assert_eq!(
            p.check(Some(Mode::SafeWrite), call, &confirmed),
            Decision::Allow
        );
        // The same call by another agent (a sub-agent) is another call.
        let sub = Call {
            agent_id: "sub",
            ..call
        };
        assert!(matches!(
            p.check(Some(Mode::SafeWrite), sub, &confirmed),
            Decision::Confirm { .. }
        ));
        let other = json!({"command": "m365 spo list add --title Other"});
        let call = Call {
            agent_id: "a",
            tool: "m365",
            origin: Origin::Mcp,
            arguments: &other,
        };
        assert!(matches!(
            p.check(Some(Mode::SafeWrite), call, &confirmed),
            Decision::Confirm { .. }
        ));
        assert!(!allowed(&check(
            &p,
            Mode::SafeWrite,
            "python",
            json!({"code": "1"})
        )));
    }

    #[test]
    fn without_a_mode_the_allowlist_is_the_policy() {
        let args = json!({"code": "1"});
        let call = Call {
            agent_id: "a",
            tool: "python",
            origin: Origin::Executor,
            arguments: &args,
        };
        assert_eq!(
            Policy::default().check(None, call, &HashSet::new()),
            Decision::Allow
        );
        assert_eq!(
            confirmation_key("a", "t", &json!({"b": 1, "a": 2})),
            confirmation_key("a", "t", &json!({"a": 2, "b": 1}))
        );
        assert_ne!(
            confirmation_key("a", "t", &json!({})),
            confirmation_key("b", "t", &json!({}))
        );
    }

    #[test]
    fn read_only_trusts_only_known_programs_and_the_executors_own_tools_by_name() {
        let p = Policy::default();
        // A tool read by its name, given a path outside its files, is no read (review H3).
        for docs in [
            "../../../../root/.cli-m365-tokens.json",
            "/etc/passwd",
            "~/.ssh/id_rsa",
            "C:\\Users\\x",
            "cmd/..\\..\\secret",
        ] {
            let args = json!({"commandName": "spo site list", "docs": docs});
            let d = check(&p, Mode::ReadOnly, "m365_get_command_docs", args);
            assert!(!allowed(&d), "{docs}");
            let d = check(&p, Mode::ReadOnly, "get_file", json!({"name": docs}));
            assert!(!allowed(&d), "{docs}");
        }
        let args = json!({"commandName": "spo site list", "docs": "spo/site/site-list.mdx"});
        assert!(allowed(&check(
            &p,
            Mode::ReadOnly,
            "m365_get_command_docs",
            args
        )));
        let args = json!({"timezone": "Europe/Lisbon"});
        assert!(allowed(&check(
            &p,
            Mode::ReadOnly,
            "get_current_time",
            args
        )));
        // Every command argument counts, not the first one present (F2).
        let decoy = json!({"command": "m365 status", "cmd": "touch pwned"});
        assert!(!allowed(&check(&p, Mode::ReadOnly, "run_shell", decoy)));
        // A list of words is judged as a line only when joining them gives back the same
        // words: a tool may run it without a shell (third recheck N1).
        let argv =
            json!({"command": ["m365", "spo", "list", "--query", "'", "remove", "--title", "'"]});
        assert!(!allowed(&check(&p, Mode::ReadOnly, "exec_argv", argv)));
        let argv = json!({"command": ["m365", "spo", "list", "--title", "a b"]});
        assert!(!allowed(&check(&p, Mode::ReadOnly, "exec_argv", argv)));
        let argv = json!({"command": ["m365", "spo", "site", "list", "--output", "json"]});
        assert!(allowed(&check(&p, Mode::ReadOnly, "exec_argv", argv)));
        // Other text a server may add to the line it runs, and command arguments that are no
        // text, leave a read unjudged (review M3); numbers and booleans are no text.
        for args in [
            json!({"command": "m365 spo list get --title x", "args": "; m365 spo site remove"}),
            json!({"command": "m365 spo site list", "args": ["--force"]}),
            json!({"command": "m365 spo site list", "env": {"M365_X": "1"}}),
            json!({"command": "m365 status", "commandLine": {"run": "touch pwned"}}),
            json!({"command": "m365 status", "cmd": 7}),
            json!({"command": ["m365", "spo", "site", "list", 7]}),
        ] {
            assert!(
                !allowed(&check(&p, Mode::ReadOnly, "run_shell", args.clone())),
                "{args}"
            );
            // Nor can an allowlist entry vouch for what it cannot see.
            let entry = PolicyConfig::from_lookup(|k| {
                (k == "AGENT_WRITE_ALLOWLIST").then(|| "spo list get,spo site list,status".into())
            });
            let d = check(
                &Policy::new(&entry),
                Mode::Default,
                "run_shell",
                args.clone(),
            );
            assert!(!allowed(&d), "{args}");
        }
        // Names count too: a server may make options of them (recheck F4).
        for args in [
            json!({"command": "m365 spo site list", "force; m365 spo site remove --url x": true}),
            json!({"command": "m365 spo site list", "asFile": true}),
        ] {
            assert!(
                !allowed(&check(&p, Mode::ReadOnly, "run_shell", args.clone())),
                "{args}"
            );
        }
        for args in [
            json!({"command": "m365 spo site list", "timeout": 30, "verbose": false}),
            json!({"command": "m365 spo site list", "cmd": null}),
        ] {
            assert!(
                allowed(&check(&p, Mode::ReadOnly, "run_shell", args.clone())),
                "{args}"
            );
        }
        // The refusal names what kept the command from being judged (recheck F3).
        let args = json!({"command": "m365 spo site list", "output": "json"});
        let Decision::Block { reason } = check(&p, Mode::ReadOnly, "run_shell", args) else {
            panic!("blocked");
        };
        assert!(reason.contains("also passes `output`"), "{reason}");
        assert!(!reason.contains("allowlist"), "{reason}");
        let entry = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "spo list add".into())
        });
        let args = json!({"command": "m365 spo list add --title x", "output": "json"});
        let Decision::Block { reason } = check(&Policy::new(&entry), Mode::Default, "x", args)
        else {
            panic!("blocked");
        };
        assert!(reason.contains("tool's exact name"), "{reason}");
        // An MCP tool is not trusted for a native or orchestration name (F3).
        for tool in [
            "agent_wipe",
            "file_read",
            "web_fetch",
            "ask_user",
            "update_todolist",
        ] {
            let call = Call {
                agent_id: "a",
                tool,
                origin: Origin::Mcp,
                arguments: &json!({"target": "everything"}),
            };
            assert!(
                !allowed(&p.check(Some(Mode::ReadOnly), call, &HashSet::new())),
                "{tool}"
            );
        }
        for (tool, command) in [
            // A shell tool's command whose last word is a read verb is no read (audit F1).
            ("exec_command", "touch pwned list"),
            ("exec_command", "mv important export"),
            ("exec_command", "bash deploy status"),
            ("exec_command", "git push origin show"),
            // Quotes and escapes reach the program as plain words (F4).
            (
                "m365_run_command",
                "m365 spo list --output json 'item' 'remove' --id 1",
            ),
            (
                "m365_run_command",
                "m365 spo list --output json \\item \\remove --id 1 --force",
            ),
            (
                "m365_run_command",
                "m365 spo list --output json \"item\" remove",
            ),
            (
                "m365_run_command",
                "m365 spo list --output json 'item remove'",
            ),
            // Options that take no value, a negative number as a value, and `--`, as the
            // CLI's parser reads them (recheck F1: `spo list roleinheritance break` ran).
            (
                "m365_run_command",
                "m365 spo list --no-verbose roleinheritance --no-verbose break --force",
            ),
            (
                "m365_run_command",
                "m365 spo list --query -1 roleinheritance --query -2 reset",
            ),
            (
                "m365_run_command",
                "m365 spo list --debug -- roleinheritance",
            ),
            ("m365_run_command", "m365 spo list - roleinheritance"),
            // Only lines every parser reads alike can be reads (second recheck): odd option
            // shapes, white space a shell does not split at, separators inside quotes,
            // expansions.
            (
                "m365_run_command",
                "m365 spo list -c1 roleinheritance -f1 break",
            ),
            ("m365_run_command", "m365 spo list -xy.z roleinheritance"),
            (
                "m365_run_command",
                "m365 spo list --query=@\u{a0}--x roleinheritance --y break",
            ),
            (
                "m365_run_command",
                "m365 spo list --query \"x; m365 spo list --webUrl \" remove",
            ),
            (
                "m365_run_command",
                "m365 spo list --query 'x| m365 todo list --output ' remove",
            ),
            ("m365_run_command", "m365 spo list --query {x,remove}"),
            ("m365_run_command", "m365 spo list --query x*"),
            (
                "m365_run_command",
                "m365 spo list --query \"$(m365 spo list remove)\"",
            ),
            ("m365_run_command", "m365 spo list --query 'unclosed"),
            ("m365_run_command", "m365 spo list\tremove"),
            // A value read from a file, an empty command, a trailing separator (third recheck).
            ("m365_run_command", "m365 spo list get --title @/etc/passwd"),
            (
                "m365_run_command",
                "m365 spo list get --title '@/etc/passwd'",
            ),
            ("m365_run_command", "m365 spo list get --title=@/etc/passwd"),
            ("m365_run_command", "m365 spo list get &&"),
            ("m365_run_command", "m365 spo list get ;; m365 status"),
            // A read verb that writes a local file; what PowerShell or cmd.exe read otherwise
            // (the review's H1, H2).
            (
                "m365_run_command",
                "m365 spo file get --webUrl https://x --id b2 --asFile --path /root/.bashrc",
            ),
            (
                "m365_run_command",
                "m365 flow export --name y --path=/etc/cron.d/x",
            ),
            (
                "run_pwsh",
                "m365 spo list --webUrl https://x/sites/a,roleinheritance,break --force",
            ),
            (
                "run_cmd",
                "m365 spo list --title 'a & m365 spo site remove --url x'",
            ),
            ("run_cmd", "m365 spo list --title %APPDATA%"),
        ] {
            let d = line(&p, Mode::ReadOnly, tool, command);
            assert!(!allowed(&d), "{command}");
        }
        // An operator may name more programs.
        let p = Policy::new(&PolicyConfig::from_lookup(|k| {
            (k == "AGENT_COMMAND_PROGRAMS").then(|| "m365,o365".to_owned())
        }));
        let d = line(&p, Mode::ReadOnly, "run", "o365 spo site list");
        assert!(allowed(&d));
    }
}
