//! `taskforce-sandbox`: confines itself (resource limits, Landlock or bubblewrap) and runs a
//! tool's program, killing what it leaves outside its process group when it ends. The executor starts every `python`, `git` and `powershell` subprocess through
//! it; see `executor_svc::tools::native::sandbox::launcher`.

fn main() -> std::process::ExitCode {
    executor_svc::tools::native::sandbox::launcher::run(std::env::args_os())
}
