//! What the `git` tool lets the model run: an allowlist of subcommands, each with the options it
//! accepts, rather than a list of what is refused (git has too many ways to run a program or
//! write a file elsewhere for a refuse-list to stay complete).
//!
//! Every path-like value (an option marked as a path, a positional argument, what follows `--`)
//! must resolve inside the workspace: relative to it (or to a `-C` directory inside it), with no
//! `..` or symlink escape, and an absolute path only when it lies inside. Repository URLs
//! (`clone`, `fetch`, `pull`, `push`, `ls-remote`, `remote add|set-url`) are `https://` or a
//! path inside the workspace; `ext::`/`fd::` transports, `ssh`, `file://` and the rest are
//! refused. Long options must be spelled out: git accepts unambiguous prefixes, this check does
//! not.

use std::{
    fmt,
    path::{Component, Path, PathBuf},
};

use super::allowlist::{
    GLOBAL, SUBCOMMANDS, Sub, Takes, Url, allows_count, known_danger, listing, lookup,
};

/// Why an argument was refused: shown to the model as the tool's invalid-arguments reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The argument as given.
    pub arg: String,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is refused: {}", self.arg, self.reason)
    }
}

fn refuse(arg: &str, reason: impl Into<String>) -> Refusal {
    Refusal {
        arg: arg.to_owned(),
        reason: reason.into(),
    }
}

/// What [`check`] found in arguments it allows.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The directory git works in (the workspace, or where its `-C` options lead).
    pub dir: PathBuf,
    /// The subcommand (`None` for `git --version`).
    pub subcommand: Option<&'static str>,
    /// Whether the subcommand talks to other repositories (`clone`, `fetch`, `pull`, `push`,
    /// `ls-remote`, `remote`): each local one it names or whose remote it uses runs git there,
    /// with that repository's configuration.
    pub reaches: bool,
    /// The repositories inside the workspace its arguments name as URLs.
    pub local_urls: Vec<PathBuf>,
    /// The repository argument of `clone`, `fetch`, `pull`, `push`, `ls-remote` (a URL or a
    /// remote's name), when given.
    pub repository: Option<String>,
}

/// Checks git's arguments against the allowlist; `root` is the canonical workspace (git's
/// working directory). Reads the file system to resolve symlinks: call off the async threads.
pub(crate) fn check(args: &[String], root: &Path) -> Result<Checked, Refusal> {
    // No argument of a program can hold one (the launcher could not even start git).
    if let Some(a) = args.iter().find(|a| a.contains('\0')) {
        return Err(refuse(
            a,
            "it contains a NUL byte, which no argument can hold",
        ));
    }
    let mut base = root.to_path_buf();
    let globals = globals(args)?;
    for (option, dir) in globals.dirs {
        base = inside(root, &base, dir)
            .ok_or_else(|| refuse(option, format!("`{dir}` is outside the workspace")))?;
        // git would fail to change to it, after a configuration check that could not run there.
        if !base.is_dir() {
            return Err(refuse(
                option,
                format!("`{dir}` is not a directory in the workspace"),
            ));
        }
    }
    let i = globals.subcommand;
    let Some(name) = args.get(i) else {
        return if args.iter().any(|a| a == "--version") {
            Ok(Checked {
                dir: base,
                subcommand: None,
                reaches: false,
                local_urls: Vec::new(),
                repository: None,
            })
        } else {
            Err(refuse("", "give a git subcommand such as `status`"))
        };
    };
    let Some(sub) = SUBCOMMANDS.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = SUBCOMMANDS.iter().map(|s| s.name).collect();
        return Err(refuse(
            name,
            format!(
                "not an allowed git subcommand (allowed: {})",
                names.join(" ")
            ),
        ));
    };
    let rest = &args[i + 1..];
    let positionals = check_options(sub, rest, root, &base)?;
    if sub.name == "config" {
        check_config_reads(rest, &positionals)?;
    }
    let local_urls = check_positionals(sub, &positionals, root, &base)?;
    Ok(Checked {
        dir: base,
        subcommand: Some(sub.name),
        reaches: reaches(sub, rest, &positionals),
        local_urls,
        repository: (sub.url == Url::First)
            .then(|| positionals.first().filter(|p| **p != "--"))
            .flatten()
            .map(|p| (*p).to_owned()),
    })
}

/// Whether the subcommand talks to other repositories: every one that takes a URL, but
/// `remote` only when it fetches (`add -f`, `update`) or asks the remote (`show`, `prune`,
/// `set-head`), not when it lists or edits names.
fn reaches(sub: &Sub, args: &[String], positionals: &[&str]) -> bool {
    match sub.url {
        Url::No => false,
        Url::First => true,
        Url::Remote => match positionals.first() {
            Some(&("update" | "show" | "prune" | "set-head")) => true,
            // `-f`, also in a cluster (`-fv`); a `-t` value with an f in it errs on the safe side.
            Some(&"add") => args
                .iter()
                .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('f')),
            _ => false,
        },
    }
}

/// Where the subcommand is in `args`, past the global options and their values; `None` when
/// the git tool would refuse the global options.
pub(crate) fn subcommand_at(args: &[String]) -> Option<usize> {
    globals(args).ok().map(|g| g.subcommand)
}

/// The global options before git's subcommand.
struct Globals<'a> {
    /// Each directory option (`-C`) with its directory, in order.
    dirs: Vec<(&'a str, &'a str)>,
    /// Where the subcommand is (past the end when there is none).
    subcommand: usize,
}

/// Reads the global options: a refusal for one the git tool does not allow.
fn globals(args: &[String]) -> Result<Globals<'_>, Refusal> {
    let mut dirs = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i).filter(|a| a.starts_with('-')) {
        let (name, attached) = split_global(a);
        let Some(takes) = lookup(&[GLOBAL], name) else {
            let reason = known_danger(name).map_or_else(
                || {
                    format!(
                        "not an allowed option before the subcommand (allowed: {})",
                        listing(&[GLOBAL])
                    )
                },
                str::to_owned,
            );
            return Err(refuse(a, reason));
        };
        i += 1;
        if takes == Takes::Path {
            let value = match attached {
                Some(v) => v,
                None => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| refuse(a, "it needs a directory"))?;
                    i += 1;
                    v.as_str()
                }
            };
            dirs.push((a.as_str(), value));
        }
    }
    Ok(Globals {
        dirs,
        subcommand: i,
    })
}

/// A global option as (name, attached value): `--name=value`, `-Cdir`, `-cname=value`.
fn split_global(a: &str) -> (&str, Option<&str>) {
    if let Some((n, v)) = a.split_once('=').filter(|_| a.starts_with("--")) {
        return (n, Some(v));
    }
    if a.starts_with("--") || a.len() <= 2 {
        return (a, None);
    }
    let (name, rest) = a.split_at(2);
    (name, Some(rest))
}

/// The merge strategies git has built in: any other name makes git run `git merge-<name>`, a
/// program (or a path into the workspace, or an alias) of the model's choosing.
pub(super) const STRATEGIES: [&str; 6] =
    ["ort", "recursive", "resolve", "octopus", "ours", "subtree"];

/// `-s`/`--strategy` of the subcommands that merge must name a built-in strategy.
fn check_strategy(sub: &Sub, option: &str, value: &str) -> Result<(), Refusal> {
    let merges = matches!(
        sub.name,
        "merge" | "pull" | "rebase" | "cherry-pick" | "revert"
    );
    if merges && matches!(option, "-s" | "--strategy") && !STRATEGIES.contains(&value) {
        return Err(refuse(
            value,
            format!(
                "not a built-in merge strategy (allowed: {}); another name makes git run a \
                 program",
                STRATEGIES.join(" ")
            ),
        ));
    }
    Ok(())
}

/// Why git may not look into submodules.
const SUBMODULES: &str = "git would run inside the submodules, with their own configuration, \
    which the git tool does not check; submodules are ignored (`--ignore-submodules=all` is \
    allowed)";

/// Checks the subcommand's options; returns its positional arguments (a `--` included).
fn check_options<'a>(
    sub: &Sub,
    args: &'a [String],
    root: &Path,
    base: &Path,
) -> Result<Vec<&'a str>, Refusal> {
    let mut positionals = Vec::new();
    let mut it = args.iter();
    let not_allowed = |arg: &str, name: &str| {
        let reason = known_danger(name).map_or_else(
            || {
                format!(
                    "not an allowed option of `git {}` (allowed: {})",
                    sub.name,
                    listing(sub.opts)
                )
            },
            str::to_owned,
        );
        refuse(arg, reason)
    };
    let path_value = |arg: &str, value: &str| {
        inside(root, base, value)
            .map(|_| ())
            .ok_or_else(|| refuse(arg, format!("`{value}` is outside the workspace")))
    };
    while let Some(a) = it.next() {
        if a == "--" || a == "--end-of-options" {
            positionals.push("--");
            positionals.extend(it.map(String::as_str));
            break;
        }
        if !a.starts_with('-') || a == "-" {
            positionals.push(a.as_str());
            continue;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (&a[..n.len() + 2], Some(v)),
                None => (a.as_str(), None),
            };
            let takes = lookup(sub.opts, name).ok_or_else(|| not_allowed(a, name))?;
            if name == "--ignore-submodules" && attached.is_some_and(|v| v != "all") {
                return Err(refuse(a, SUBMODULES));
            }
            match (takes, attached) {
                (Takes::Nothing, Some(_)) => return Err(refuse(a, "this option takes no value")),
                (Takes::Nothing | Takes::Optional, _) => {}
                (Takes::Text, v) => {
                    let v = match v {
                        Some(v) => v,
                        None => it.next().ok_or_else(|| refuse(a, "it needs a value"))?,
                    };
                    check_strategy(sub, name, v)?;
                }
                (Takes::Path, v) => {
                    let v = match v {
                        Some(v) => v,
                        None => it.next().ok_or_else(|| refuse(a, "it needs a path"))?,
                    };
                    path_value(a, v)?;
                }
            }
            continue;
        }
        // Short options, possibly clustered (`-am`) or with an attached value (`-n5`).
        if allows_count(sub.opts) && a[1..].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for (at, c) in a.char_indices().skip(1) {
            let name = format!("-{c}");
            let takes = lookup(sub.opts, &name).ok_or_else(|| not_allowed(a, &name))?;
            let rest = &a[at + c.len_utf8()..];
            match takes {
                Takes::Nothing => continue,
                Takes::Optional => break,
                Takes::Text | Takes::Path => {
                    let v = if rest.is_empty() {
                        it.next()
                            .ok_or_else(|| refuse(a, "it needs a value"))?
                            .as_str()
                    } else {
                        rest
                    };
                    if takes == Takes::Path {
                        path_value(a, v)?;
                    } else {
                        check_strategy(sub, &name, v)?;
                    }
                    break;
                }
            }
        }
    }
    Ok(positionals)
}

/// Positional arguments: repository URLs where the subcommand takes one, paths (or revisions,
/// which pass the same check) everywhere else. Returns the local repositories named as URLs.
fn check_positionals(
    sub: &Sub,
    positionals: &[&str],
    root: &Path,
    base: &Path,
) -> Result<Vec<PathBuf>, Refusal> {
    let url_index = match sub.url {
        Url::No => None,
        Url::First => Some(0),
        Url::Remote => positionals
            .first()
            .filter(|p| matches!(**p, "add" | "set-url"))
            .map(|_| 2),
    };
    let mut local = Vec::new();
    // git reads a relative URL from the top of the working tree, not from `-C`'s directory.
    let top = repo_top(root, base);
    for (n, p) in positionals.iter().enumerate().filter(|(_, p)| **p != "--") {
        if Some(n) == url_index || (sub.url != Url::No && p.contains("::")) {
            // `fetch --multiple` takes more remotes: no refspec contains `::`.
            local.extend(check_url(p, root, &top)?);
        } else if let Some(path) = inside(root, base, p) {
            // `fetch --multiple a b` and `push ../x`: any of them may be a repository.
            if sub.url != Url::No {
                local.extend(inside(root, &top, p).or(Some(path)));
            }
        } else {
            return Err(refuse(p, "it is a path outside the workspace"));
        }
    }
    Ok(local)
}

/// `git config` only in its reading forms (`--get*`, `--list`, `get`, `list`, or one name).
fn check_config_reads(args: &[String], positionals: &[&str]) -> Result<(), Refusal> {
    const READ_FLAGS: [&str; 5] = ["--get", "--get-all", "--get-regexp", "-l", "--list"];
    let why = "`git config` may only read (`--get`, `--get-regexp`, `--list`, `get`, `list`)";
    if args.iter().any(|a| READ_FLAGS.contains(&a.as_str())) {
        return Ok(());
    }
    match positionals.first() {
        None | Some(&("get" | "list")) => Ok(()),
        Some(&("set" | "unset" | "rename-section" | "remove-section" | "edit")) => {
            Err(refuse(positionals[0], why))
        }
        Some(_) if positionals.len() == 1 => Ok(()),
        Some(_) => Err(refuse(&positionals.join(" "), why)),
    }
}

/// A repository URL: `https://…`, or a path inside the workspace (a remote's name passes as
/// one), which is returned.
pub(super) fn check_url(url: &str, root: &Path, base: &Path) -> Result<Option<PathBuf>, Refusal> {
    let only = "only https:// URLs, remote names and repositories inside the workspace are allowed";
    // git reads `<transport>::<address>` when the URL starts with a scheme's characters
    // followed by `::` (not a `::` later on, as in `https://[::1]/`).
    let scheme_len = url
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(url.len());
    if url[scheme_len..].starts_with("::") {
        return Err(refuse(
            url,
            "`<transport>::` addresses (ext::, fd::) make git run programs",
        ));
    }
    if let Some((scheme, _)) = url.split_once("://") {
        return if scheme.eq_ignore_ascii_case("https") {
            Ok(None)
        } else {
            Err(refuse(url, only))
        };
    }
    // `host:path` (before any slash) is git's scp-like ssh syntax.
    let head = url.split('/').next().unwrap_or_default();
    if head.contains(':') {
        return Err(refuse(url, only));
    }
    inside(root, base, url)
        .map(Some)
        .ok_or_else(|| refuse(url, "it is a path outside the workspace"))
}

/// The top of the working tree git finds from `dir` (the nearest directory up to `root` that
/// holds a `.git`), where it reads relative URLs from; `dir` itself when there is none (a bare
/// repository, or no repository yet). Reads the file system.
pub(super) fn repo_top(root: &Path, dir: &Path) -> PathBuf {
    dir.ancestors()
        .take_while(|a| a.starts_with(root))
        .find(|a| a.join(".git").exists())
        .unwrap_or(dir)
        .to_path_buf()
}

/// `given` (relative to `base`) as a path inside `root`, following symlinks of the existing part
/// and `..` physically the way the kernel would; `None` when it leaves `root`.
pub(crate) fn inside(root: &Path, base: &Path, given: &str) -> Option<PathBuf> {
    if given.contains('\0') {
        return None;
    }
    let joined = base.join(given);
    let parts: Vec<Component<'_>> = joined.components().collect();
    // The longest existing prefix, resolved by the kernel; what follows it does not exist, so
    // it holds no symlink and is normalised lexically.
    let (real, rest) = (0..=parts.len()).rev().find_map(|n| {
        let prefix: PathBuf = parts[..n].iter().collect();
        std::fs::canonicalize(&prefix)
            .ok()
            .map(|r| (r, &parts[n..]))
    })?;
    // What follows must not exist at all: a dangling symlink there (it cannot be resolved, but
    // git would write through it) leads anywhere.
    if let Some(next) = rest.first()
        && std::fs::symlink_metadata(real.join(next)).is_ok()
    {
        return None;
    }
    let mut out = real;
    for c in rest {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    out.starts_with(root).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(root: &Path, a: &[&str]) -> Result<(), Refusal> {
        let args: Vec<String> = a.iter().map(|s| (*s).to_owned()).collect();
        check(&args, root).map(drop)
    }

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canon");
        std::fs::create_dir(root.join("sub")).expect("sub");
        (dir, root)
    }

    #[test]
    fn everyday_commands_pass() {
        let (_d, root) = ws();
        for a in [
            &["init", "-q", "-b", "main"][..],
            &["status", "--porcelain=v1", "--branch"],
            &["status", "-sb", "-uno"],
            &["add", "-A"],
            &["add", "--", "a.txt", "sub/b.txt"],
            &["commit", "-am", "a message with /etc/passwd in it"],
            &["commit", "-m", "x", "--author=A <a@b.c>"],
            &["log", "--oneline", "-n", "5", "-3", "--format=%H %s"],
            &["diff", "--stat", "HEAD~1..HEAD", "--", "sub"],
            &["diff", "--output=sub/out.diff"],
            &["show", "HEAD:sub/b.txt"],
            &["branch", "-vv"],
            &["checkout", "-b", "feature"],
            &["switch", "-c", "other", "main"],
            &["stash", "push", "-m", "wip"],
            &["config", "--get", "user.name"],
            &["config", "--list"],
            &["config", "get", "user.name"],
            &["grep", "-n", "-e", "/etc/passwd", "--", "sub"],
            &["clone", "https://github.com/o/r.git", "sub/r"],
            &["clone", "https://[::1]:8443/r.git"],
            &["clone", "--depth", "1", "sub", "copy"],
            &["remote", "add", "origin", "https://example.com/r.git"],
            &["remote", "-v"],
            &["fetch", "origin"],
            &["push", "-u", "origin", "main"],
            &["archive", "-o", "sub/a.tar", "HEAD"],
            &["format-patch", "-o", "patches", "-1"],
            &["-C", "sub", "status"],
            &["--no-pager", "log"],
            &["--version"],
        ] {
            assert_eq!(run(&root, a), Ok(()), "{a:?}");
        }
    }

    #[test]
    fn options_that_run_programs_are_refused_with_a_reason() {
        let (_d, root) = ws();
        for (a, arg) in [
            (&["-c", "core.sshCommand=touch /tmp/x", "fetch"][..], "-c"),
            (&["-ccore.pager=sh", "log"], "-ccore.pager=sh"),
            (
                &["--config-env=core.pager=X", "log"],
                "--config-env=core.pager=X",
            ),
            (
                &["clone", "--upload-pack=touch /tmp/pwned", "https://h/r"],
                "--upload-pack=touch /tmp/pwned",
            ),
            (&["clone", "-u", "touch /tmp/pwned", "https://h/r"], "-u"),
            (&["clone", "-c", "core.sshCommand=x", "https://h/r"], "-c"),
            (
                &["clone", "--template=/tmp/t", "https://h/r"],
                "--template=/tmp/t",
            ),
            (&["fetch", "--upload-pack", "x", "origin"], "--upload-pack"),
            (&["push", "--receive-pack=x", "origin"], "--receive-pack=x"),
            (&["push", "--exec=x", "origin"], "--exec=x"),
            (&["rebase", "-x", "touch /tmp/x", "main"], "-x"),
            (&["rebase", "--exec", "touch /tmp/x"], "--exec"),
            (&["grep", "-O", "x"], "-O"),
            (
                &["grep", "--open-files-in-pager=sh", "x"],
                "--open-files-in-pager=sh",
            ),
            (&["diff", "--ext-diff"], "--ext-diff"),
            // A strategy that is not git's own runs `git merge-<name>`.
            (&["cherry-pick", "--strategy=x/evil", "side"], "x/evil"),
            (&["rebase", "-s", "foo", "main"], "foo"),
            (&["pull", "--rebase", "-sfoo", "origin"], "foo"),
            (&["merge", "--strategy", "x", "side"], "x"),
            (&["revert", "--strategy=y", "HEAD"], "y"),
            (&["--git-dir=/x/.git", "log"], "--git-dir=/x/.git"),
        ] {
            let r = run(&root, a).expect_err(&format!("{a:?} passed"));
            assert_eq!(r.arg, arg, "{a:?}");
            assert!(
                r.reason.contains("run")
                    || r.reason.contains("outside")
                    || r.reason.contains("configuration"),
                "{a:?}: {r}"
            );
        }
    }

    #[test]
    fn built_in_strategies_pass_and_an_optional_value_is_never_the_next_argument() {
        let (_d, root) = ws();
        for a in [
            &["merge", "-s", "ort", "side"][..],
            &[
                "cherry-pick",
                "--strategy=recursive",
                "-X",
                "theirs",
                "side",
            ],
            &["rebase", "-s", "ours", "main"],
            // `restore -s` is its source, not a strategy.
            &["restore", "-s", "HEAD~1", "a.txt"],
            &["diff", "-U5"],
            &["diff", "--unified=1"],
        ] {
            run(&root, a).unwrap_or_else(|r| panic!("{a:?}: {r}"));
        }
        // `-U` takes its value attached only: the next argument is a path, checked as one.
        let r = run(&root, &["diff", "--no-index", "-U", "/etc/passwd", "a"]).expect_err("passed");
        assert_eq!(r.arg, "/etc/passwd");
    }

    #[test]
    fn transports_that_run_programs_and_non_https_urls_are_refused() {
        let (_d, root) = ws();
        for url in [
            "ext::sh -c touch% /tmp/pwned",
            "EXT::sh",
            "my-helper+x::addr",
            "fd::3",
            "ssh://host/r",
            "git@host:r.git",
            "http://host/r",
            "file:///etc",
            "/etc",
            "../other",
        ] {
            for a in [
                vec!["clone", url],
                vec!["fetch", url],
                vec!["pull", url],
                vec!["push", url],
                vec!["remote", "add", "x", url],
                vec!["ls-remote", url],
            ] {
                assert!(run(&root, &a).is_err(), "{a:?} passed");
            }
        }
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let (_d, root) = ws();
        std::os::unix::fs::symlink("/etc", root.join("link")).expect("symlink");
        for a in [
            &["-C", "/", "status"][..],
            &["-C/", "status"],
            &["-C", "..", "status"],
            &["-C", "sub", "-C", "../..", "status"],
            &["diff", "--output=/tmp/outside"],
            &["diff", "--output", "../outside"],
            &["archive", "-o", "/outside.tar", "HEAD"],
            &["archive", "--output=/tmp/a.tar", "HEAD"],
            &["format-patch", "-o", "/outside", "-1"],
            &["format-patch", "--output-directory=/tmp/p"],
            &["commit", "-F", "/etc/passwd"],
            &["add", "/etc/passwd"],
            &["add", "--", "../x"],
            &["diff", "--no-index", "/etc/passwd", "a"],
            &["clone", "https://h/r", "/tmp/elsewhere"],
            &["init", "/tmp/elsewhere"],
            &["add", "link/passwd"],
            &["add", "link/../x"],
            &["add", "nope/../../x"],
        ] {
            let r = run(&root, a).expect_err(&format!("{a:?} passed"));
            assert!(r.reason.contains("outside"), "{a:?}: {r}");
        }
        std::os::unix::fs::symlink("/nonexistent/out.diff", root.join("dangling")).expect("link");
        let r = run(&root, &["diff", "--output=dangling"]).expect_err("a dangling link passed");
        assert!(r.reason.contains("outside"), "{r}");
        let r = run(&root, &["-C", "missing", "status"]).expect_err("a missing -C passed");
        assert!(r.reason.contains("`missing` is not a directory"), "{r}");
    }

    #[test]
    fn unknown_subcommands_options_and_config_writes_are_refused() {
        let (_d, root) = ws();
        for a in [
            &[][..],
            &["submodule", "update"],
            &["bisect", "run", "sh"],
            &["daemon"],
            &["log", "--outp=/tmp/x"],
            &["config", "core.pager", "sh"],
            &["config", "set", "core.pager", "sh"],
            &["config", "--file=/tmp/c", "--list"],
            &["commit", "-S", "-m", "x"],
            &["--exec-path=/tmp", "status"],
        ] {
            assert!(run(&root, a).is_err(), "{a:?} passed");
        }
        let r = run(&root, &["bisect"]).expect_err("bisect");
        assert!(r.reason.contains("allowed: status"), "{r}");
        let r = run(&root, &["log", "--bogus"]).expect_err("bogus");
        assert!(
            r.reason.contains("not an allowed option of `git log`"),
            "{r}"
        );
    }
}
