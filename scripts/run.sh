#!/usr/bin/env bash
# Runs the Taskforce stack on embedded defaults: the registry (gRPC, sled cache in .tf-data/,
# agents from configs/), the executor (gRPC; the LLM of configs/llm_config.yaml, whose default is
# the offline `scripted` provider, and its log says so; TASKFORCE_LLM_PROVIDER=openai with
# OPENAI_API_KEY, or editing that file, picks a real model) and the gateway (REST, MCP). No server
# to install, no API key. Ctrl-C stops everything.
# Ports: TASKFORCE_REGISTRY_PORT (50051), TASKFORCE_EXECUTOR_PORT (50052), TASKFORCE_GATEWAY_PORT
# (8080), and the Prometheus listeners TASKFORCE_REGISTRY_METRICS_PORT (9465) and
# TASKFORCE_EXECUTOR_METRICS_PORT (9464) (the gateway serves /metrics on its own port).
# PROFILE=release builds optimised binaries (slower to build, faster to run); CARGO_TARGET_DIR is
# where they are built and run from, as for cargo.
# TASKFORCE_CONFIG_DIR serves another config directory (e.g. configs/examples/orchestration); its
# llm_config.yaml is used, and its state goes to .tf-data/<name of the directory>.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-debug}
flag=(); [ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" -p registry-svc -p executor-svc -p gateway --bins
bin=${CARGO_TARGET_DIR:-target}/$profile
reg_port=${TASKFORCE_REGISTRY_PORT:-50051}
gw_port=${TASKFORCE_GATEWAY_PORT:-8080}
ex_port=${TASKFORCE_EXECUTOR_PORT:-50052}
reg_metrics=${TASKFORCE_REGISTRY_METRICS_PORT:-9465}
ex_metrics=${TASKFORCE_EXECUTOR_METRICS_PORT:-9464}
configs=${TASKFORCE_CONFIG_DIR:-configs}
data=.tf-data
[ "$configs" != configs ] && data=".tf-data/$(basename "$configs")"
mkdir -p "$data"
# Workspace metadata needs the `task` binary: the one scripts/install-test-deps.sh installed, else
# whatever `task` is on PATH (without one, metadata stays empty and the registry says so once).
if [ -z "${TASKFORCE_TASK_BIN:-}" ] && [ -x .tools/venv/bin/task ]; then
  export TASKFORCE_TASK_BIN="$PWD/.tools/venv/bin/task"
fi
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
trap 'exit 130' INT TERM
"$bin/registry-svc" --listen "127.0.0.1:$reg_port" --config-dir "$configs" --data-dir "$data/registry" \
  --metrics-listen "127.0.0.1:$reg_metrics" &
pids+=($!)
"$bin/executor-svc" --listen "127.0.0.1:$ex_port" --registry-url "http://127.0.0.1:$reg_port" \
  --data-dir "$data/executor" --llm-config "$configs/llm_config.yaml" \
  --global-mcp-config "$configs/mcp/global.yaml" --metrics-listen "127.0.0.1:$ex_metrics" &
pids+=($!)
"$bin/gateway" --listen "127.0.0.1:$gw_port" --registry-url "http://127.0.0.1:$reg_port" \
  --executor-url "http://127.0.0.1:$ex_port" &
pids+=($!)
# Ready when the gateway's /readyz says so (it checks the registry and the executor); a service
# that stopped (a port in use, a bad flag: its log above says why) stops the others.
status="is up"
for i in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$gw_port/readyz" >/dev/null 2>&1 && break
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run.sh: a service stopped before the stack was ready; its log above says why" >&2
      exit 1
    fi
  done
  if [ "$i" = 300 ]; then
    status="started, but http://127.0.0.1:$gw_port/readyz has not said ready within 60 s (see the logs above)"
  fi
  sleep 0.2
done
cat <<MSG

Taskforce $status (agents from $configs/, state in $data/; the executor's log says which LLM
provider it uses: by default the offline scripted one, whatever keys are set;
TASKFORCE_LLM_PROVIDER=openai with OPENAI_API_KEY picks a real model).
  REST      http://127.0.0.1:$gw_port   try: curl -s http://127.0.0.1:$gw_port/api/v1/agents
  MCP       http://127.0.0.1:$gw_port/mcp
  registry  127.0.0.1:$reg_port          try: grpcurl -plaintext 127.0.0.1:$reg_port list
  executor  127.0.0.1:$ex_port          try: grpcurl -plaintext -d '{"mission":"hello","agent_id":"invoice-extractor"}' 127.0.0.1:$ex_port taskforce.v1.Executor/Execute
  OpenAPI   http://127.0.0.1:$gw_port/openapi.json
  metrics   http://127.0.0.1:$ex_metrics/metrics (the executor's, Prometheus text format)
Ctrl-C stops all three services.

MSG
wait -n "${pids[@]}"
