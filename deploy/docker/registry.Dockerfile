# syntax=docker/dockerfile:1
#
# registry-svc: the agent registry (gRPC 50051, Prometheus /metrics 9465).
#
# Build from the repository root (the build context is the whole Cargo workspace, filtered by
# ../../.dockerignore); `docker compose -f deploy/compose.yaml build` does this for all three:
#   docker build -f deploy/docker/registry.Dockerfile -t taskforce/registry-svc:dev .
#
# Runtime base: gcr.io/distroless/cc-debian12:nonroot (glibc, libgcc_s, CA certificates, tzdata,
# /etc/passwd with `nonroot` = 65532; no shell, no package manager) weighs about 9 MB compressed.
# With the stripped registry-svc, the `taskforce` CLI for the health check and the configs/ seed,
# the image is 23.7 MB compressed (scripts/image-sizes.sh), under the 60 MB budget.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# ---- build -------------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# The release profile keeps line tables (binaries of ~110 MB); images keep the symbols (readable
# backtraces) and drop the debug info (~25 MB).
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
# BuildKit cache mounts: the crates.io index and downloads and the target dir survive between
# builds (shared by the three images: `sharing=locked` lets parallel builds take turns), so a
# source change recompiles only the workspace crates. The target dir is a cache mount, not part
# of the layer, so the binaries are copied out of it in the same step.
RUN --mount=type=cache,id=taskforce-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=taskforce-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=taskforce-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p registry-svc -p taskforce-cli \
    && install -D -m 0755 -t /out/bin target/release/registry-svc target/release/taskforce
# The state directories, owned by the runtime user: a named volume mounted on one starts as a
# copy of it (contents, owner and mode), so the non-root registry can write to it.
RUN install -d -m 0750 -o 65532 -g 65532 /out/state/config /out/state/data

# ---- runtime -----------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/state/ /var/lib/taskforce/
# The repository's configs/ seeds the config dir: profiles (*.yaml), custom/ agents, catalog/.
# Docker copies it into the `registry-config` volume the first time the volume is mounted; from
# then on the volume is the source of truth (agents created over REST are written there).
COPY --chown=65532:65532 configs/ /var/lib/taskforce/config/
# The executor's LLM config, as in its image: which variables hold the model providers' keys.
COPY configs/llm_config.yaml /etc/taskforce/llm_config.yaml
USER 65532:65532
WORKDIR /var/lib/taskforce
EXPOSE 50051 9465
# No init such as tini: a service started as PID 1 is its own (it starts itself again as its
# child and stays PID 1 to reap what a killed metadata task left behind and pass on SIGTERM),
# and unlike tini it keeps the container's environment (the service token, the API keys)
# unreadable to the programs it starts.
ENTRYPOINT ["/usr/local/bin/registry-svc"]
# Container defaults (deploy/compose.yaml and deploy/k8s/ pass the same flags explicitly).
CMD ["--listen", "0.0.0.0:50051", "--config-dir", "/var/lib/taskforce/config", "--data-dir", "/var/lib/taskforce/data", "--llm-config", "/etc/taskforce/llm_config.yaml", "--metrics-listen", "0.0.0.0:9465"]
# No shell or curl in distroless: the `taskforce` CLI asks grpc.health.v1 about the registry
# service (exit 0 when SERVING: the cache is loaded).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/taskforce", "health", "--service", "taskforce.v1.AgentRegistry", "grpc://127.0.0.1:50051"]
