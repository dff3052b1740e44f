//! `taskforce-sandbox`: confines itself (resource limits, Landlock or bubblewrap) and `exec`s a
//! tool's program. The executor starts every `python`, `git` and `powershell` subprocess through
//! it; see `executor_svc::tools::native::sandbox::launcher`.

fn main() -> std::process::ExitCode {
    executor_svc::tools::native::sandbox::launcher::run(std::env::args_os())
}
