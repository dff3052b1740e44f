# syntax=docker/dockerfile:1
#
# executor-svc: runs agents (gRPC 50052, Prometheus /metrics and /readyz 9464).
#
# Build from the repository root (see registry.Dockerfile; compose builds all three):
#   docker build -f deploy/docker/executor.Dockerfile -t taskforce/executor-svc:dev .
#
# Runtime base: debian:bookworm-slim (about 28 MB compressed), not distroless: the native tools
# run real programs in the agent's workspace, `python3` (tool `python`) and `git` (tool `git`).
# `pwsh` (the optional `powershell` tool, offered only when `pwsh` is on PATH) is not installed.
# The built-in `m365` global MCP server needs Node.js (`npx`), which is not installed either:
# compose and the manifests set MCP_M365_ENABLE=0 (docs/deploy.md says how to add it).

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- build -------------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# Keep symbols, drop the line tables of the release profile (see registry.Dockerfile).
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
# Cache mounts shared with the other two images (see registry.Dockerfile).
RUN --mount=type=cache,id=taskforce-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=taskforce-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=taskforce-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p executor-svc -p taskforce-cli \
    && install -D -m 0755 -t /out/bin target/release/executor-svc target/release/taskforce-sandbox \
       target/release/taskforce

# ---- runtime -----------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
# python3 and git for the native tools, CA certificates for HTTPS model APIs and web tools.
# Versions come from the bookworm snapshot the base image was built with.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git python3 \
    && rm -rf /var/lib/apt/lists/*
# The same uid/gid as distroless `nonroot` (65532), so volumes and the Kubernetes security
# context are alike for all three services. Home: git and python may write caches there.
RUN groupadd --gid 65532 taskforce \
    && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/taskforce \
       --shell /usr/sbin/nologin taskforce \
    && install -d -m 0750 -o 65532 -g 65532 /var/lib/taskforce /var/lib/taskforce/executor
# taskforce-sandbox sits next to executor-svc, which starts python and git through it (resource
# limits, Landlock): README "How subprocess tools are confined".
COPY --from=build /out/bin/ /usr/local/bin/
# LLM providers and the global MCP servers file: the repository's, read-only. Mount another file
# over either to change it (compose: a bind mount; Kubernetes: the `executor-config` ConfigMap).
COPY configs/llm_config.yaml /etc/taskforce/llm_config.yaml
COPY configs/mcp/global.yaml /etc/taskforce/mcp/global.yaml
ENV PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
# Sessions (sled) and the default agent workspaces live in the data dir: a volume.
WORKDIR /var/lib/taskforce/executor
EXPOSE 50052 9464
# No init such as tini: a service started as PID 1 is its own (it starts itself again as its
# child and stays PID 1 to reap what tools left behind and pass on SIGTERM), and unlike tini it
# keeps the container's environment (the service token, the API keys, the providers' keys)
# unreadable to the tools and MCP servers it starts.
ENTRYPOINT ["/usr/local/bin/executor-svc"]
# Container defaults (deploy/compose.yaml and deploy/k8s/ pass the same flags explicitly); the
# registry URL comes from the environment (TASKFORCE_REGISTRY_URL).
CMD ["--listen", "0.0.0.0:50052", "--data-dir", "/var/lib/taskforce/executor", "--llm-config", "/etc/taskforce/llm_config.yaml", "--global-mcp-config", "/etc/taskforce/mcp/global.yaml", "--metrics-listen", "0.0.0.0:9464"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/taskforce", "health", "--service", "taskforce.v1.Executor", "grpc://127.0.0.1:50052"]
