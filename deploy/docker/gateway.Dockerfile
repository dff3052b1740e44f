# syntax=docker/dockerfile:1
#
# gateway: REST, SSE and MCP (streamable HTTP) on 8080, Prometheus at /metrics on the same port.
#
# Build from the repository root (see registry.Dockerfile; compose builds all three):
#   docker build -f deploy/docker/gateway.Dockerfile -t taskforce/gateway:dev .
#
# Runtime base: gcr.io/distroless/cc-debian12:nonroot, about 9 MB compressed (glibc, libgcc_s,
# CA certificates; no shell). With the stripped gateway and the `taskforce` CLI for the health
# check the image is 20.0 MB compressed (scripts/image-sizes.sh), under the 60 MB budget.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

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
    cargo build --release --locked -p gateway -p taskforce-cli \
    && install -D -m 0755 -t /out/bin target/release/gateway target/release/taskforce

# ---- runtime -----------------------------------------------------------------------------------
# The gateway keeps no state: no volume, nothing to write.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/bin/ /usr/local/bin/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway"]
# Container defaults; the registry and executor URLs come from the environment
# (TASKFORCE_REGISTRY_URL, TASKFORCE_EXECUTOR_URL), see deploy/compose.yaml.
CMD ["--listen", "0.0.0.0:8080"]
# `/readyz` is 200 once the registry and at least one executor answer SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/taskforce", "health", "http://127.0.0.1:8080/readyz"]
