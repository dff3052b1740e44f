//! `taskforce`, the command line of Taskforce: agents (list, show, create, update, validate,
//! delete), the tool
//! catalog, runs streamed as they happen, answers to paused runs, sessions, and health probes;
//! through the gateway (REST and SSE, the default) or straight over gRPC (`--grpc`).
//!
//! Human-readable output by default; `--json` prints one JSON object per result on stdout (the
//! gateway's shapes, in either mode), one event per line for a run, and errors as the REST
//! error body on stderr.
//!
//! # Layout
//! - [`args`]: the command line (clap), flags with environment fallbacks.
//! - [`backend`]: the operations, over the gateway or gRPC.
//! - [`gateway`]: the REST client and SSE run streams.
//! - [`grpc`]: the registry and executor clients.
//! - [`convert`]: protobuf → the gateway's JSON shapes; the create body → `AgentSpec`.
//! - [`definition`]: an agent YAML file → the create body.
//! - [`run`]: following a run's events, and its exit code.
//! - [`render`]: tables and views for people.
//! - [`health`]: `health grpc://…` / `health http://…`.
//! - [`error`]: what went wrong, for people and as JSON.

pub mod args;
pub mod backend;
pub mod convert;
pub mod definition;
pub mod error;
pub mod gateway;
pub mod grpc;
pub mod health;
pub mod render;
pub mod run;

use std::io::Write;

use serde_json::{Value, json};

use crate::{
    args::{AgentsCommand, AnswerArgs, Cli, Command, Connection, RunArgs, SessionsCommand},
    backend::{AnswerBody, Backend, ExecuteBody},
    error::{Error, Result},
};

/// Exit code: done, or a run completed.
pub const EXIT_OK: u8 = 0;
/// Exit code: an error, or a run that failed or was cancelled.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: a run paused on a question.
pub const EXIT_PAUSED: u8 = 2;
/// Exit code: bad usage (clap's own 2 would read as "paused").
pub const EXIT_USAGE: u8 = 64;
/// Exit code: interrupted by Ctrl-C (the run is cancelled with the connection).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Runs one command; prints its result on stdout and errors on stderr; answers the exit code.
pub async fn main(cli: Cli) -> u8 {
    let json = cli.json;
    let streams = matches!(cli.command, Command::Run(_) | Command::Answer(_));
    let result = tokio::select! {
        r = dispatch(cli) => r,
        _ = tokio::signal::ctrl_c() => {
            let message = if streams {
                "interrupted (Ctrl-C); the run is cancelled with its stream"
            } else {
                "interrupted (Ctrl-C)"
            };
            say_stopped("interrupted", message, json);
            return EXIT_INTERRUPTED;
        }
    };
    match result {
        Ok(code) => code,
        // A run's output closed (`| head`): the stream goes with it, and so does the run.
        Err(e) if e.is_broken_pipe() && streams => {
            say_stopped(
                "output_closed",
                "the output was closed; the run is cancelled with its stream",
                json,
            );
            EXIT_FAILED
        }
        // Anything else whose reader has read enough (`agents list | head`) is done.
        Err(e) if e.is_broken_pipe() => EXIT_OK,
        Err(e) => {
            say(&if json {
                e.to_json().to_string()
            } else {
                e.render()
            });
            e.exit_code()
        }
    }
}

/// Writes `line` on stderr. Not `eprintln!`, which panics when stderr is closed (`2>&1 | head`).
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Says on stderr why the CLI stopped before a command's end (as the error body with `--json`),
/// naming the session of a run being followed (closing its stream cancels it).
fn say_stopped(code: &str, message: &str, json: bool) {
    let session = run::following();
    let line = if json {
        let mut body = json!({"error": code, "message": message});
        if !session.is_empty() {
            body["session_id"] = Value::String(session);
        }
        body.to_string()
    } else if session.is_empty() {
        format!("\n{message}")
    } else {
        format!(
            "\n{message}\nsession {session}: `taskforce sessions show {session}` shows how it ended"
        )
    };
    say(&line);
}

async fn dispatch(cli: Cli) -> Result<u8> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let json = cli.json;
    if let Command::Health(h) = &cli.command {
        let timeout = cli.conn.timeout.unwrap_or(args::DEFAULT_HEALTH_TIMEOUT);
        let said = health::check(&h.target, &h.service, timeout).await?;
        if json {
            writeln!(
                out,
                "{}",
                json!({"target": h.target, "healthy": true, "status": said})
            )?;
        } else {
            writeln!(out, "{}: {said}", h.target)?;
        }
        return Ok(EXIT_OK);
    }
    let backend = Backend::new(&cli.conn)?;
    let hint = answer_hint(&cli.conn);
    match cli.command {
        Command::Agents(cmd) => agents(&backend, cmd, &mut out, json).await,
        Command::Tools => {
            let catalog = backend.tools().await?;
            show(&mut out, json, &catalog, render::tools)
        }
        Command::Run(args) => run_mission(&backend, args, &mut out, json, &hint).await,
        Command::Answer(args) => answer(&backend, args, &mut out, json, &hint).await,
        Command::Cancel { session } => {
            let answer = backend.cancel(&session).await?;
            show(&mut out, json, &answer, |out, answer| {
                if answer["cancelled"] == Value::Bool(true) {
                    writeln!(out, "session {session}: cancelled")
                } else {
                    writeln!(
                        out,
                        "session {session}: nothing to cancel (no live run, no question waiting)"
                    )
                }
            })
        }
        Command::Sessions(SessionsCommand::Show { id }) => {
            let session = backend.session(&id).await?;
            show(&mut out, json, &session, render::session)
        }
        Command::Sessions(SessionsCommand::Delete { id }) => {
            backend.delete_session(&id).await?;
            let answer = json!({"session_id": id, "deleted": true});
            show(&mut out, json, &answer, |out, _| {
                writeln!(out, "session {id}: deleted")
            })
        }
        Command::Sessions(SessionsCommand::List(args)) => {
            let list = backend.sessions(&args).await?;
            show(&mut out, json, &list, render::sessions)
        }
        Command::Health(_) => Ok(EXIT_OK),
    }
}

/// Prints `value` as one JSON line, or through `human`.
fn show<W: Write>(
    out: &mut W,
    json: bool,
    value: &Value,
    human: impl FnOnce(&mut W, &Value) -> std::io::Result<()>,
) -> Result<u8> {
    if json {
        writeln!(out, "{value}")?;
    } else {
        human(out, value)?;
    }
    Ok(EXIT_OK)
}

async fn agents(
    backend: &Backend,
    cmd: AgentsCommand,
    out: &mut impl Write,
    json: bool,
) -> Result<u8> {
    match cmd {
        AgentsCommand::List { source } => {
            let list = backend.list_agents(source).await?;
            show(out, json, &list, render::agents)
        }
        AgentsCommand::Show { id } => {
            let agent = backend.get_agent(&id).await?;
            show(out, json, &agent, render::agent)
        }
        AgentsCommand::Create { file } => {
            let body = definition::load(&file)?.body;
            let agent = backend.create_agent(body).await?;
            show(out, json, &agent, |out, a| saved(out, "created", a))
        }
        AgentsCommand::Update {
            file,
            if_version,
            force,
        } => {
            let definition = definition::load(&file)?;
            let id = definition.agent_id()?.to_owned();
            let expected = match (if_version, force) {
                (_, true) => None,
                (Some(version), false) => Some(version),
                (None, false) => definition.version,
            };
            let agent = backend
                .update_agent(&id, definition.body, expected.as_deref())
                .await?;
            show(out, json, &agent, |out, a| saved(out, "updated", a))
        }
        AgentsCommand::Validate { file } => {
            let body = definition::load(&file)?.body;
            let id = body["agent_id"].as_str().unwrap_or_default().to_owned();
            let checked = backend.validate_agent(body).await?;
            show(out, json, &checked, |out, c| {
                render::validation(out, &id, c)
            })
        }
        AgentsCommand::Delete { id, if_version } => {
            backend.delete_agent(&id, if_version.as_deref()).await?;
            let result = json!({"agent_id": id, "deleted": true});
            show(out, json, &result, |out, _| {
                writeln!(out, "deleted agent {id}")
            })
        }
    }
}

/// The human answer of a save: `created agent ID (version V)`, and the save's warnings on
/// stderr (beside the result, not in it: a script reading stdout gets the result only).
fn saved(out: &mut impl Write, done: &str, agent: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{done} agent {} (version {})",
        render::text(&agent["agent_id"]),
        render::text(&agent["version"])
    )?;
    for warning in agent["warnings"].as_array().into_iter().flatten() {
        say(&format!("warning: {}", render::text(warning)));
    }
    Ok(())
}

/// The command that answers a question, reaching the services as this invocation did (so it
/// can be pasted as it is).
fn answer_hint(conn: &Connection) -> String {
    let mut words = vec!["taskforce".to_owned()];
    words.extend(conn.repeat_flags(|var| std::env::var(var).ok()));
    words.push("answer".to_owned());
    words.join(" ")
}

async fn run_mission(
    backend: &Backend,
    args: RunArgs,
    out: &mut impl Write,
    json: bool,
    hint: &str,
) -> Result<u8> {
    if args.mission.trim().is_empty() {
        return Err(Error::Usage("the mission must not be empty".to_owned()));
    }
    // `--session` continues a session: a mistyped or expired id must not start an empty
    // conversation that looks like a continued one (the API allows new ids; this flag does not).
    if let Some(id) = &args.session {
        backend.session(id).await.map_err(|e| match e {
            Error::Api { status, mut body } if body["error"] == "not_found" => {
                body["message"] = Value::String(format!(
                    "session `{id}` does not exist, so there is nothing to continue; leave out \
                     --session to start a new one"
                ));
                Error::Api { status, body }
            }
            other => other,
        })?;
    }
    let body = ExecuteBody {
        mission: args.mission,
        agent_id: args.agent,
        profile: args.profile,
        session_id: args.session,
        model: args.model,
        mode: args.mode,
        confirmations: args.confirmations,
    };
    let events = backend.execute(&body).await?;
    follow(events, out, json, hint).await
}

/// Follows a run's stream to its end ([`run::follow`]), saying on stderr why a run failed or
/// was cancelled; the run's exit code.
async fn follow(
    events: backend::EventStream,
    out: &mut impl Write,
    json: bool,
    hint: &str,
) -> Result<u8> {
    let outcome = run::follow(events, out, json, hint).await?;
    if let Some(line) = outcome.stderr_line(json) {
        say(&line);
    }
    Ok(outcome.exit_code())
}

async fn answer(
    backend: &Backend,
    args: AnswerArgs,
    out: &mut impl Write,
    json: bool,
    hint: &str,
) -> Result<u8> {
    let body = AnswerBody {
        answer: args.answer.unwrap_or_default(),
        answers: args.set.into_iter().collect(),
        call_id: args.call_id,
        mode: args.mode,
        confirmations: args.confirmations,
    };
    if body.answer.trim().is_empty() && body.answers.is_empty() {
        return Err(Error::Usage(
            "give an answer, or --set KEY=VALUE for each item".to_owned(),
        ));
    }
    let events = backend.answer(&args.session, &body).await?;
    follow(events, out, json, hint).await
}
