//! Workspace metadata (seed 001): each task with a `desc` in the workspace's Taskfile
//! (`Taskfile.yml`, or another of the names `task` looks for: [`TASKFILES`]) is a field; its
//! value is what the task prints, collected with the real `task` binary. The tasks of the
//! Taskfiles it `includes:` are fields too, as `task --list-all --json` names them.
//!
//! Fields run in parallel (bounded by a semaphore shared by every collection), each under a
//! timeout, in the workspace directory, with a minimal environment (none of this service's
//! secrets), output capped. Results are cached per workspace for a TTL; concurrent requests for
//! the same workspace share one collection.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex, Once},
    time::{Duration, Instant},
};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};

/// A task's process group, killed whole when dropped: `KillOnDrop` alone kills only its leader
/// (the launcher or `task`), leaving what the task started running, one more per collection
/// that timed out or was dropped; and a task that ended may have left a member in the
/// background (`cmd &`). A group already gone is fine.
struct Group(Box<dyn process_wrap::tokio::ChildWrapper>);

impl Drop for Group {
    fn drop(&mut self) {
        // ESRCH: no such process group, every member has exited.
        if let Err(e) = self.0.start_kill()
            && e.raw_os_error() != Some(libc::ESRCH)
        {
            warn!(error = %e, "could not kill a task's process group");
        }
    }
}

/// How long reaping a killed task's process group may take before it is left to `KillOnDrop`.
const REAP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
use serde::Deserialize;
use serde_json::Value;
use taskforce_runtime::{
    env::{TOOL_ENV, minimal_command},
    sandbox::{Confine, ConnectPorts, LauncherArgs, ResourceLimits},
};
use tokio::{io::AsyncReadExt, sync::Semaphore};
use tracing::{debug, warn};

/// Largest output of one field that is read; more is an error.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// The names of a workspace's Taskfile, in the order `task` itself looks for them: the first
/// one there is the Taskfile (`Taskfile.dist.yml` is the committed one a user's own
/// `Taskfile.yml` overrides).
pub const TASKFILES: [&str; 8] = [
    "Taskfile.yml",
    "taskfile.yml",
    "Taskfile.yaml",
    "taskfile.yaml",
    "Taskfile.dist.yml",
    "taskfile.dist.yml",
    "Taskfile.dist.yaml",
    "taskfile.dist.yaml",
];

/// One metadata field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The task's `desc`.
    pub description: String,
    /// `meta.include_in_list` (default false).
    pub include_in_list: bool,
    /// Trimmed stdout: JSON when it parses as JSON, else a string; `None` when empty or failed.
    pub value: Option<Value>,
    /// Why there is no value (the command and the reason).
    pub error: Option<String>,
}

/// Every field of one workspace, by name.
pub type Metadata = BTreeMap<String, Field>;

/// Settings of the collector.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `task` program (a name looked up in `PATH`, or a path).
    pub task_bin: PathBuf,
    /// `taskforce-sandbox`: tasks run through it, confined as the executor's tools are
    /// (writes only in the workspace, TCP only to ports 53, 80 and 443, no capabilities).
    /// `None`: they run directly, which is said once.
    pub launcher: Option<PathBuf>,
    /// Timeout of one field.
    pub field_timeout: Duration,
    /// How long a workspace's result is reused.
    pub ttl: Duration,
    /// Fields that may run at once, across all workspaces.
    pub max_parallel: usize,
    /// What tasks may not read (the registry's data directory and API keys file), as the
    /// executor's tools may not read its own.
    pub hidden: Vec<PathBuf>,
}

type Shared = futures::future::Shared<futures::future::BoxFuture<'static, Arc<Metadata>>>;

/// Collects and caches workspace metadata.
pub struct Collector {
    settings: Settings,
    permits: Arc<Semaphore>,
    cache: Mutex<HashMap<PathBuf, (Instant, Shared)>>,
    missing_task: Once,
    unconfined: Once,
}

impl Collector {
    /// A collector with an empty cache.
    pub fn new(settings: Settings) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(settings.max_parallel.max(1))),
            settings,
            cache: Mutex::new(HashMap::new()),
            missing_task: Once::new(),
            unconfined: Once::new(),
        }
    }

    /// The metadata of `workspace`: from the cache while fresh (unless `force_refresh`), else
    /// collected now. Never fails: problems become empty metadata or per-field errors.
    pub async fn collect(self: &Arc<Self>, workspace: &Path, force_refresh: bool) -> Arc<Metadata> {
        let shared = {
            let mut cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let fresh = cache
                .get(workspace)
                .filter(|(at, _)| !force_refresh && at.elapsed() < self.settings.ttl)
                .map(|(_, f)| f.clone());
            match fresh {
                Some(f) => f,
                None => {
                    let this = Arc::clone(self);
                    let ws = workspace.to_path_buf();
                    // A task of its own, not only a shared future: a shared future runs only
                    // while someone awaits it, so a caller that left (a deadline, a client
                    // gone) would leave its tasks' processes and permits held, their timeouts
                    // unpolled, until the next caller. It ends by itself: every task it runs
                    // has the field timeout.
                    let collecting =
                        tokio::spawn(async move { Arc::new(this.collect_now(&ws).await) });
                    let fut: futures::future::BoxFuture<'static, Arc<Metadata>> =
                        Box::pin(async move {
                            collecting.await.unwrap_or_else(|e| {
                                warn!(error = %e, "a metadata collection ended early; no metadata");
                                Arc::new(Metadata::new())
                            })
                        });
                    let shared = futures::FutureExt::shared(fut);
                    cache.insert(workspace.to_path_buf(), (Instant::now(), shared.clone()));
                    shared
                }
            }
        };
        shared.await
    }

    async fn collect_now(&self, workspace: &Path) -> Metadata {
        let started = Instant::now();
        let Some((taskfile, tasks)) = self.declared_fields(workspace).await else {
            return Metadata::new();
        };
        let runs = tasks.into_iter().map(|(name, decl)| async move {
            let result = self.run_field(workspace, taskfile, &name, &decl).await;
            let (value, error) = match result {
                Ok(v) => (v, None),
                Err(e) => (None, Some(e)),
            };
            let field = Field {
                description: decl.desc,
                include_in_list: decl.meta.include_in_list,
                value,
                error,
            };
            (name, field)
        });
        let out: Metadata = futures::future::join_all(runs).await.into_iter().collect();
        debug!(workspace = %workspace.display(), fields = out.len(), elapsed_ms = started.elapsed().as_millis(), "collected workspace metadata");
        out
    }

    /// The workspace's Taskfile (the first of [`TASKFILES`] there) and its tasks with a `desc`,
    /// or `None` when there is no loadable Taskfile (or no `task`).
    async fn declared_fields(
        &self,
        workspace: &Path,
    ) -> Option<(&'static str, BTreeMap<String, TaskDecl>)> {
        let mut found = None;
        for name in TASKFILES {
            let path = workspace.join(name);
            match read_taskfile_bytes(&path).await {
                Ok(Some(bytes)) => {
                    found = Some((name, path, bytes));
                    break;
                }
                Ok(None) => {
                    warn!(path = %path.display(), max_bytes = crate::files::MAX_DEFINITION_BYTES, "Taskfile too large; no metadata");
                    return None;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // There but unreadable: `task` would stop at it too, so no later name is read.
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "Taskfile cannot be read; no metadata");
                    return None;
                }
            }
        }
        let Some((taskfile, path, bytes)) = found else {
            debug!(workspace = %workspace.display(), "no Taskfile; no metadata");
            return None;
        };
        let (mut fields, includes) = match taskfile_tasks(&bytes) {
            Ok(f) => f,
            Err(e) => {
                warn!(path = %path.display(), error = %e, "Taskfile cannot be loaded; no metadata");
                return None;
            }
        };
        if !self.task_available() {
            return None;
        }
        if includes {
            fields.extend(self.included_fields(workspace, taskfile).await);
        }
        Some((taskfile, fields))
    }

    /// The fields of the Taskfiles `taskfile` includes, named as `task` names them
    /// (`<namespace>:<task>`): `task --list-all --json` says which tasks there are, with their
    /// `desc`, and where each is written; `meta.include_in_list` and the command errors name
    /// come from that file when it is inside the workspace (one outside is not read here: its
    /// fields are not listed, and errors name `task <name>`). None when the listing fails,
    /// which is said.
    async fn included_fields(
        &self,
        workspace: &Path,
        taskfile: &str,
    ) -> BTreeMap<String, TaskDecl> {
        let shown = "task --list-all --json";
        let listing = match self
            .run_task(
                workspace,
                &["--taskfile", taskfile, "--list-all", "--json"],
                shown,
            )
            .await
            .and_then(|out| {
                serde_json::from_slice::<Listing>(&out)
                    .map_err(|e| format!("Command '{shown}' printed no task list: {e}"))
            }) {
            Ok(listing) => listing,
            Err(e) => {
                warn!(workspace = %workspace.display(), error = %e, "the included Taskfiles' tasks are no fields");
                return BTreeMap::new();
            }
        };
        let (Ok(root), Ok(inside)) = (
            tokio::fs::canonicalize(workspace.join(taskfile)).await,
            tokio::fs::canonicalize(workspace).await,
        ) else {
            return BTreeMap::new();
        };
        // Each included file's own fields, read once.
        let mut files: HashMap<PathBuf, BTreeMap<String, TaskDecl>> = HashMap::new();
        let mut out = BTreeMap::new();
        for task in listing.tasks {
            let Some(at) = task.location.map(|l| l.taskfile) else {
                continue;
            };
            let at = workspace.join(at);
            let at = tokio::fs::canonicalize(&at).await.unwrap_or(at);
            if at == root || task.desc.trim().is_empty() {
                continue;
            }
            if !files.contains_key(&at) {
                let declared = if at.starts_with(&inside) {
                    read_taskfile_bytes(&at)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|bytes| taskfile_tasks(&bytes).ok())
                        .map(|(fields, _)| fields)
                        .unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                files.insert(at.clone(), declared);
            }
            let declared = files.get(&at).and_then(|f| written_as(f, &task.name));
            let mut decl = declared.cloned().unwrap_or_default();
            decl.desc = task.desc;
            out.insert(task.name, decl);
        }
        out
    }

    fn task_available(&self) -> bool {
        let bin = &self.settings.task_bin;
        let found = which::which(bin).is_ok();
        if !found {
            self.missing_task.call_once(|| {
                warn!(task_bin = %bin.display(), "the `task` binary was not found; workspace metadata stays empty (install go-task, e.g. `pip install go-task-bin`)");
            });
        }
        found
    }

    /// Runs one task; `Ok(None)` for empty output, `Err` names the command and the reason.
    async fn run_field(
        &self,
        workspace: &Path,
        taskfile: &str,
        name: &str,
        decl: &TaskDecl,
    ) -> Result<Option<Value>, String> {
        let shown = decl.command_label(name);
        let out = self
            .run_task(
                workspace,
                &["--silent", "--taskfile", taskfile, name],
                &shown,
            )
            .await?;
        Ok(parse_value(&String::from_utf8_lossy(&out)))
    }

    /// Runs `task <args>` in `workspace` (confined, with the minimal environment, under the
    /// field timeout, its output capped) and gives what it printed; `Err` says why not,
    /// naming `shown` as the command.
    async fn run_task(
        &self,
        workspace: &Path,
        task_args: &[&str],
        shown: &str,
    ) -> Result<Vec<u8>, String> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| format!("Command '{shown}' was not run: the service is stopping"))?;
        // A task sees only a few variables of this process (never its service token). Its
        // commands come from the workspace, which the agent's own tools may write: it runs
        // confined like them.
        let mut cmd = match &self.settings.launcher {
            Some(launcher) => {
                // The limits and ports of the executor's tools, by default: a task is no more
                // trusted than the tool that may have written it.
                let mut args = LauncherArgs::new(
                    workspace,
                    Vec::new(),
                    &ResourceLimits::default(),
                    Confine::Landlock,
                    Path::new("bwrap"),
                );
                args.connect_ports = ConnectPorts::default();
                args.hidden.clone_from(&self.settings.hidden);
                args.command = vec![self.settings.task_bin.clone().into()];
                let mut cmd = tokio::process::Command::from(minimal_command(launcher, &TOOL_ENV));
                cmd.args(args.to_args());
                cmd
            }
            None => {
                self.unconfined.call_once(|| {
                    warn!("taskforce-sandbox was not found (--task-launcher): workspace metadata tasks run unconfined, as this service's user");
                });
                tokio::process::Command::from(minimal_command(&self.settings.task_bin, &TOOL_ENV))
            }
        };
        cmd.args(task_args)
            .current_dir(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut wrap = CommandWrap::from(cmd);
        wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
        let mut child = Group(
            wrap.spawn()
                .map_err(|e| format!("Command '{shown}' failed: could not start task: {e}"))?,
        );
        let timeout = self.settings.field_timeout;
        let (stdout, stderr) = (child.0.stdout().take(), child.0.stderr().take());
        let run = async {
            let (out, err) = tokio::join!(read_capped(stdout), read_capped(stderr));
            let status = child.0.wait().await;
            (out, err, status)
        };
        let Ok((out, err, status)) = tokio::time::timeout(timeout, run).await else {
            if let Err(e) = child.0.start_kill() {
                warn!(command = shown, error = %e, "could not kill a timed-out task's process group");
            } else if tokio::time::timeout(REAP_GRACE, child.0.wait())
                .await
                .is_err()
            {
                warn!(
                    command = shown,
                    "a timed-out task's process group did not exit after SIGKILL in time"
                );
            }
            return Err(format!(
                "Command '{shown}' timed out after {}",
                humanize(timeout)
            ));
        };
        // What it left in the background goes now, not when `child` is dropped.
        drop(child);
        let status = status.map_err(|e| format!("Command '{shown}' failed: {e}"))?;
        let (out, truncated) = out.map_err(|e| format!("Command '{shown}' failed: {e}"))?;
        if !status.success() {
            let why = err
                .ok()
                .map(|(e, _)| last_line(&e))
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| status.to_string());
            return Err(format!("Command '{shown}' failed: {why}"));
        }
        if truncated {
            return Err(format!(
                "Command '{shown}' printed more than {} KiB",
                OUTPUT_CAP / 1024
            ));
        }
        Ok(out)
    }
}

/// A Taskfile's bytes, read as the registry reads every YAML file it is given
/// ([`crate::files::read_at_most`]): a regular file only (a pipe would hold a collection
/// forever), not through a link (the agent's tools may write the workspace, and a link could
/// point at a file it may not read), at most [`crate::files::MAX_DEFINITION_BYTES`]
/// (`Ok(None)` past it).
async fn read_taskfile_bytes(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        crate::files::read_at_most(&path, crate::files::MAX_DEFINITION_BYTES)
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// Reads at most [`OUTPUT_CAP`] bytes, then drains the rest; says whether it cut.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    pipe: Option<R>,
) -> std::io::Result<(Vec<u8>, bool)> {
    let Some(mut pipe) = pipe else {
        return Ok((Vec::new(), false));
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut truncated = false;
    loop {
        let n = pipe.read(&mut chunk).await?;
        if n == 0 {
            return Ok((buf, truncated));
        }
        let room = OUTPUT_CAP.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..n.min(room)]);
        truncated |= n > room;
    }
}

/// Trimmed output as a value: JSON when it parses as JSON (`810`, `true`, `{"a":1}`), else the
/// string; `None` when empty.
///
/// An integer a double cannot hold exactly (beyond ±2^53: a snowflake id, `date +%s%N`) is
/// kept as the string of its digits: the value travels as `google.protobuf.Value` (a double),
/// and most JSON readers hold numbers as doubles too, so it would come back as another number.
pub fn parse_value(output: &str) -> Option<Value> {
    let trimmed = output.trim();
    if trimmed.is_empty() {
        return None;
    }
    // serde_json reads an integer beyond 64 bits as a rounded double: decided on the text.
    let digits = trimmed.strip_prefix('-').unwrap_or(trimmed);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.parse::<u64>().is_err()
    {
        return Some(Value::String(trimmed.to_owned()));
    }
    let mut value: Value =
        serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(trimmed.to_owned()));
    inexact_integers_as_strings(&mut value);
    Some(value)
}

/// The largest integer every double holds exactly (2^53).
const MAX_EXACT: u64 = 1 << 53;

/// Turns the integers inside `value` that a double cannot hold exactly into strings.
fn inexact_integers_as_strings(value: &mut Value) {
    match value {
        Value::Number(n) => {
            let inexact = n.as_u64().is_some_and(|u| u > MAX_EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_EXACT);
            if inexact {
                *value = Value::String(n.to_string());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(inexact_integers_as_strings),
        Value::Object(map) => map.values_mut().for_each(inexact_integers_as_strings),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

fn last_line(s: &[u8]) -> String {
    let text = String::from_utf8_lossy(s);
    let mut lines = text.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    // Task ends a failure with its own "task: Failed to run task ..." line; the command's own
    // complaint just before it says more ("gh: executable file not found in $PATH").
    let first = lines.next().unwrap_or("");
    let line = if first.starts_with("task: ") {
        lines
            .next()
            .unwrap_or_else(|| first.trim_start_matches("task: "))
    } else {
        first
    };
    line.chars().take(500).collect()
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The tasks of a Taskfile's text that are fields (those with a `desc`), and whether it
/// includes other Taskfiles.
/// Each task is read on its own: one this reader cannot make out (Task's shorthand `build: echo
/// x`, a shape of a newer Taskfile version) is no field, and the others still are.
fn taskfile_tasks(
    bytes: &[u8],
) -> Result<(BTreeMap<String, TaskDecl>, bool), crate::files::YamlError> {
    let file: Taskfile = crate::files::yaml(bytes)?;
    let includes = file.includes.as_mapping().is_some_and(|m| !m.is_empty());
    let fields = file
        .tasks
        .into_iter()
        .filter_map(|(name, task)| match serde_yaml::from_value::<TaskDecl>(task) {
            Ok(decl) => Some((name, decl)),
            Err(e) => {
                debug!(task = %name, error = %e, "a Taskfile task this reader cannot make out is no field");
                None
            }
        })
        .filter(|(_, t)| !t.desc.trim().is_empty() && !t.internal)
        .collect();
    Ok((fields, includes))
}

/// The task of an included Taskfile that `task` lists as `listed`: the one whose name is
/// `listed` (a flattened include) or ends it after a `:` (`<namespace>:<task>`, namespaces
/// nested), the longest such name.
fn written_as<'a>(fields: &'a BTreeMap<String, TaskDecl>, listed: &str) -> Option<&'a TaskDecl> {
    fields
        .iter()
        .filter(|(name, _)| {
            listed == name.as_str()
                || listed
                    .strip_suffix(name.as_str())
                    .is_some_and(|head| head.ends_with(':'))
        })
        .max_by_key(|(name, _)| name.len())
        .map(|(_, decl)| decl)
}

/// What `task --list-all --json` prints, the parts read here.
#[derive(Debug, Deserialize)]
struct Listing {
    #[serde(default)]
    tasks: Vec<ListedTask>,
}

#[derive(Debug, Deserialize)]
struct ListedTask {
    name: String,
    #[serde(default)]
    desc: String,
    location: Option<ListedAt>,
}

#[derive(Debug, Deserialize)]
struct ListedAt {
    taskfile: PathBuf,
}

/// Reads a Taskfile's text as a collection does: each field, by name, with its description and
/// `include_in_list` (no value yet), and the command its errors name. The entry point of the
/// fuzz targets in `fuzz/`; not part of the API.
#[doc(hidden)]
pub fn read_taskfile(
    bytes: &[u8],
) -> Result<BTreeMap<String, (Field, String)>, crate::files::YamlError> {
    Ok(taskfile_tasks(bytes)?
        .0
        .into_iter()
        .map(|(name, decl)| {
            let command = decl.command_label(&name);
            let field = Field {
                description: decl.desc,
                include_in_list: decl.meta.include_in_list,
                value: None,
                error: None,
            };
            (name, (field, command))
        })
        .collect())
}

/// The parts of a Taskfile that matter here.
#[derive(Debug, Default, Deserialize)]
struct Taskfile {
    #[serde(default)]
    tasks: BTreeMap<String, serde_yaml::Value>,
    /// Only whether there are any: `task` itself resolves them.
    #[serde(default)]
    includes: serde_yaml::Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct TaskDecl {
    #[serde(default)]
    desc: String,
    #[serde(default)]
    meta: TaskMeta,
    #[serde(default)]
    cmds: Vec<serde_yaml::Value>,
    /// `internal: true`: a task only other tasks call (`task` refuses to run it by name, and
    /// `task --list` hides it), so no field.
    #[serde(default, deserialize_with = "truthy")]
    internal: bool,
}

impl TaskDecl {
    /// The first command as written (what a user recognises), else `task <name>`.
    fn command_label(&self, name: &str) -> String {
        let first = self.cmds.first().and_then(|c| match c {
            serde_yaml::Value::String(s) => Some(s.clone()),
            serde_yaml::Value::Mapping(m) => {
                m.get("cmd").and_then(|v| v.as_str()).map(str::to_owned)
            }
            _ => None,
        });
        first.map_or_else(|| format!("task {name}"), |c| c.trim().to_owned())
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct TaskMeta {
    #[serde(default, deserialize_with = "truthy")]
    include_in_list: bool,
}

/// A switch as Task reads one: a boolean, or YAML 1.1's words for one (`yes`, `on`, ...).
fn truthy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match serde_yaml::Value::deserialize(d)? {
        serde_yaml::Value::Bool(b) => b,
        serde_yaml::Value::String(s) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "true" | "yes" | "y" | "on"
        ),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn internal_tasks_are_no_fields() {
        let taskfile = b"version: '3'\ntasks:\n  shown:\n    desc: Shown\n    cmds: [echo s]\n  \
hidden:\n    desc: Hidden\n    internal: true\n    cmds: [echo h]\n";
        let fields = read_taskfile(taskfile).expect("reads");
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["shown"]);
    }

    #[test]
    fn output_is_typed_when_it_is_json() {
        assert_eq!(parse_value(" 810\n"), Some(json!(810)));
        assert_eq!(parse_value("true"), Some(json!(true)));
        assert_eq!(parse_value("main\n"), Some(json!("main")));
        assert_eq!(parse_value("{\"a\": 1}"), Some(json!({"a": 1})));
        assert_eq!(parse_value("  \n"), None);
        // Integers a double cannot hold exactly keep their digits (audit 8b F2).
        assert_eq!(
            parse_value("9007199254740992"),
            Some(json!(9_007_199_254_740_992_u64))
        );
        assert_eq!(
            parse_value("9007199254740993"),
            Some(json!("9007199254740993"))
        );
        assert_eq!(
            parse_value("-9007199254740993"),
            Some(json!("-9007199254740993"))
        );
        assert_eq!(
            parse_value("1180591620717411303424"),
            Some(json!("1180591620717411303424"))
        );
        assert_eq!(
            parse_value(r#"{"id": 1234567890123456789, "n": [1, 18446744073709551615]}"#),
            Some(json!({"id": "1234567890123456789", "n": [1, "18446744073709551615"]}))
        );
        assert_eq!(parse_value("1.5"), Some(json!(1.5)));
    }

    #[test]
    fn taskfile_meta_and_commands_are_read() {
        let (tasks, includes) = taskfile_tasks(
            b"version: '3'\ntasks:\n  pr:\n    desc: PR number\n    meta: {include_in_list: true}\n    cmds: [gh pr view --json number]\n  helper:\n    desc: Helps\n    cmds: [{cmd: echo hi}]\n",
        )
        .unwrap_or_default();
        assert!(!includes);
        let pr = &tasks["pr"];
        assert!(pr.meta.include_in_list);
        assert_eq!(pr.command_label("pr"), "gh pr view --json number");
        assert_eq!(tasks["helper"].command_label("helper"), "echo hi");
        assert!(!tasks["helper"].meta.include_in_list);
    }

    #[test]
    fn a_task_this_reader_cannot_make_out_leaves_the_others() {
        // Task's shorthand task and YAML 1.1's `yes` (both valid for the real `task`).
        let (tasks, _) = taskfile_tasks(
            b"version: '3'\ntasks:\n  build: echo x\n  list: [echo a, echo b]\n  branch:\n    desc: Branch\n    meta: {include_in_list: yes}\n    cmds: [git branch --show-current]\n  odd:\n    desc: Odd\n    cmds: 7\n",
        )
        .expect("the file reads");
        let names: Vec<&str> = tasks.keys().map(String::as_str).collect();
        assert_eq!(names, ["branch"]);
        assert!(tasks["branch"].meta.include_in_list);
    }

    #[test]
    fn included_tasks_are_found_by_the_name_task_lists() {
        let (tasks, includes) = taskfile_tasks(
            b"version: '3'\nincludes:\n  sub: ./sub\ntasks:\n  b:\n    desc: B\n    cmds: [echo b]\n  lint:b:\n    desc: Lint B\n    meta: {include_in_list: true}\n    cmds: [echo lb]\n",
        )
        .expect("the file reads");
        assert!(includes);
        let label = |listed: &str| written_as(&tasks, listed).map(|d| d.command_label(listed));
        assert_eq!(label("sub:b").as_deref(), Some("echo b"));
        assert_eq!(label("b").as_deref(), Some("echo b"), "a flattened include");
        assert_eq!(
            label("a:sub:lint:b").as_deref(),
            Some("echo lb"),
            "the longest name"
        );
        assert_eq!(label("sub:xb"), None);
        assert_eq!(label("c"), None);
        let (_, none) = taskfile_tasks(b"version: '3'\nincludes: {}\ntasks: {}\n").expect("reads");
        assert!(!none, "an empty includes");
    }

    #[test]
    fn failure_reason_is_the_commands_own_last_line() {
        assert_eq!(
            last_line(b"oops\ntask: Failed to run task \"x\": exit status 3\n"),
            "oops"
        );
        assert_eq!(
            last_line(b"task: Failed to run task \"x\": exit status 3\n"),
            "Failed to run task \"x\": exit status 3"
        );
        assert_eq!(last_line(b"plain failure\n\n"), "plain failure");
    }
}
