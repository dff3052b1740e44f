#!/usr/bin/env bash
# Runs the Taskforce stack on embedded defaults: the registry (gRPC, sled cache in .tf-data/,
# agents from configs/) and the gateway (REST). No server to install, no API key.
# Ctrl-C stops everything. Ports: TASKFORCE_REGISTRY_PORT (50051), TASKFORCE_GATEWAY_PORT (8080).
# PROFILE=release builds optimised binaries (slower to build, faster to run).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-debug}
flag=(); [ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" -p registry-svc -p gateway --bins
bin=target/$profile
reg_port=${TASKFORCE_REGISTRY_PORT:-50051}
gw_port=${TASKFORCE_GATEWAY_PORT:-8080}
mkdir -p .tf-data
# Workspace metadata needs the `task` binary: the one scripts/install-test-deps.sh installed, else
# whatever `task` is on PATH (without one, metadata stays empty and the registry says so once).
if [ -z "${TASKFORCE_TASK_BIN:-}" ] && [ -x .tools/venv/bin/task ]; then
  export TASKFORCE_TASK_BIN="$PWD/.tools/venv/bin/task"
fi
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
trap 'exit 130' INT TERM
"$bin/registry-svc" --listen "127.0.0.1:$reg_port" --config-dir configs --data-dir .tf-data/registry &
pids+=($!)
"$bin/gateway" --listen "127.0.0.1:$gw_port" --registry-url "http://127.0.0.1:$reg_port" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$gw_port/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
cat <<MSG

Taskforce is up (agents from configs/, cache in .tf-data/; no LLM is needed for the registry).
  REST   http://127.0.0.1:$gw_port   try: curl -s http://127.0.0.1:$gw_port/api/v1/agents
  gRPC   127.0.0.1:$reg_port          try: grpcurl -plaintext 127.0.0.1:$reg_port list
  OpenAPI http://127.0.0.1:$gw_port/openapi.json
Ctrl-C stops both services.

MSG
wait -n "${pids[@]}"
