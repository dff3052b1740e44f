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
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    ExitCode::from(runtime.block_on(taskforce_cli::main(cli)))
}
