//! Human-readable views of agents, tools and sessions (the gateway's JSON shapes).

use std::{fmt::Write as _, io::Write};

use serde_json::Value;

/// Longest description shown in a table cell.
const DESCRIPTION_WIDTH: usize = 60;

/// `value` as text: strings as they are (but see [`printable`]), `null` as empty, anything else
/// as compact JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => printable(s),
        other => other.to_string(),
    }
}

/// `s` safe for a terminal: control characters other than line breaks and tabs are shown as
/// escapes (`\u{1b}`), so text from an agent's author or a model (names, answers) cannot move
/// the cursor, set the title or clear the screen of whoever reads it; nor can bidirectional
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069) make a text read as another. A CR
/// ending a line (CRLF, as in a file or tool output quoted from Windows, or at the end of a
/// streamed piece) is a line end, not an escape on every line.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let line_end = c == '\r' && matches!(chars.peek(), Some('\n') | None);
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if line_end {
            continue;
        }
        if (c.is_control() && !matches!(c, '\n' | '\t')) || bidi {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// A list of strings as `a, b, c` (`-` when empty).
fn list(value: &Value) -> String {
    let items: Vec<String> = value
        .as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default();
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join(", ")
    }
}

/// The first line of `s`, cut to `width` characters (with `…` when cut).
pub fn clip(s: &str, width: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    let cut = line.chars().count() > width || s.lines().nth(1).is_some();
    if line.chars().count() > width {
        let mut out: String = line.chars().take(width.saturating_sub(1)).collect();
        out.push('…');
        out
    } else if cut {
        format!("{line} …")
    } else {
        line.to_owned()
    }
}

/// Rows under a header, each column as wide as its widest cell; the last column is not padded.
pub fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// `agents list`: id, source, status, name, description.
pub fn agents(out: &mut impl Write, list: &Value) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = list["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let name = if a["source"] == "profile" {
                text(&a["profile"])
            } else {
                text(&a["name"])
            };
            vec![
                text(&a["agent_id"]),
                text(&a["source"]),
                text(&a["status"]),
                name,
                clip(&text(&a["description"]), DESCRIPTION_WIDTH),
            ]
        })
        .collect();
    if rows.is_empty() {
        return writeln!(out, "no agents");
    }
    table(
        out,
        &["ID", "SOURCE", "STATUS", "NAME", "DESCRIPTION"],
        &rows,
    )
}

/// `sessions list`: one row per session (a paused one shows its question, others their
/// mission), and how to go on when there is more.
pub fn sessions(out: &mut impl Write, list: &Value) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = list["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let about = match s["question"]["question"].as_str() {
                Some(q) => format!("asks: {q}"),
                None => text(&s["mission"]),
            };
            vec![
                text(&s["session_id"]),
                text(&s["agent_id"]),
                text(&s["status"]),
                text(&s["updated_at"]),
                clip(&about, DESCRIPTION_WIDTH),
            ]
        })
        .collect();
    if rows.is_empty() {
        writeln!(out, "no sessions")?;
    } else {
        table(
            out,
            &["ID", "AGENT", "STATUS", "UPDATED", "MISSION OR QUESTION"],
            &rows,
        )?;
    }
    match list["next_page_token"].as_str() {
        Some(token) => writeln!(out, "more: --page-token {token}"),
        None => Ok(()),
    }
}

/// `agents show`: the definition, field by field, the system prompt last.
pub fn agent(out: &mut impl Write, a: &Value) -> std::io::Result<()> {
    let mut fields: Vec<(&str, String)> = vec![
        ("id", text(&a["agent_id"])),
        ("source", text(&a["source"])),
        ("status", text(&a["status"])),
    ];
    if a["source"] == "profile" {
        fields.extend([
            ("profile", text(&a["profile"])),
            ("description", text(&a["description"])),
            ("specialist", text(&a["specialist"])),
            (
                "tools",
                list(&Value::Array(
                    a["tools_config"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| t["type"].clone())
                        .collect(),
                )),
            ),
            ("mcp servers", mcp_servers(&a["mcp_servers"])),
            ("model", text(&a["llm"]["default_model"])),
        ]);
    } else {
        fields.extend([
            ("name", text(&a["name"])),
            ("description", text(&a["description"])),
            ("tools", list(&a["tool_allowlist"])),
            ("mcp servers", mcp_servers(&a["mcp_servers"])),
            ("mcp tools", list(&a["mcp_tool_allowlist"])),
            ("subagents", list(&a["subagents"])),
            ("model", text(&a["model"])),
            ("mode", text(&a["mode"])),
            ("role", text(&a["role"])),
            ("project", text(&a["project"])),
            ("workspace", text(&a["workspace"])),
            ("created", text(&a["created_at"])),
            ("updated", text(&a["updated_at"])),
        ]);
    }
    fields.extend([
        ("version", text(&a["version"])),
        ("last task", text(&a["last_task"])),
    ]);
    for (key, value) in &fields {
        if !value.is_empty() {
            writeln!(out, "{:<13}{value}", format!("{key}:"))?;
        }
    }
    if let Some(prompt) = a["system_prompt"].as_str() {
        writeln!(out, "system prompt:")?;
        for line in prompt.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// MCP servers, one short description each.
fn mcp_servers(servers: &Value) -> String {
    let items: Vec<String> = servers
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let what = match s["type"].as_str().unwrap_or_default() {
                "stdio" => {
                    let mut cmd = text(&s["command"]);
                    for arg in s["args"].as_array().into_iter().flatten() {
                        cmd.push(' ');
                        cmd.push_str(&text(arg));
                    }
                    cmd
                }
                "global" => text(&s["name"]),
                _ => text(&s["url"]),
            };
            format!("{} {what}", text(&s["type"]))
        })
        .collect();
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join("; ")
    }
}

/// `agents validate`: `valid: ID`, the tools found on its MCP servers, and what the check
/// could not settle (an MCP server it could not start, an id a create would find taken).
pub fn validation(out: &mut impl Write, id: &str, checked: &Value) -> std::io::Result<()> {
    writeln!(out, "valid: {}", printable(id))?;
    writeln!(
        out,
        "discovered MCP tools: {}",
        list(&checked["discovered_mcp_tools"])
    )?;
    for warning in checked["warnings"].as_array().into_iter().flatten() {
        writeln!(out, "warning: {}", text(warning))?;
    }
    Ok(())
}

/// `tools`: name, origin, risk, approval, availability, description.
pub fn tools(out: &mut impl Write, catalog: &Value) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = catalog["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let origin = match t["mcp_server_id"].as_str() {
                Some(server) if !server.is_empty() => format!("mcp:{server}"),
                _ => text(&t["origin"]),
            };
            vec![
                text(&t["name"]),
                origin,
                text(&t["approval_risk_level"]),
                yes_no(&t["requires_approval"]),
                yes_no(&t["available"]),
                clip(&text(&t["description"]), DESCRIPTION_WIDTH),
            ]
        })
        .collect();
    table(
        out,
        &[
            "NAME",
            "ORIGIN",
            "RISK",
            "APPROVAL",
            "AVAILABLE",
            "DESCRIPTION",
        ],
        &rows,
    )
}

fn yes_no(v: &Value) -> String {
    if v.as_bool().unwrap_or(false) {
        "yes".to_owned()
    } else {
        "no".to_owned()
    }
}

/// `sessions show`: where the session stands, its question or final answer, its plan.
pub fn session(out: &mut impl Write, s: &Value) -> std::io::Result<()> {
    let fields = [
        ("session", text(&s["session_id"])),
        ("agent", text(&s["agent_id"])),
        ("status", text(&s["status"])),
        ("model", text(&s["model"])),
        ("mission", text(&s["mission"])),
        ("created", text(&s["created_at"])),
        ("updated", text(&s["updated_at"])),
        ("messages", text(&s["messages"])),
        ("events", text(&s["events"])),
    ];
    for (key, value) in &fields {
        if !value.is_empty() {
            writeln!(out, "{:<10}{value}", format!("{key}:"))?;
        }
    }
    if let Some(e) = s["error"].as_object() {
        writeln!(
            out,
            "{:<10}{}: {}",
            "error:",
            text(&e["code"]),
            text(&e["message"])
        )?;
    }
    if let Some(q) = s["question"].as_object() {
        writeln!(out, "question ({}):", text(&q["call_id"]))?;
        let items = q["items"].as_array().filter(|i| !i.is_empty());
        // With items, the question's text lists them too: its first line, then the items.
        let question = text(&q["question"]);
        let lines = question
            .lines()
            .take(if items.is_some() { 1 } else { usize::MAX });
        for line in lines {
            writeln!(out, "  {line}")?;
        }
        for item in items.into_iter().flatten() {
            writeln!(
                out,
                "  - {}: {} (default: {})",
                text(&item["key"]),
                text(&item["text"]),
                item["default"]
            )?;
        }
    }
    if let Some(answer) = s["final_answer"].as_str().map(printable) {
        writeln!(out, "final answer:")?;
        for line in answer.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    let tasks = s["plan"]["tasks"].as_array().map_or(0, Vec::len);
    if tasks > 0
        && let Some(markdown) = s["plan"]["markdown"].as_str().map(printable)
    {
        writeln!(out, "plan:")?;
        for line in markdown.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn render(f: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut buf = Vec::new();
        f(&mut buf).expect("writes to memory");
        String::from_utf8(buf).expect("UTF-8")
    }

    #[test]
    fn a_validation_names_the_agent_its_mcp_tools_and_warnings() {
        let checked = json!({"valid": true, "discovered_mcp_tools": ["get_current_time"],
                             "warnings": ["agent_id x-y-z is taken: a create would be a 409"]});
        assert_eq!(
            render(|out| validation(out, "x-y-z", &checked)),
            "valid: x-y-z\ndiscovered MCP tools: get_current_time\n\
             warning: agent_id x-y-z is taken: a create would be a 409\n"
        );
        let bare = json!({"valid": true, "discovered_mcp_tools": [], "warnings": []});
        assert_eq!(
            render(|out| validation(out, "a\u{1b}b", &bare)),
            "valid: a\\u{1b}b\ndiscovered MCP tools: -\n"
        );
    }

    #[test]
    fn control_characters_are_shown_not_sent_to_the_terminal() {
        let evil = serde_json::json!("Evil\u{1b}]0;pwned\u{7}\r\nnext\tcol");
        assert_eq!(text(&evil), "Evil\\u{1b}]0;pwned\\u{7}\nnext\tcol");
        assert_eq!(printable("plain é"), "plain é");
        // A CR ending a line (or a streamed piece) is a line end; one inside a line is shown.
        assert_eq!(printable("a\r\nb\r"), "a\nb");
        assert_eq!(printable("over\rwrite"), "over\\u{d}write");
        // A right-to-left override would make `exe.txt` read as `txt.exe`.
        assert_eq!(printable("file\u{202e}txt.exe"), "file\\u{202e}txt.exe");
    }

    #[test]
    fn clipping_keeps_whole_characters_and_marks_the_cut() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("ääääää", 4), "äää…");
        assert_eq!(clip("one\ntwo", 10), "one …");
    }

    #[test]
    fn the_agent_table_aligns_columns() {
        let list = json!({"agents": [
            {"source": "profile", "agent_id": "dev", "profile": "dev", "status": "idle",
             "description": "Generic profile"},
            {"source": "custom", "agent_id": "invoice-extractor", "name": "Invoice Extractor",
             "status": "busy", "description": "Extracts fields."}]});
        assert_eq!(
            render(|b| agents(b, &list)),
            "ID                 SOURCE   STATUS  NAME               DESCRIPTION\n\
             dev                profile  idle    dev                Generic profile\n\
             invoice-extractor  custom   busy    Invoice Extractor  Extracts fields.\n"
        );
        assert_eq!(render(|b| agents(b, &json!({"agents": []}))), "no agents\n");
    }

    #[test]
    fn an_agent_shows_its_tools_and_prompt() {
        let a = json!({"source": "custom", "agent_id": "notes", "name": "Notes",
            "description": "Reads notes.", "system_prompt": "Be brief.\nVery.",
            "tool_allowlist": ["file_read", "ask_user"], "mcp_servers": [
                {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]}],
            "mcp_tool_allowlist": [], "status": "idle", "version": "v1", "last_task": null});
        let text = render(|b| agent(b, &a));
        assert!(
            text.contains("tools:       file_read, ask_user\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp servers: stdio uvx mcp-server-time\n"),
            "{text}"
        );
        assert!(
            text.ends_with("system prompt:\n  Be brief.\n  Very.\n"),
            "{text}"
        );
        assert!(!text.contains("last task"), "{text}");
    }

    #[test]
    fn a_sessions_answer_and_plan_reach_the_terminal_without_control_characters() {
        let s = json!({"session_id": "s", "agent_id": "a", "status": "completed",
            "final_answer": "done\u{1b}[2J\nnext", "messages": 3, "events": 5,
            "plan": {"version": 2, "tasks": [{"id": "t1"}],
                "markdown": "- [x] t1 \u{1b}]0;owned\u{7}"}});
        let text = render(|b| session(b, &s));
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("  done\\u{1b}[2J\n  next\n"), "{text}");
        assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{text}");
    }

    #[test]
    fn a_paused_session_shows_its_question() {
        let s = json!({"session_id": "s", "agent_id": "asker", "status": "paused",
            "mission": "Total it", "messages": 3, "events": 5,
            "question": {"call_id": "c1", "question": "Which currency?", "items": []},
            "plan": {"version": 1, "tasks": [], "markdown": ""}});
        let text = render(|b| session(b, &s));
        assert!(text.contains("status:   paused\n"), "{text}");
        assert!(
            text.ends_with("question (c1):\n  Which currency?\n"),
            "{text}"
        );
    }

    #[test]
    fn sub_agents_questions_are_listed_once_and_an_ended_run_says_why() {
        let s = json!({"session_id": "s", "agent_id": "boss", "status": "paused",
            "mission": "Ship", "messages": 3, "events": 5,
            "question": {"call_id": "n1", "question": "A sub-agent needs an answer:\n- w.v (w): Version?",
                "items": [{"key": "w.v", "text": "Version?", "default": "1.0"}]},
            "plan": {"version": 1, "tasks": [], "markdown": ""}});
        let text = render(|b| session(b, &s));
        assert!(
            text.ends_with(
                "question (n1):\n  A sub-agent needs an answer:\n  - w.v: Version? (default: \"1.0\")\n"
            ),
            "{text}"
        );
        let s = json!({"session_id": "s", "agent_id": "a", "status": "failed",
            "mission": "m", "messages": 3, "events": 5,
            "error": {"code": "TIME_BUDGET_EXCEEDED", "message": "the run did not finish within its 5s budget"},
            "plan": {"version": 1, "tasks": [], "markdown": ""}});
        let text = render(|b| session(b, &s));
        assert!(
            text.contains(
                "error:    TIME_BUDGET_EXCEEDED: the run did not finish within its 5s budget\n"
            ),
            "{text}"
        );
    }
}
