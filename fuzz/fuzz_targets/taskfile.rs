//! The workspace `Taskfile.yml` reader (`metadata::read_taskfile`) and the typing of a task's
//! output (`metadata::parse_value`).
//!
//! Checks, for any input:
//! - reading never panics, and reads the same twice;
//! - every field it returns has a non-blank description, no value yet, and a command label
//!   without surrounding whitespace;
//! - output typing: `None` exactly for blank output; a string value is the trimmed output; a
//!   JSON value is what the trimmed output parses to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_svc::metadata::{parse_value, read_taskfile};
use serde_json::Value;

/// `parsed` (serde_json's reading of `text`) as `parse_value` keeps it: integers a double
/// cannot hold exactly (beyond ±2^53) as the strings of their digits, at any depth; a whole
/// output of more digits than 64 bits hold (which serde_json rounds) as its own text.
fn exact(parsed: Value, text: &str) -> Value {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.parse::<u64>().is_err()
    {
        return Value::String(text.to_owned());
    }
    inexact_as_strings(parsed)
}

fn inexact_as_strings(value: Value) -> Value {
    const MAX_EXACT: u64 = 1 << 53;
    match value {
        Value::Number(n)
            if n.as_u64().is_some_and(|u| u > MAX_EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_EXACT) =>
        {
            Value::String(n.to_string())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(inexact_as_strings).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, inexact_as_strings(v)))
                .collect(),
        ),
        other => other,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(fields) = read_taskfile(data) {
        let again = read_taskfile(data).expect("a Taskfile that read once reads again");
        assert_eq!(fields.len(), again.len());
        for (name, (field, command)) in &fields {
            assert!(
                !field.description.trim().is_empty(),
                "field {name:?} has a blank description"
            );
            assert!(field.value.is_none() && field.error.is_none());
            assert_eq!(command.trim(), command, "untrimmed command of {name:?}");
            assert_eq!(again[name].0, *field);
        }
    }

    let output = String::from_utf8_lossy(data);
    let trimmed = output.trim();
    match parse_value(&output) {
        None => assert!(trimmed.is_empty(), "no value for {trimmed:?}"),
        Some(Value::String(s)) if serde_json::from_str::<Value>(trimmed).is_err() => {
            assert_eq!(s, trimmed);
        }
        Some(value) => {
            let parsed: Value = serde_json::from_str(trimmed).expect("typed output is JSON");
            assert_eq!(value, exact(parsed, trimmed));
        }
    }
});
