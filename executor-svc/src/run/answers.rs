//! Questions that wait for the user, and the answers that continue them (seed 003 §6).
//!
//! A frame pauses on its own `ask_user` or on sub-agents that need input; all its open
//! questions become one [`Pending`] with keyed [`Ask`]s. Answers come back by key and are
//! [`split`]: an own question's answer becomes its call's result, and a sub-agent whose
//! required questions are all answered is resumed with a call of its tool carrying
//! `resume_token` and `answers`. What is still missing is asked again. Pure: no I/O.

use serde_json::{Map, Value, json};

use crate::{
    llm::ToolCall,
    session::{Ask, Pending},
};

/// Tool name of a consolidated question of sub-agents.
pub const NEED_USER_INPUT: &str = "need_user_input";

/// What answers do to a frame's pending questions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    /// Results of the frame's own `ask_user` calls: `(call_id, tool, answer)`.
    pub results: Vec<(String, String, String)>,
    /// Calls that resume sub-agents whose questions are all answered.
    pub calls: Vec<ToolCall>,
    /// Questions still open (with the answers already given recorded).
    pub still: Vec<Ask>,
}

/// The pending question of a frame whose calls asked `asks` (at least one). A key asked twice
/// (two delegations to one sub-agent) is made unique, so each question has its own answer.
pub fn pending(mut asks: Vec<Ask>) -> Pending {
    unique_keys(&mut asks);
    if let [ask] = asks.as_slice()
        && ask.token.is_none()
    {
        return Pending {
            call_id: ask.call_id.clone(),
            tool: ask.tool.clone(),
            question: ask.text.clone(),
            asks,
        };
    }
    Pending {
        call_id: format!("{NEED_USER_INPUT}-{}", short_id()),
        tool: NEED_USER_INPUT.to_owned(),
        question: consolidated(&asks),
        asks,
    }
}

/// Renames every ask whose key an earlier one has (`asker.port` → `asker.port.2`), keeping the
/// key its frame knows in [`Ask::asked_as`].
fn unique_keys(asks: &mut [Ask]) {
    for i in 1..asks.len() {
        if !asks[..i].iter().any(|a| a.key == asks[i].key) {
            continue;
        }
        // Past every key in use, also those still to come: a later `asker.port.2` keeps its own.
        let base = asks[i].key.clone();
        let Some(key) = (2..)
            .map(|n| format!("{base}.{n}"))
            .find(|k| !asks.iter().any(|a| &a.key == k))
        else {
            continue;
        };
        asks[i].key = key;
        asks[i].asked_as.get_or_insert(base);
    }
}

/// A fresh id, 12 hex digits.
pub fn short_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    id[..12].to_owned()
}

/// One text with every open question and how to answer.
fn consolidated(asks: &[Ask]) -> String {
    let open: Vec<&Ask> = asks.iter().filter(|a| a.answer.is_none()).collect();
    let mut text = if open.len() == 1 {
        "A sub-agent needs an answer:".to_owned()
    } else {
        "Your sub-agents need answers (reply with a JSON object by key, or one `key: value` \
         line each):"
            .to_owned()
    };
    for ask in open {
        text.push_str(&format!(
            "\n- {} ({}): {}",
            ask.key,
            ask.agent_path.join(" › "),
            ask.text
        ));
        if let Some(default) = &ask.default {
            text.push_str(&format!(" [default: {}]", as_text(default)));
        }
        if !ask.required {
            text.push_str(" (optional)");
        }
    }
    text
}

/// A value as the text a tool result or a model reads.
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The answers in a free-text reply to `pending`: a JSON object by key, `key: value` lines, or
/// (with one question open) the whole text. `Err` says how to answer.
pub fn parse_reply(pending: &Pending, reply: &str) -> Result<Map<String, Value>, String> {
    let reply = reply.trim();
    if reply.starts_with('{') {
        return match serde_json::from_str::<Value>(reply) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err("the answer starts with `{` but is not a JSON object".to_owned()),
        };
    }
    let open: Vec<&Ask> = pending.asks.iter().filter(|a| a.answer.is_none()).collect();
    let mut map = Map::new();
    // `key: value` lines; once one names an open question's key, a line naming no key goes on
    // the value before it, and one that looks like a key but is none is refused (a typo must
    // not drop an answer without a word).
    let mut last: Option<String> = None;
    for line in reply.lines() {
        let keyed = line
            .split_once(':')
            .or_else(|| line.split_once('='))
            .map(|(k, v)| (k.trim().trim_start_matches('-').trim(), v.trim()));
        match keyed {
            Some((key, value)) if pending.asks.iter().any(|a| a.key == key) => {
                map.insert(key.to_owned(), Value::String(value.to_owned()));
                last = Some(key.to_owned());
            }
            Some((key, _)) if last.is_some() && looks_like_key(key) => {
                return Err(format!(
                    "unknown answer key {key}; the open questions are: {}",
                    keys(pending)
                ));
            }
            _ => {
                if let Some(Value::String(value)) = last.as_ref().and_then(|k| map.get_mut(k)) {
                    value.push('\n');
                    value.push_str(line.trim_end());
                }
            }
        }
    }
    if !map.is_empty() {
        for value in map.values_mut() {
            if let Value::String(text) = value {
                text.truncate(text.trim_end().len());
            }
        }
        return Ok(map);
    }
    if let Some(key) = reply
        .lines()
        .filter_map(|l| l.split_once(':').or_else(|| l.split_once('=')))
        .map(|(k, _)| k.trim().trim_start_matches('-').trim())
        .find(|k| looks_like_key(k))
        && open.len() > 1
    {
        return Err(format!(
            "unknown answer key {key}; the open questions are: {}",
            keys(pending)
        ));
    }
    if let [only] = open.as_slice() {
        map.insert(only.key.clone(), Value::String(reply.to_owned()));
        return Ok(map);
    }
    Err(format!(
        "several questions are open: answer with a JSON object (or `answers`) by key: {}",
        keys(pending)
    ))
}

/// Whether `text` has the shape of a question key (`agent.key`: a word, a dot, more words).
fn looks_like_key(text: &str) -> bool {
    let word = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    };
    text.split_once('.')
        .is_some_and(|(agent, rest)| word(agent) && rest.split('.').all(word))
}

/// The keys of `pending`'s questions, as a message lists them (`` `a.x`, `b.y` ``).
pub fn keys(pending: &Pending) -> String {
    pending
        .asks
        .iter()
        .map(|a| format!("`{}`", a.key))
        .collect::<Vec<_>>()
        .join(", ")
}

fn given(value: Option<&Value>) -> Option<Value> {
    match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(v) => Some(v.clone()),
    }
}

/// Applies `answers` to `pending`. Unknown keys are refused (nothing changes); an own question
/// still unanswered holds back every resume, so the conversation stays valid.
pub fn split(pending: &Pending, answers: &Map<String, Value>) -> Result<Split, String> {
    let unknown: Vec<&str> = answers
        .keys()
        .filter(|k| !pending.asks.iter().any(|a| &a.key == *k))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown answer key(s) {}; the open questions are: {}",
            unknown.join(", "),
            keys(pending)
        ));
    }
    let mut asks: Vec<Ask> = pending.asks.clone();
    for ask in &mut asks {
        if let Some(value) = given(answers.get(&ask.key)) {
            ask.answer = Some(value);
        }
    }
    let settled = |a: &Ask| a.answer.is_some() || a.default.is_some() || !a.required;
    let value = |a: &Ask| a.answer.clone().or_else(|| a.default.clone());

    let mut out = Split::default();
    let own_open = asks.iter().any(|a| a.token.is_none() && !settled(a));
    let mut groups: Vec<(String, Vec<Ask>)> = Vec::new();
    for ask in asks {
        match ask.token.clone() {
            None if settled(&ask) => {
                let text = value(&ask).map_or_else(|| "(no answer)".to_owned(), |v| as_text(&v));
                out.results
                    .push((ask.call_id.clone(), ask.tool.clone(), text));
            }
            None => out.still.push(ask),
            Some(token) => match groups.iter_mut().find(|(t, _)| *t == token) {
                Some((_, group)) => group.push(ask),
                None => groups.push((token, vec![ask])),
            },
        }
    }
    for (token, group) in groups {
        if own_open || !group.iter().all(settled) {
            out.still.extend(group);
            continue;
        }
        let answers: Map<String, Value> = group
            .iter()
            .filter_map(|a| value(a).map(|v| (a.asked_as.as_ref().unwrap_or(&a.key).clone(), v)))
            .collect();
        let first = &group[0];
        out.calls.push(ToolCall {
            id: format!("resume_{}", short_id()),
            name: first.tool.clone(),
            arguments: json!({"task": first.task, "resume_token": token, "answers": answers}),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(key: &str, token: Option<&str>, required: bool, default: Option<Value>) -> Ask {
        Ask {
            key: key.into(),
            text: format!("what is {key}?"),
            required,
            default,
            agent_path: vec!["a".into()],
            call_id: token.map_or("ask-1", |_| "call-a").into(),
            tool: token.map_or("ask_user", |_| "agent_a").into(),
            token: token.map(str::to_owned),
            task: "t".into(),
            answer: None,
            asked_as: None,
        }
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_sub_agent_resumes_once_its_required_questions_are_answered() {
        let p = pending(vec![
            ask("a.x", Some("T1"), true, None),
            ask("a.y", Some("T1"), true, Some(json!("3.12"))),
            ask("b.z", Some("T2"), true, None),
        ]);
        assert_eq!(p.tool, NEED_USER_INPUT);
        assert!(p.question.contains("a.y") && p.question.contains("3.12"));
        let s = split(&p, &map(json!({"a.x": "yes"}))).expect("split");
        assert_eq!(s.calls.len(), 1);
        assert_eq!(s.calls[0].name, "agent_a");
        assert_eq!(
            s.calls[0].arguments["answers"],
            json!({"a.x": "yes", "a.y": "3.12"})
        );
        assert_eq!(s.calls[0].arguments["resume_token"], "T1");
        assert_eq!(s.still.len(), 1, "b.z is asked again");
        assert_eq!(s.still[0].key, "b.z");
    }

    #[test]
    fn a_key_asked_twice_in_a_round_is_made_unique_and_answered_back_under_its_own() {
        let p = pending(vec![
            ask("a.port", Some("T1"), true, None),
            ask("a.port", Some("T2"), true, None),
            ask("a.port.2", Some("T3"), true, None),
        ]);
        let keys: Vec<&str> = p.asks.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["a.port", "a.port.3", "a.port.2"]);
        let s = split(
            &p,
            &map(json!({"a.port": "80", "a.port.3": "443", "a.port.2": "22"})),
        )
        .expect("split");
        let by_token = |t: &str| {
            s.calls
                .iter()
                .find(|c| c.arguments["resume_token"] == t)
                .map(|c| c.arguments["answers"].clone())
        };
        assert_eq!(by_token("T1"), Some(json!({"a.port": "80"})));
        assert_eq!(by_token("T2"), Some(json!({"a.port": "443"})));
        assert_eq!(by_token("T3"), Some(json!({"a.port.2": "22"})));
    }

    #[test]
    fn unknown_keys_are_refused_and_blank_answers_do_not_count() {
        let p = pending(vec![ask("a.x", Some("T1"), true, None)]);
        assert!(split(&p, &map(json!({"nope": 1}))).is_err());
        let s = split(&p, &map(json!({"a.x": "  "}))).expect("split");
        assert!(s.calls.is_empty());
        assert_eq!(s.still.len(), 1);
    }

    #[test]
    fn an_open_own_question_holds_back_resumes() {
        let p = pending(vec![
            ask("o.q", None, true, None),
            ask("a.x", Some("T1"), true, None),
        ]);
        let s = split(&p, &map(json!({"a.x": "v"}))).expect("split");
        assert!(s.calls.is_empty() && s.results.is_empty());
        assert_eq!(s.still.iter().filter(|a| a.answer.is_some()).count(), 1);
        let s = split(&pending(s.still), &map(json!({"o.q": "w"}))).expect("split");
        assert_eq!(
            s.results,
            vec![("ask-1".into(), "ask_user".into(), "w".into())]
        );
        assert_eq!(s.calls.len(), 1, "the answer given before is kept");
    }

    #[test]
    fn replies_parse_as_json_key_lines_or_the_single_answer() {
        let two = pending(vec![
            ask("a.x", Some("T1"), true, None),
            ask("a.y", Some("T1"), true, None),
        ]);
        assert_eq!(
            parse_reply(&two, r#"{"a.x": "1"}"#).expect("json"),
            map(json!({"a.x": "1"}))
        );
        assert_eq!(
            parse_reply(&two, "a.x: 1\n- a.y = two").expect("lines"),
            map(json!({"a.x": "1", "a.y": "two"}))
        );
        assert!(parse_reply(&two, "just text").is_err());
        // A typo is refused, not dropped; a line naming no key goes on the value before it.
        let err = parse_reply(&two, "a.x: 1\na.yy: 2").expect_err("typo");
        assert!(err.contains("a.yy") && err.contains("`a.y`"), "{err}");
        assert!(parse_reply(&two, "a.xx: 1\na.yy: 2").is_err());
        assert_eq!(
            parse_reply(&two, "a.x: first line\nsecond line\na.y: see http://x.org")
                .expect("lines"),
            map(json!({"a.x": "first line\nsecond line", "a.y": "see http://x.org"}))
        );
        let one = pending(vec![ask("a.x", Some("T1"), true, None)]);
        assert_eq!(
            parse_reply(&one, "3.12").expect("single"),
            map(json!({"a.x": "3.12"}))
        );
    }
}
