//! The one policy check every tool call passes before it runs (seed 004 §3.3, §6.2, §9).
//!
//! A [`Policy`] is a value built once from configuration ([`PolicyConfig`], from the
//! environment) and carried by every run; a run's [`Mode`] (from the request, else none) picks
//! the rules:
//! - `readOnly`: only reads. A call reads when it is a read-only native tool, or when its
//!   command reads: an MCP tool's command line reads when the verb of every command in it (the
//!   last word of its command path, the words before its first option: `get` in
//!   `m365 spo site get --url …`) is a read verb (`get|list|show|status|export`) and no word of
//!   the path is a deny verb (`remove|delete|set|add|grant|revoke|update|create|disable|enable`);
//!   option values never count, so `--subject "weekly status"` does not make a `send` a read and
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
        /// Stable for the same tool and arguments.
        id: String,
        /// The call as the user should see it.
        command: String,
    },
}

/// The call being checked.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The agent making it.
    pub agent_id: &'a str,
    /// The tool.
    pub tool: &'a str,
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
    /// (`spo list get`, matched word by word, case-insensitively).
    pub write_allowlist: Vec<String>,
    /// Argument names that hold an MCP tool's command line.
    pub command_arguments: Vec<String>,
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
            // The CLI for Microsoft 365 MCP server's tools that look commands up.
            read_tools: words("m365_search_commands|m365_get_command_docs|m365_get_best_practices"),
        }
    }
}

impl PolicyConfig {
    /// The defaults, overridden by `AGENT_READ_VERBS`, `AGENT_DENY_VERBS` (`|` or `,`
    /// separated), `AGENT_WRITE_ALLOWLIST` (`,` separated), `AGENT_COMMAND_ARGUMENTS` and
    /// `AGENT_READ_TOOLS`.
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
    /// A write; `denied` when a deny verb names it; `understood` unless it is an MCP command
    /// line with strays (then only its tool's name can allowlist it).
    Write {
        command: String,
        denied: bool,
        understood: bool,
    },
}

/// The policy every run carries.
#[derive(Debug, Clone)]
pub struct Policy {
    read: HashSet<String>,
    deny: HashSet<String>,
    /// Lower-case allowlist entries, split into words.
    allow: Vec<Vec<String>>,
    command_arguments: Vec<String>,
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

/// A word of a command path: a letter, then letters, digits, `-` or `_` (`spo`, `m365`,
/// `app-setup-policy`). Anything else (an option, a quoted value, a URL) ends the path.
fn is_path_word(token: &str) -> bool {
    let mut chars = token.chars();
    chars.next().is_some_and(char::is_alphabetic)
        && chars.all(|c| c.is_alphanumeric() || c == '-' || c == '_')
}

/// One command of a command line, lower-cased: its *path*, the plain words before its first
/// other token (`m365 spo site get` in `m365 spo site get --url x`), and its *strays*, plain
/// unquoted words after the options that are not an option's value (`item remove` in
/// `m365 spo list --output json item remove`): words a command-line parser may read as more
/// of the command, so a command with strays is never taken for a read.
#[derive(Debug, Default, PartialEq)]
struct Command {
    path: Vec<String>,
    strays: Vec<String>,
    /// Unquoted plain words in option values (`remove` in `--force remove`).
    values: Vec<String>,
}

/// The commands of a command line (`m365 spo site get --url x; m365 status` gives two). A
/// command that starts with something else (a quote, a path, a variable) has an empty path.
fn commands(line: &str) -> Vec<Command> {
    line.split(separates_commands)
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
            let mut after_option = false;
            for (token, quoted) in tokens {
                let option = !quoted && token.starts_with('-');
                let plain = !quoted && is_path_word(&token);
                if plain && after_option {
                    out.values.push(token.to_lowercase());
                } else if plain {
                    out.strays.push(token.to_lowercase());
                }
                after_option = option && !token.contains('=');
            }
            out
        })
        .collect()
}

/// A command's tokens split at white space outside quotes, each with whether any of it was
/// quoted (`'Set Remove'` is one quoted token).
fn shell_words(command: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let (mut token, mut quoted, mut quote) = (String::new(), false, None);
    for c in command.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => token.push(c),
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

/// The program a tool's command lines must start with to be judged by their verbs (the CLI
/// for Microsoft 365 server runs `m365` commands: `rm list` is not one).
fn program_of(tool: &str) -> Option<&'static str> {
    (tool == "m365_run_command").then_some("m365")
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
            command_arguments: config.command_arguments.clone(),
            read_tools: config.read_tools.iter().cloned().collect(),
        }
    }

    /// The command line a call carries in one of its command arguments.
    fn command_of(&self, arguments: &Value) -> Option<String> {
        self.command_arguments
            .iter()
            .find_map(|name| match &arguments[name.as_str()] {
                Value::String(s) => Some(s.clone()),
                Value::Array(parts) => Some(
                    parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => None,
            })
    }

    fn classify(&self, tool: &str, arguments: &Value) -> Access {
        if NATIVE_READS.contains(&tool)
            || self.read_tools.contains(tool)
            || ORCHESTRATION.contains(&tool)
            || tool.starts_with(crate::tools::orchestration::AGENT_TOOL_PREFIX)
        {
            return Access::Read;
        }
        let write = |command: String, denied: bool| Access::Write {
            command,
            denied,
            understood: true,
        };
        match tool {
            "git" => {
                let args: Vec<&str> = arguments["args"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let command = format!("git {}", args.join(" "));
                // The first word that is not an option is the subcommand; `--output` makes
                // `diff`, `log` and `show` write a file.
                let writes_file = args
                    .iter()
                    .any(|a| *a == "--output" || a.starts_with("--output="));
                match args.iter().find(|a| !a.starts_with('-')) {
                    Some(sub) if GIT_READS.contains(sub) && !writes_file => Access::Read,
                    _ => write(command, false),
                }
            }
            "github" => {
                let method = arguments["method"].as_str().unwrap_or("GET").to_uppercase();
                let path = arguments["path"].as_str().unwrap_or_default();
                if method == "GET" {
                    Access::Read
                } else {
                    write(format!("github {method} {path}"), method == "DELETE")
                }
            }
            "file_write" | "python" | "powershell" => write(tool.to_owned(), false),
            _ => match self.command_of(arguments) {
                // An MCP tool with a command line: each command's path decides.
                Some(line) => {
                    let commands = commands(&line);
                    let denied = commands
                        .iter()
                        .flat_map(|c| c.path.iter().chain(&c.strays).chain(&c.values))
                        .any(|w| words(w).iter().any(|w| self.deny.contains(w)));
                    let program = program_of(tool);
                    let reads = !commands.is_empty()
                        && commands.iter().all(|c| {
                            c.strays.is_empty()
                                && program.is_none_or(|p| c.path.first().is_some_and(|w| w == p))
                                && c.path.last().is_some_and(|verb| self.read.contains(verb))
                        });
                    if !denied && reads {
                        Access::Read
                    } else {
                        Access::Write {
                            command: format!("{tool} {line}"),
                            denied,
                            understood: commands.iter().all(|c| c.strays.is_empty()),
                        }
                    }
                }
                // Without one, its name (chosen by the server, not the model).
                None => {
                    let verbs = words(tool);
                    let denied = verbs.iter().any(|w| self.deny.contains(w));
                    if !denied && verbs.iter().any(|w| self.read.contains(w)) {
                        Access::Read
                    } else {
                        write(tool.to_owned(), denied)
                    }
                }
            },
        }
    }

    /// Whether the operator allowlisted this write: its tool by name, or every command in it by
    /// its command path (an entry's words in a row in the path: `spo list add` allows
    /// `m365 spo list add --title x`, never a command that only mentions them in an option).
    /// A command that is not `understood` (see [`Access::Write`]) is allowlisted only by its
    /// tool's name.
    fn allowlisted(&self, tool: &str, command: &str, understood: bool) -> bool {
        let tool = words(tool);
        if !understood {
            return self.allow.contains(&tool);
        }
        let paths: Vec<Vec<String>> = commands(command)
            .iter()
            .map(|c| words(&c.path.join(" ")))
            .collect();
        let listed = |path: &[String]| {
            self.allow
                .iter()
                .any(|entry| path.windows(entry.len()).any(|w| w == entry.as_slice()))
        };
        self.allow.contains(&tool) || (!paths.is_empty() && paths.iter().all(|p| listed(p)))
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
        let (command, denied, understood) = match self.classify(call.tool, call.arguments) {
            Access::Read => return Decision::Allow,
            Access::Write {
                command,
                denied,
                understood,
            } => (command, denied, understood),
        };
        let listed = self.allowlisted(call.tool, &command, understood);
        match mode {
            Mode::ReadOnly => Decision::Block {
                reason: if denied {
                    format!(
                        "readOnly mode: `{command}` changes something (a denied verb); only reads run"
                    )
                } else {
                    format!("readOnly mode: `{command}` is not a read; only reads run")
                },
            },
            Mode::Default | Mode::SafeWrite if !listed => Decision::Block {
                reason: format!(
                    "{} mode: `{command}` is a write the operator has not allowlisted",
                    mode.as_str()
                ),
            },
            Mode::Default => Decision::Allow,
            Mode::SafeWrite => {
                let id = confirmation_id(call.tool, call.arguments);
                if confirmed.contains(&id) {
                    Decision::Allow
                } else {
                    Decision::Confirm { id, command }
                }
            }
        }
    }
}

/// A stable id of one call (tool and arguments, keys in canonical order).
pub fn confirmation_id(tool: &str, arguments: &Value) -> String {
    // serde_json's map is ordered by key: the text is canonical.
    let digest = Sha256::digest(format!("{tool}\0{arguments}").as_bytes());
    format!("c-{}", &hex::encode(digest)[..12])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(policy: &Policy, mode: Mode, tool: &str, args: Value) -> Decision {
        let call = Call {
            agent_id: "a",
            tool,
            arguments: &args,
        };
        policy.check(Some(mode), call, &HashSet::new())
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
            ("m365", json!({"command": "spo site list"})),
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
        assert!(!allowed(&check(
            &p,
            Mode::ReadOnly,
            "m365",
            json!({"command": "spo list get; spo site remove"})
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
        let run = |command: &str| {
            check(
                &p,
                Mode::ReadOnly,
                "m365_run_command",
                json!({ "command": command }),
            )
        };
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
        // git: `--output` writes a file, whatever the subcommand.
        for args in [
            json!(["diff", "--output=notes.txt"]),
            json!(["log", "--output", "notes.txt"]),
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
    }

    #[test]
    fn an_allowlist_entry_matches_the_command_path_of_every_command() {
        let config = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "spo list add, git push".to_owned())
        });
        let p = Policy::new(&config);
        let run = |command: &str| check(&p, Mode::Default, "m365", json!({ "command": command }));
        assert!(allowed(&run("m365 spo list add --title Tasks")));
        assert!(allowed(&run(
            "spo list add --title a && spo list add --title b"
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
    }

    #[test]
    fn default_runs_only_allowlisted_writes_and_read_only_ignores_the_allowlist() {
        let config = PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "file_write, spo list add".to_owned())
        });
        let p = Policy::new(&config);
        let add = json!({"command": "spo list add --title Tasks"});
        assert!(allowed(&check(&p, Mode::Default, "m365", add.clone())));
        assert!(allowed(&check(
            &p,
            Mode::Default,
            "file_write",
            json!({"path": "a"})
        )));
        assert!(!allowed(&check(
            &p,
            Mode::Default,
            "m365",
            json!({"command": "spo list remove"})
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
        let args = json!({"command": "spo list add --title Tasks"});
        let Decision::Confirm { id, command } = check(&p, Mode::SafeWrite, "m365", args.clone())
        else {
            panic!("a confirmation is needed");
        };
        assert!(command.contains("spo list add --title Tasks"));
        let call = Call {
            agent_id: "a",
            tool: "m365",
            arguments: &args,
        };
        let confirmed: HashSet<String> = [id].into();
        assert_eq!(
            p.check(Some(Mode::SafeWrite), call, &confirmed),
            Decision::Allow
        );
        let other = json!({"command": "spo list add --title Other"});
        let call = Call {
            agent_id: "a",
            tool: "m365",
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
            arguments: &args,
        };
        assert_eq!(
            Policy::default().check(None, call, &HashSet::new()),
            Decision::Allow
        );
        assert_eq!(
            confirmation_id("t", &json!({"b": 1, "a": 2})),
            confirmation_id("t", &json!({"a": 2, "b": 1}))
        );
    }
}
