//! The process environment as configuration sees it: `${VAR}` placeholders.
//!
//! One rule for every file that holds placeholders (`llm_config.yaml`, MCP server entries of
//! agents and of the services' own files): `${VAR}` needs `VAR` set and not empty, and is an
//! error naming `VAR` otherwise; `${VAR:-default}` is `default` when `VAR` is unset or empty (as
//! in the shell), so an optional value says so where it is written. Errors name variables,
//! never values.

/// Why a placeholder could not be expanded. Carries variable names only, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${VAR}` with `VAR` unset or empty.
    #[error("environment variable {0} is not set (write ${{{0}:-}} where an empty value will do)")]
    Unset(String),
    /// A `${` without its `}`.
    #[error("unclosed `${{` (a placeholder is `${{VAR}}` or `${{VAR:-default}}`)")]
    Unclosed,
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

/// [`expand`] from this process's environment.
pub fn expand_from_process(template: &str) -> Result<String, ExpandError> {
    expand(template, |name| std::env::var(name).ok())
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
    fn an_unclosed_placeholder_is_an_error_that_shows_no_text() {
        let e = expand("Bearer sk-literal ${TOKEN", vars);
        assert_eq!(e, Err(ExpandError::Unclosed));
        assert!(!ExpandError::Unclosed.to_string().contains("sk-literal"));
    }
}
