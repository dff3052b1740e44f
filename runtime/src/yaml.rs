//! YAML read with the guards every file a user writes gets: a byte order mark read past, an
//! empty text said as such, and nesting that would make the parser quadratic refused before it
//! runs.

/// Deepest nesting of YAML flow collections (`[` and `{`) a file may have before it is parsed.
/// libyaml's scanner spends time per token proportional to the open flow levels, so a 400 KB
/// file of nested `[` would hold the parser (and the registry's reconcile) for minutes, and a
/// 2 MiB one nested 1000 deep seconds; the deserializer refuses anything past 128 levels
/// anyway, so no usable file is refused by this.
pub const MAX_FLOW_DEPTH: usize = 128;

/// A YAML text that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// Nothing but whitespace.
    #[error("the file is empty")]
    Empty,
    /// Flow collections nested past [`MAX_FLOW_DEPTH`], refused before parsing.
    #[error("`[` and `{{` nested more than {MAX_FLOW_DEPTH} levels deep")]
    TooDeep,
    /// A line indented with a tab, which YAML does not allow (the parser's own words, "found
    /// character that cannot start any token", do not say so).
    #[error("line {0} is indented with a tab: YAML indents with spaces")]
    Tab(usize),
    /// What the parser said.
    #[error(transparent)]
    Parse(#[from] serde_yaml::Error),
}

/// Parses `bytes` as YAML into `T`, refusing first (in one linear pass) what would take the
/// parser quadratic time: flow collections nested past [`MAX_FLOW_DEPTH`]. The pass counts
/// brackets without reading quotes, so text with more than that many unclosed `[` or `{` in
/// its strings is refused too.
pub fn yaml<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    // Editors on Windows start UTF-8 files with a byte order mark; YAML allows it.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(YamlError::Empty);
    }
    let mut depth = 0usize;
    for b in bytes {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(YamlError::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    serde_yaml::from_slice(bytes).map_err(|e| {
        let tab = e.location().filter(|at| {
            bytes
                .split(|b| *b == b'\n')
                .nth(at.line().saturating_sub(1))
                .and_then(|line| line.get(at.column().saturating_sub(1)))
                == Some(&b'\t')
        });
        match tab {
            Some(at) => YamlError::Tab(at.line()),
            None => YamlError::Parse(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_flow_nesting_is_refused_before_the_parser_sees_it() {
        let n = 200_000;
        let deep = format!("role: {}{}\n", "[".repeat(n), "]".repeat(n));
        // Refused by the linear pass (`TooDeep`), never handed to the parser.
        let err = yaml::<serde_yaml::Value>(deep.as_bytes()).expect_err("too deep");
        assert!(matches!(err, YamlError::TooDeep), "{err}");
        assert!(err.to_string().contains("nested more than 128"), "{err}");
        // As deep as the deserializer takes: parsed.
        let deepest = format!(
            "{}{}",
            "[".repeat(MAX_FLOW_DEPTH),
            "]".repeat(MAX_FLOW_DEPTH)
        );
        assert!(yaml::<serde_yaml::Value>(deepest.as_bytes()).is_ok());
        let tabbed =
            yaml::<serde_yaml::Value>(b"name: a\ntools:\n\t- file_read\n").expect_err("a tab");
        assert_eq!(
            tabbed.to_string(),
            "line 3 is indented with a tab: YAML indents with spaces"
        );
        let fine = "a: [[1, 2], {b: [3]}]\nprompt: \"a ] stray bracket and a ]\"\n";
        let v: serde_yaml::Value = yaml(fine.as_bytes()).expect("parses");
        assert_eq!(v["a"][1]["b"][0], serde_yaml::Value::from(3));
    }
}
