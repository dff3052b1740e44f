//! `taskforce` binary: parse the command line, run the command on a single-threaded runtime
//! (a CLI waits on one thing at a time, and starts faster without a thread pool), exit with its
//! code.

use std::process::ExitCode;

use clap::Parser;
use taskforce_cli::{EXIT_FAILED, EXIT_USAGE, args::Cli};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; anything else is bad usage (exit 64, so
            // that 2 keeps meaning "a run paused on a question").
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // With --json, the error body every other error has, for the script reading it.
            if std::env::args_os().skip(1).any(|a| a == "--json") {
                let message = sentence(&e.render().to_string());
                taskforce_cli::say(
                    &taskforce_cli::error::Error::Usage(message)
                        .to_json()
                        .to_string(),
                );
            } else {
                let _ = e.print();
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            taskforce_cli::say(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    ExitCode::from(runtime.block_on(taskforce_cli::main(cli)))
}

/// clap's error as one line: what it says before the usage and tips, without `error: `.
fn sentence(rendered: &str) -> String {
    let said: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    let said = said.join(" ");
    said.strip_prefix("error: ").unwrap_or(&said).to_owned()
}
