//! The rules of one MCP server entry, shared by the registry (agent definitions, the catalog
//! file) and the executor (its global servers file): `stdio` needs `command`, `sse`/`http` need
//! an `http(s)` `url` (seed 000 §5.1), `global` needs only the `name` of one of the executor's
//! global servers.

use std::collections::BTreeMap;

use crate::v1;

/// Reads a map whose keys are unique (an entry's `env` or `headers`, an LLM provider's
/// `headers` or `query`, the LLM configuration's `models` and `providers`, the MCP servers of
/// a servers file), or null for none: serde's maps keep the last of a repeated key without a
/// word, in JSON and YAML alike.
pub fn unique_map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: serde::Deserialize<'de>,
{
    struct Visitor<V>(std::marker::PhantomData<V>);
    impl<'de, V: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visitor<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = a.next_key::<String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
                }
                let v = a.next_value::<V>()?;
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_option(Visitor(std::marker::PhantomData))
}

/// Checks one entry; the error says what is wrong, naming the field.
pub fn validate(s: &v1::McpServer) -> Result<(), String> {
    if !s.name.is_empty() && s.r#type != "global" {
        return Err(format!(
            "type {} takes no name (only type global does)",
            s.r#type
        ));
    }
    match s.r#type.as_str() {
        "global" => {
            let valid = (1..=64).contains(&s.name.len())
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(format!(
                    "type global requires a name of 1-64 letters, digits, `-` or `_`, got {:?}",
                    s.name
                ));
            }
            if !s.command.is_empty()
                || !s.args.is_empty()
                || !s.env.is_empty()
                || !s.url.is_empty()
                || !s.headers.is_empty()
            {
                return Err(
                    "type global takes only a name (the executor configures the server)".into(),
                );
            }
        }
        "stdio" => {
            if s.command.trim().is_empty() {
                return Err("type stdio requires a command".into());
            }
            if !s.url.is_empty() || !s.headers.is_empty() {
                return Err("type stdio takes no url or headers".into());
            }
            // What a process cannot be started with. Values are not repeated: they may be
            // secrets written inline.
            if s.command.contains('\0') {
                return Err("command holds a NUL character".into());
            }
            if let Some(i) = s.args.iter().position(|a| a.contains('\0')) {
                return Err(format!("args[{i}] holds a NUL character"));
            }
            for (name, value) in &s.env {
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(format!(
                        "env name {name:?} is not a variable name (empty, or holding `=` or NUL)"
                    ));
                }
                if value.contains('\0') {
                    return Err(format!("env {name} holds a NUL character"));
                }
            }
        }
        "sse" | "http" => {
            if s.url.trim().is_empty() {
                return Err(format!("type {} requires a url", s.r#type));
            }
            if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                return Err(format!(
                    "url must start with http:// or https://, got {:?}",
                    s.url
                ));
            }
            if let Err(e) = url::Url::parse(&s.url) {
                return Err(format!("url is not a valid URL ({e})"));
            }
            if !s.command.is_empty() || !s.args.is_empty() || !s.env.is_empty() {
                return Err(format!("type {} takes no command, args or env", s.r#type));
            }
            let mut names = std::collections::BTreeSet::new();
            // In name order: the same input is refused with the same words every time.
            let headers: std::collections::BTreeMap<_, _> = s.headers.iter().collect();
            for (name, value) in headers {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(format!("headers: {name:?} is not an HTTP header name"));
                }
                // Header names are the same in any case: `X-A` and `x-a` would both be sent.
                if !names.insert(name.to_ascii_lowercase()) {
                    return Err(format!(
                        "headers: {name} is given twice (header names are the same in any case)"
                    ));
                }
                if http::HeaderValue::from_str(value).is_err() {
                    return Err(format!(
                        "headers: the value of {name} is not an HTTP header value (it holds a \
                         line break or another control character)"
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "type must be one of stdio, sse, http, global, got {other:?}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::v1;

    fn stdio(edit: impl FnOnce(&mut v1::McpServer)) -> Result<(), String> {
        let mut s = v1::McpServer {
            r#type: "stdio".into(),
            command: "python3".into(),
            ..Default::default()
        };
        edit(&mut s);
        super::validate(&s)
    }

    fn http(url: &str, header: &str, value: &str) -> Result<(), String> {
        let mut s = v1::McpServer {
            r#type: "http".into(),
            url: url.into(),
            ..Default::default()
        };
        s.headers.insert(header.into(), value.into());
        super::validate(&s)
    }

    #[test]
    fn what_no_process_or_request_can_be_made_of_is_refused_naming_the_field() {
        let refused = |r: Result<(), String>, names: &str| {
            let e = r.err().unwrap_or_default();
            assert!(e.contains(names), "{e:?} names {names:?}");
            assert!(!e.contains("s3cret"), "a value is not repeated: {e:?}");
        };
        assert_eq!(stdio(|_| ()), Ok(()));
        assert_eq!(
            stdio(|s| {
                s.env.insert("TOKEN".into(), "${TOKEN}".into());
            }),
            Ok(())
        );
        refused(stdio(|s| s.command = "py\0thon".into()), "command");
        refused(
            stdio(|s| s.args = vec!["ok".into(), "b\0d".into()]),
            "args[1]",
        );
        for name in ["A=B", "", "A\0"] {
            refused(
                stdio(|s| {
                    s.env.insert(name.into(), "v".into());
                }),
                "env name",
            );
        }
        refused(
            stdio(|s| {
                s.env.insert("X".into(), "s3cret\0".into());
            }),
            "env X",
        );

        assert_eq!(
            http("https://mcp.example/mcp", "Authorization", "Bearer ${T}"),
            Ok(())
        );
        refused(http("http:// /", "x-a", "b"), "url is not a valid URL");
        refused(http("http://a\0b/", "x-a", "b"), "url is not a valid URL");
        refused(
            http("http://h/", "bad header\n", "v"),
            "not an HTTP header name",
        );
        refused(http("http://h/", "", "v"), "not an HTTP header name");
        refused(http("http://h/", "x-a", "s3cret\n"), "the value of x-a");
        let mut twice = v1::McpServer {
            r#type: "http".into(),
            url: "http://h/".into(),
            ..Default::default()
        };
        twice.headers.insert("X-A".into(), "s3cret".into());
        twice.headers.insert("x-a".into(), "s3cret".into());
        refused(super::validate(&twice), "x-a is given twice");
    }

    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default, deserialize_with = "super::unique_map")]
        env: std::collections::BTreeMap<String, String>,
    }

    #[test]
    fn a_repeated_key_is_an_error_and_null_is_none() {
        let parse = |text: &str| serde_json::from_str::<Entry>(text).map(|e| e.env);
        let err = parse(r#"{"env": {"X": "1", "X": "2"}}"#)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("duplicate key `X`")));
        assert!(parse(r#"{"env": null}"#).is_ok_and(|m| m.is_empty()));
        assert!(parse("{}").is_ok_and(|m| m.is_empty()));
        assert!(parse(r#"{"env": {"X": "1", "Y": "2"}}"#).is_ok_and(|m| m.len() == 2));
        assert!(parse(r#"{"env": ["X"]}"#).is_err());
    }
}
