//! The repository configuration a `git` call runs with: only settings that make git run no
//! program and reach nothing outside the workspace.
//!
//! A repository's `.git/config` is in the model's hands: `file_write` writes it, and so does git
//! itself (`log --output=.git/config` with a crafted commit message). The environment pins the
//! best-known keys (hooks, fsmonitor, credential helpers, signing), but git has many more that
//! name a program (`diff.external`, `filter.<driver>.clean`, `remote.<name>.uploadpack`, ...) or
//! a place (`core.worktree`, `include.path`). So before each call the tool asks git itself which
//! settings the repository has (`git config --list`, which reads them and runs nothing) and
//! refuses the call when one is not on [`allowed`]'s list, or when the repository's
//! configuration lives outside the workspace (a `.git` file naming another repository).
//!
//! A call that talks to another repository (`fetch`, `push`, ...) runs git there too, with that
//! repository's configuration (`receive.denyCurrentBranch=updateInstead` checks a push out,
//! running its filters): each local repository it names, or that a remote's URL names, must
//! pass the same check, and a remote's URL must be one the tool would take as an argument.
//! Submodules are not entered at all (see the tool's forced configuration).

use std::path::{Component, Path, PathBuf};

/// The `git` arguments that list the configuration of the repository at `dir`: scope, origin
/// and name (with its value after a newline, when it has one) of each setting, NUL-separated.
pub(super) fn probe_args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["-C".into(), dir.as_os_str().to_owned()];
    args.extend(["config", "--list", "--show-scope", "--show-origin", "-z"].map(Into::into));
    args
}

/// Reads the configuration `listing` (the output of [`probe_args`] run in `dir`, inside the
/// canonical workspace `root`) for a call that talks to other repositories (`reaches`) or not:
/// the repositories inside the workspace its remotes' URLs name, or what is wrong with it (the
/// settings refused, the files outside the workspace, and when it `reaches`, the remotes' URLs
/// the tool would not take). Resolves paths on disk: call off the async threads.
pub(super) fn read(
    listing: &[u8],
    dir: &Path,
    root: &Path,
    reaches: bool,
) -> Result<Vec<(String, PathBuf)>, String> {
    let text = String::from_utf8_lossy(listing);
    let mut fields = text.split('\0');
    // Where git reads a relative URL from.
    let top = super::args::repo_top(root, dir);
    let (mut refused, mut outside): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let (mut remotes, mut bad_urls) = (Vec::new(), Vec::new());
    // `branch.<b>.remote` and `.pushRemote` name a remote, or are a URL themselves.
    let (mut names, mut branch_remotes) = (Vec::new(), Vec::new());
    while let (Some(scope), Some(origin), Some(entry)) =
        (fields.next(), fields.next(), fields.next())
    {
        let (name, value) = entry.split_once('\n').unwrap_or((entry, ""));
        // The tool's own settings (the environment's), and the empty end of the listing.
        if scope == "command" || name.is_empty() {
            continue;
        }
        if name.starts_with("remote.") {
            names.push(remote_name(name));
        }
        if reaches && is_branch_remote(name) && !value.is_empty() && value != "." {
            branch_remotes.push((name.to_owned(), value.to_owned()));
        }
        if reaches && is_remote_url(name) && !value.is_empty() {
            match super::args::check_url(value, root, &top) {
                Ok(local) => remotes.extend(local.map(|path| (remote_name(name), path))),
                Err(refusal) => bad_urls.push(format!("`{name}` is `{value}`: {}", refusal.reason)),
            }
        }
        if !allowed(name) && !refused.iter().any(|r| r == name) {
            refused.push(name.to_owned());
        }
        if let Some(file) = origin.strip_prefix("file:")
            && !is_inside(root, &dir.join(file))
            && !outside.iter().any(|o| o == file)
        {
            outside.push(file.to_owned());
        }
    }
    for (name, value) in branch_remotes.iter().filter(|(_, v)| !names.contains(v)) {
        match super::args::check_url(value, root, &top) {
            Ok(local) => remotes.extend(local.map(|path| (value.clone(), path))),
            Err(refusal) => bad_urls.push(format!("`{name}` is `{value}`: {}", refusal.reason)),
        }
    }
    let mut said = Vec::new();
    if !bad_urls.is_empty() {
        said.push(format!(
            "the repository's configuration names a remote the git tool does not reach ({})",
            bad_urls.join("; ")
        ));
    }
    if !outside.is_empty() {
        said.push(format!(
            "the repository's configuration is outside the workspace ({})",
            outside.join(", ")
        ));
    }
    if !refused.is_empty() {
        let names: Vec<String> = refused.iter().map(|n| format!("`{n}`")).collect();
        said.push(format!(
            "the repository's configuration sets {}, which the git tool does not run with: such \
             settings can make git run a program or reach outside the workspace (core, remote, \
             branch, user and similar basics are allowed); remove them from the repository's \
             config to use git here",
            names.join(", ")
        ));
    }
    if said.is_empty() {
        Ok(remotes)
    } else {
        Err(said.join("; "))
    }
}

/// The remote's name in setting `remote.<name>.<key>`.
fn remote_name(setting: &str) -> String {
    let rest = setting.strip_prefix("remote.").unwrap_or(setting);
    rest.rsplit_once('.')
        .map_or(rest, |(name, _)| name)
        .to_owned()
}

/// Whether setting `name` is a branch's remote (`branch.<b>.remote` or `.pushremote`).
fn is_branch_remote(name: &str) -> bool {
    name.strip_prefix("branch.").is_some_and(|rest| {
        rest.rsplit_once('.').is_some_and(|(_, key)| {
            key.eq_ignore_ascii_case("remote") || key.eq_ignore_ascii_case("pushremote")
        })
    })
}

/// Whether setting `name` is a remote's URL (`remote.<name>.url` or `.pushurl`).
fn is_remote_url(name: &str) -> bool {
    name.strip_prefix("remote.").is_some_and(|rest| {
        rest.rsplit_once('.').is_some_and(|(_, key)| {
            key.eq_ignore_ascii_case("url") || key.eq_ignore_ascii_case("pushurl")
        })
    })
}

/// What is wrong with the repository at `dir` (inside the workspace `root`) beyond its
/// configuration, if anything: its git directory leading outside ([`git_dir_problem`]) and, for a
/// call that `resumes` an operation in progress, its state files ([`sequencer_problem`]). Reads
/// the file system: call off the async threads.
pub(super) fn repository_problem(root: &Path, dir: &Path, resumes: bool) -> Option<String> {
    let git_dir = git_dir(root, dir)?;
    git_dir_problem(root, &git_dir)
        .or_else(|| resumes.then(|| sequencer_problem(&git_dir)).flatten())
}

/// What is wrong with the state a `rebase`, `cherry-pick` or `revert` would resume from, if
/// anything: git keeps it in files of the repository's git directory, which the model can write
/// (`file_write`), and it can make git run a program: an `exec` line in the todo list, a merge
/// strategy other than git's own (`git merge-<name>`), a signing option (gpg). Reads the file
/// system: call off the async threads.
fn sequencer_problem(git_dir: &Path) -> Option<String> {
    let read = |name: &str| small_text(&git_dir.join(name));
    let mut said = Vec::new();
    for todo in ["rebase-merge/git-rebase-todo", "sequencer/todo"] {
        let runs = read(todo)
            .lines()
            .any(|line| matches!(line.split_whitespace().next(), Some("exec" | "x")));
        if runs {
            said.push(format!("its todo list (`{todo}`) has an `exec` line"));
        }
    }
    let strategy = read("rebase-merge/strategy");
    let strategy = strategy.trim();
    if !strategy.is_empty() && !super::args::STRATEGIES.contains(&strategy) {
        said.push(format!("it would merge with the strategy `{strategy}`"));
    }
    if !read("rebase-merge/gpg_sign_opt").trim().is_empty() {
        said.push("it would sign its commits (gpg)".to_owned());
    }
    for line in read("sequencer/opts").lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if key == "gpg-sign" || (key == "strategy" && !super::args::STRATEGIES.contains(&value)) {
            said.push(format!(
                "its options (`sequencer/opts`) set `{key} = {value}`"
            ));
        }
    }
    (!said.is_empty()).then(|| {
        format!(
            "the operation in progress cannot be resumed by the git tool: {}; these make git \
             run a program (`--abort` or `--quit` ends it)",
            said.join("; ")
        )
    })
}

/// What in the git directory of the repository at `dir` leads outside the workspace `root`, if
/// anything: the git directory itself (a `.git` file's `gitdir:`), its `commondir`, an entry of
/// `objects/info/alternates`, or a symlink among its files (`objects`, `refs`, `packed-refs`,
/// `MERGE_MSG`, ...): the model can make any of them (`file_write`, `git apply`), and git would
/// read through them. Reads the file system: call off the async threads.
fn git_dir_problem(root: &Path, git_dir: &Path) -> Option<String> {
    let outside = |path: &Path| {
        std::fs::canonicalize(path)
            .map(|real| !real.starts_with(root))
            .unwrap_or(false)
    };
    let mut leads = Vec::new();
    if outside(git_dir) {
        leads.push("the repository's git directory".to_owned());
    }
    let common = small_text(&git_dir.join("commondir"));
    let common = common.trim();
    if !common.is_empty() && outside(&git_dir.join(common)) {
        leads.push(format!("its `commondir` ({common})"));
    }
    let alternates = small_text(&git_dir.join("objects/info/alternates"));
    for alternate in alternates.lines().map(str::trim) {
        if !alternate.is_empty()
            && !alternate.starts_with('#')
            && outside(&git_dir.join("objects").join(alternate))
        {
            leads.push(format!("`objects/info/alternates` ({alternate})"));
        }
    }
    if let Ok(entries) = std::fs::read_dir(git_dir) {
        for entry in entries.flatten() {
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if is_link && (outside(&entry.path()) || std::fs::metadata(entry.path()).is_err()) {
                leads.push(format!(
                    "the symlink `{}`",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    (!leads.is_empty()).then(|| {
        format!(
            "the repository leads outside the workspace ({}), so git does not run in it",
            leads.join(", ")
        )
    })
}

/// The text of a small file git keeps in a repository (a todo list, `commondir`, a `.git`
/// file), empty when it is missing, not a regular file (a named pipe the model made would hold
/// the thread until a writer came) or not text; at most 1 MiB of it.
fn small_text(path: &Path) -> String {
    taskforce_runtime::read_regular(path, 1 << 20, true)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// The git directory of the repository at `dir` (inside `root`), if it has one.
fn git_dir(root: &Path, dir: &Path) -> Option<PathBuf> {
    let top = super::args::repo_top(root, dir);
    let dot_git = top.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git);
    }
    if dot_git.exists() {
        let text = small_text(&dot_git);
        return text
            .trim()
            .strip_prefix("gitdir:")
            .map(|p| top.join(p.trim()));
    }
    // A bare repository.
    dir.join("HEAD").is_file().then(|| dir.to_path_buf())
}

/// Whether `path` (absolute, or relative to the workspace) lies inside `root`, lexically.
fn is_inside(root: &Path, path: &Path) -> bool {
    let mut normal = PathBuf::new();
    for c in root.join(path).components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal.starts_with(root)
}

/// Whether git may run with setting `name` (`section.key` or `section.subsection.key`; git
/// lowercases the section and the key, not the subsection) in the repository's configuration.
pub(super) fn allowed(name: &str) -> bool {
    let Some((section, rest)) = name.split_once('.') else {
        return false;
    };
    let (sub, key) = match rest.rsplit_once('.') {
        Some((sub, key)) => (Some(sub), key),
        None => (None, rest),
    };
    let section = section.to_ascii_lowercase();
    let key = key.to_ascii_lowercase();
    let key = key.as_str();
    match (section.as_str(), sub.is_some()) {
        ("core", false) => matches!(
            key,
            "repositoryformatversion"
                | "filemode"
                | "bare"
                | "logallrefupdates"
                | "ignorecase"
                | "precomposeunicode"
                | "symlinks"
                | "autocrlf"
                | "eol"
                | "safecrlf"
                | "quotepath"
                | "checkstat"
                | "trustctime"
                | "abbrev"
                | "compression"
                | "sharedrepository"
                | "sparsecheckout"
                | "sparsecheckoutcone"
                | "splitindex"
                | "untrackedcache"
                | "commentchar"
                | "commentstring"
                | "whitespace"
                // The environment's GIT_EDITOR and GIT_PAGER outrank them; the tool's
                // `hooksPath` and `fsmonitor` outrank the repository's.
                | "editor"
                | "pager"
                | "hookspath"
                | "fsmonitor"
        ),
        ("extensions", false) => matches!(
            key,
            "objectformat" | "refstorage" | "partialclone" | "noop" | "preciousobjects"
        ),
        ("remote", true) => matches!(
            key,
            "url"
                | "pushurl"
                | "fetch"
                | "push"
                | "tagopt"
                | "prune"
                | "prunetags"
                | "mirror"
                | "skipdefaultupdate"
                | "skipfetchall"
                | "promisor"
                | "partialclonefilter"
        ),
        ("branch", true) => matches!(
            key,
            "remote" | "pushremote" | "merge" | "rebase" | "description"
        ),
        ("submodule", true) => matches!(key, "url" | "active" | "path" | "branch"),
        ("user", false) => matches!(key, "name" | "email" | "signingkey" | "useconfigonly"),
        ("init", false) => key == "defaultbranch",
        // Signing is off by the tool's own settings, which outrank these.
        ("commit" | "tag", false) => key == "gpgsign",
        ("pull", false) => matches!(key, "rebase" | "ff"),
        ("push", false) => matches!(key, "default" | "autosetupremote" | "followtags"),
        ("fetch", false) => matches!(key, "prune" | "prunetags" | "writecommitgraph"),
        ("merge", false) => matches!(key, "ff" | "conflictstyle"),
        ("index", false) => matches!(key, "sparse" | "version" | "skiphash"),
        // Names for colours, and LFS's own bookkeeping (its programs are `filter.lfs.*`). Not
        // `alias.*`: git expands an alias for every `git <name>` it runs inside (a merge
        // strategy's `git merge-<name>`), and `!` aliases are shell commands.
        // builtins are allowed), and LFS's own bookkeeping (its programs are `filter.lfs.*`).
        ("color" | "advice" | "i18n" | "lfs", _) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files the model made into named pipes (`.git`, `commondir`, a todo list) are read as
    /// empty, at once, not waited on: the checks run on a blocking thread, which a pipe would
    /// hold until a writer came.
    #[test]
    fn pipes_in_a_repository_are_not_waited_on() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        let fifo = |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        };
        fifo(&root.join(".git"));
        assert_eq!(git_dir(root, root), None, "a `.git` that is a pipe");
        std::fs::remove_file(root.join(".git")).expect("rm");
        let git = root.join(".git");
        std::fs::create_dir_all(git.join("rebase-merge")).expect("git dir");
        fifo(&git.join("commondir"));
        fifo(&git.join("rebase-merge/git-rebase-todo"));
        assert_eq!(git_dir(root, root), Some(git.clone()));
        assert_eq!(git_dir_problem(root, &git), None);
        assert_eq!(sequencer_problem(&git), None);
    }

    #[test]
    fn a_fresh_clone_runs_and_program_or_place_settings_are_refused() {
        for ok in [
            "core.repositoryformatversion",
            "core.bare",
            "remote.origin.url",
            "remote.my.fork.fetch",
            "branch.main.merge",
            "user.email",
            "extensions.objectformat",
            "color.ui",
        ] {
            assert!(allowed(ok), "{ok}");
        }
        for refused in [
            "diff.external",
            "diff.pdf.textconv",
            "filter.x.clean",
            "filter.lfs.smudge",
            "remote.loc.uploadpack",
            "remote.loc.receivepack",
            "remote.loc.vcs",
            "core.worktree",
            "core.sshcommand",
            "core.askpass",
            "core.alternaterefscommand",
            "include.path",
            "includeif.gitdir:/x.path",
            "merge.ours.driver",
            "submodule.x.update",
            "credential.helper",
            "gpg.program",
            "log.showsignature",
            "url.file:///x.insteadof",
            "http.proxy",
            "nosection",
            "alias.merge-foo",
        ] {
            assert!(!allowed(refused), "{refused}");
        }
    }

    #[test]
    fn a_listing_names_the_settings_refused_and_a_configuration_outside() {
        let root = Path::new("/ws");
        let listing = |records: &[(&str, &str, &str)]| {
            let mut out = Vec::new();
            for (scope, origin, name) in records {
                for field in [scope, origin, name] {
                    out.extend_from_slice(field.as_bytes());
                    out.push(0);
                }
            }
            out
        };
        let clean = listing(&[
            ("command", "command line:", "core.hookspath"),
            ("local", "file:.git/config", "core.bare"),
            ("local", "file:.git/config", "remote.origin.url"),
        ]);
        assert_eq!(read(&clean, Path::new("/ws/repo"), root, true), Ok(vec![]));
        let hostile = listing(&[
            ("local", "file:.git/config", "diff.external"),
            ("local", "file:.git/config", "diff.external"),
            ("local", "file:/elsewhere/.git/config", "core.bare"),
            ("local", "file:../../x", "core.bare"),
        ]);
        let said = read(&hostile, Path::new("/ws/repo"), root, false).expect_err("refused");
        assert_eq!(said.matches("`diff.external`").count(), 1, "{said}");
        assert!(said.contains("/elsewhere/.git/config"), "{said}");
        assert!(said.contains("../../x"), "{said}");
        // Inside, however it is spelled.
        let inside = listing(&[
            ("local", "file:/ws/repo/.git/config", "core.bare"),
            ("local", "file:../.git/config", "core.bare"),
        ]);
        assert_eq!(
            read(&inside, Path::new("/ws/repo/sub"), root, false),
            Ok(vec![])
        );
    }

    #[test]
    fn remotes_urls_name_the_local_repositories_to_check_or_are_refused() {
        let root = Path::new("/ws");
        let listing = |records: &[(&str, &str)]| {
            let mut out = Vec::new();
            for (name, value) in records {
                let entry = format!("local\0file:.git/config\0{name}\n{value}\0");
                out.extend_from_slice(entry.as_bytes());
            }
            out
        };
        let fine = listing(&[
            ("remote.origin.url", "https://example.com/x.git"),
            ("remote.peer.url", "../peer"),
            ("remote.peer.pushurl", "/ws/pushed"),
            ("branch.main.remote", "peer"),
            ("branch.dev.remote", "."),
        ]);
        assert_eq!(
            read(&fine, Path::new("/ws/repo"), root, true),
            Ok(vec![
                ("peer".to_owned(), PathBuf::from("/ws/peer")),
                ("peer".to_owned(), PathBuf::from("/ws/pushed"))
            ])
        );
        for (name, url) in [
            ("remote.out.url", "/elsewhere/repo"),
            ("remote.out.pushurl", "../../up"),
            ("remote.x.url", "ext::sh -c id"),
            ("remote.x.url", "file:///ws/peer"),
            ("remote.x.url", "git@example.com:x.git"),
            ("branch.main.remote", "/elsewhere/repo"),
            ("branch.main.pushremote", "../../up"),
        ] {
            let listed = listing(&[(name, url)]);
            let said = read(&listed, Path::new("/ws/repo"), root, true).expect_err("refused");
            assert!(said.contains(name) && said.contains(url), "{said}");
            // A call that talks to no other repository does not use them.
            assert_eq!(
                read(&listed, Path::new("/ws/repo"), root, false),
                Ok(vec![])
            );
        }
    }
}
