//! Flags with environment fallbacks; the defaults work from the repository root on a laptop.
//! Ranges are checked by clap, so a bad value stops the registry at start naming the flag.

use std::{net::SocketAddr, path::PathBuf};

/// registry-svc configuration.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "registry-svc", about = "Taskforce agent registry (gRPC)")]
pub struct Config {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "TASKFORCE_REGISTRY_LISTEN",
        default_value = "127.0.0.1:50051"
    )]
    pub listen: SocketAddr,
    /// The config directory: profiles in it, custom agents in its `custom/`.
    #[arg(long, env = "TASKFORCE_CONFIG_DIR", default_value = "configs")]
    pub config_dir: PathBuf,
    /// The executor's `llm_config.yaml`: the variables it reads model providers' keys from are
    /// never an MCP server's to read (refused when an agent is saved). Default:
    /// `<config-dir>/llm_config.yaml` when there is one; a file named here must exist.
    #[arg(long, env = "TASKFORCE_REGISTRY_LLM_CONFIG")]
    pub llm_config: Option<PathBuf>,
    /// Where the sled cache lives (rebuilt from YAML when missing or broken).
    #[arg(
        long,
        env = "TASKFORCE_REGISTRY_DATA_DIR",
        default_value = ".tf-data/registry"
    )]
    pub data_dir: PathBuf,
    /// Globally configured MCP servers whose tools the catalog lists
    /// (default: `<config-dir>/catalog/mcp_servers.yaml`; a missing file means none).
    #[arg(long, env = "TASKFORCE_CATALOG_MCP_FILE")]
    pub catalog_mcp_file: Option<PathBuf>,
    /// Timeout of one MCP server's discovery, in milliseconds.
    #[arg(
        long,
        env = "TASKFORCE_MCP_DISCOVERY_TIMEOUT_MS",
        default_value_t = 5000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub mcp_discovery_timeout_ms: u64,
    /// Most mebibytes of custom agent definitions (as cached, about the size of their YAML
    /// files): a create or an update that would grow them past it is refused with 507
    /// `quota_exceeded`, so API writes cannot fill the disk. Files written by hand are served
    /// whatever their size, and count. 0: no limit.
    #[arg(long, env = "TASKFORCE_MAX_CUSTOM_AGENTS_MB", default_value_t = 128)]
    pub max_custom_agents_mb: u64,
    /// Seconds between full reconciles of the cache with the files (the watcher's backstop).
    #[arg(long, env = "TASKFORCE_RECONCILE_INTERVAL_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub reconcile_interval_secs: u64,
    /// Seconds between rediscoveries of the global MCP servers.
    #[arg(long, env = "TASKFORCE_CATALOG_REFRESH_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub catalog_refresh_secs: u64,
    /// The `task` binary that collects workspace metadata (a name in `PATH`, or a path).
    #[arg(long, env = "TASKFORCE_TASK_BIN", default_value = "task")]
    pub task_bin: std::path::PathBuf,
    /// `taskforce-sandbox`, the executor's tool launcher, through which metadata tasks run
    /// confined to their workspace (default: next to this binary, when it is there).
    #[arg(long, env = "TASKFORCE_TASK_LAUNCHER")]
    pub task_launcher: Option<PathBuf>,
    /// Timeout of one metadata field (one task), in milliseconds. The default keeps a
    /// `show_agent` with a hung task within seed 001's 3 s (the fields are collected at once).
    #[arg(long, env = "TASKFORCE_METADATA_TIMEOUT_MS", default_value_t = 2500,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub metadata_timeout_ms: u64,
    /// Seconds a workspace's metadata is reused before it is collected again.
    #[arg(long, env = "TASKFORCE_METADATA_TTL_SECS", default_value_t = 60)]
    pub metadata_ttl_secs: u64,
    /// Metadata tasks that may run at once, across all workspaces.
    #[arg(long, env = "TASKFORCE_METADATA_PARALLELISM", default_value_t = 32,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub metadata_parallelism: usize,
    /// Write the bound address to this file once listening (for tests and scripts using port 0).
    #[arg(long, env = "TASKFORCE_REGISTRY_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Where the registry serves Prometheus metrics (`/metrics`); empty: nowhere.
    #[arg(
        long,
        env = "TASKFORCE_REGISTRY_METRICS_LISTEN",
        default_value = "127.0.0.1:9465"
    )]
    pub metrics_listen: String,
    /// API keys and the service token (see `taskforce_runtime::auth`).
    #[command(flatten)]
    pub auth: taskforce_runtime::auth::AuthArgs,
}

impl Config {
    /// The metadata collector's settings.
    pub fn metadata_settings(&self) -> crate::metadata::Settings {
        crate::metadata::Settings {
            task_bin: self.task_bin.clone(),
            launcher: self.task_launcher.clone().or_else(|| {
                let beside = taskforce_runtime::sandbox::launcher_beside_exe();
                beside.is_file().then_some(beside)
            }),
            field_timeout: std::time::Duration::from_millis(self.metadata_timeout_ms),
            ttl: std::time::Duration::from_secs(self.metadata_ttl_secs),
            max_parallel: self.metadata_parallelism,
            hidden: taskforce_runtime::sandbox::hidden_paths(
                &self.data_dir,
                self.auth.api_keys_file.as_deref(),
            ),
        }
    }

    /// The global MCP servers file.
    pub fn catalog_file(&self) -> PathBuf {
        self.catalog_mcp_file
            .clone()
            .unwrap_or_else(|| self.config_dir.join("catalog").join("mcp_servers.yaml"))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Config;

    #[test]
    fn out_of_range_values_are_refused_naming_the_flag() {
        for flag in [
            "--metadata-timeout-ms",
            "--metadata-parallelism",
            "--reconcile-interval-secs",
            "--catalog-refresh-secs",
            "--mcp-discovery-timeout-ms",
        ] {
            let e = Config::try_parse_from(["registry-svc", flag, "0"]).expect_err(flag);
            assert!(e.to_string().contains(flag), "{e}");
        }
        assert!(Config::try_parse_from(["registry-svc", "--metadata-parallelism", "1"]).is_ok());
    }
}
