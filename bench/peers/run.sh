#!/usr/bin/env bash
# Side by side with LangGraph's agent server: one fake OpenAI-compatible model, one load client,
# the same workloads, one markdown table. Run from anywhere in a clone; see bench/peers/README.md.
#
# 1. a venv in bench/peers/.work/venv with the pinned peer and client (requirements.txt; PyPI,
#    the only network access; later runs reuse it)
# 2. the release binaries (`cargo build --release`; TASKFORCE_BIN_DIR=… uses others as they are)
# 3. the fake LLM on 127.0.0.1:$FAKE_LLM_PORT
# 4. LangGraph (`langgraph dev`, in-memory) alone, driven by load.py, stopped
# 5. Taskforce (registry, executor, gateway on ports the kernel picks) alone, driven by the same
#    load.py, stopped
# 6. load.py table → bench/peers/.work/results/<UTC stamp>/table.md, printed
#
# Environment: FAKE_LLM_PORT (18080), LG_PORT (12024), LG_MODE (dev | fastpoll: the queue's 0.5 s
# poll patched to 10 ms, not stock), LG_JOBS (--n-jobs-per-worker, 10), SIDES ("langgraph
# taskforce"), LOAD_ARGS (extra load.py drive flags, e.g. "--run-clients 1,50 --n-get 5000").
# Every process it starts is stopped by its own PID on exit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="$HERE/.work"
VENV="$WORK/venv"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="$WORK/results/$STAMP"
RUN="$WORK/run/$STAMP"
FAKE_LLM_PORT="${FAKE_LLM_PORT:-18080}"
LG_PORT="${LG_PORT:-12024}"
LG_MODE="${LG_MODE:-dev}"
LG_JOBS="${LG_JOBS:-10}"
SIDES="${SIDES:-langgraph taskforce}"
export FAKE_LLM_WORDS=20
mkdir -p "$OUT" "$RUN"

pids=()
stop_pid() { # stop one process we started: TERM, then KILL after 15 s
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() { for pid in "${pids[@]}"; do stop_pid "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_http() { # url pid log: wait until url answers 2xx, or the process died
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 exited; $3:" >&2; tail -40 "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "$1 did not answer in 60 s; see $3" >&2; exit 1
}
wait_file() { # file pid log
  for _ in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 exited; $3:" >&2; tail -40 "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "$1 was not written in 60 s; see $3" >&2; exit 1
}

# ---- 1. the venv
if ! "$VENV/bin/python" -c 'import langgraph_api, langgraph_runtime_inmem, langchain_openai, aiohttp' 2>/dev/null \
   || [ ! -x "$VENV/bin/langgraph" ]; then
  PY=""
  for c in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 || continue
    "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { PY=$c; break; }
  done
  [ -n "$PY" ] || { echo "need Python >= 3.11 (langgraph-api requires it)" >&2; exit 1; }
  echo "creating $VENV with $PY and installing requirements.txt from PyPI"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
fi
PYBIN="$VENV/bin/python"

# ---- 2. the binaries
if [ -n "${TASKFORCE_BIN_DIR:-}" ]; then
  BIN="$TASKFORCE_BIN_DIR"
else
  (cd "$ROOT" && cargo build --release -p registry-svc -p executor-svc -p gateway --bins)
  BIN="$ROOT/target/release"
fi
for b in registry-svc executor-svc gateway; do
  [ -x "$BIN/$b" ] || { echo "no $BIN/$b" >&2; exit 1; }
done

# ---- 3. the fake LLM
port_free "$FAKE_LLM_PORT" || { echo "port $FAKE_LLM_PORT is taken; set FAKE_LLM_PORT" >&2; exit 1; }
FAKE_LLM_PORT="$FAKE_LLM_PORT" "$PYBIN" "$HERE/fake_llm.py" >"$RUN/fake_llm.log" 2>&1 </dev/null &
llm_pid=$!; pids+=("$llm_pid")
wait_http "http://127.0.0.1:$FAKE_LLM_PORT/v1/models" "$llm_pid" "$RUN/fake_llm.log"
echo "fake LLM on 127.0.0.1:$FAKE_LLM_PORT (pid $llm_pid)"

drive() { # target url pids
  "$PYBIN" "$HERE/load.py" drive --target "$1" --url "$2" --server-pids "$3" \
    --out "$OUT/$1.json" ${LOAD_ARGS:-}
}

# ---- 4. LangGraph
run_langgraph() {
  port_free "$LG_PORT" || { echo "port $LG_PORT is taken; set LG_PORT" >&2; exit 1; }
  local dir="$RUN/langgraph"
  mkdir -p "$dir"
  cp "$HERE/langgraph/agent.py" "$HERE/langgraph/langgraph.json" "$dir/"
  # Offline and quiet: no LangSmith tracing, no CLI analytics, no PyPI version check at start,
  # no browser (each of these would otherwise call out).
  local cmd=("$VENV/bin/langgraph" dev --no-browser --no-reload --host 127.0.0.1 --port "$LG_PORT"
             --n-jobs-per-worker "$LG_JOBS" --config "$dir/langgraph.json")
  [ "$LG_MODE" = fastpoll ] && cmd=("$PYBIN" "$HERE/langgraph/serve_fastpoll.py" --port "$LG_PORT"
             --n-jobs-per-worker "$LG_JOBS" --config "$dir/langgraph.json")
  (cd "$dir" && exec env -u LANGSMITH_API_KEY -u LANGCHAIN_API_KEY -u LANGSMITH_ENDPOINT \
      -u LANGCHAIN_ENDPOINT LANGSMITH_TRACING=false LANGCHAIN_TRACING_V2=false \
      LANGCHAIN_TRACING=false LANGGRAPH_CLI_NO_ANALYTICS=1 LANGGRAPH_NO_VERSION_CHECK=true \
      NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost OPENAI_API_KEY=x \
      PYTHONUNBUFFERED=1 LOG_COLOR=false FAKE_LLM_PORT="$FAKE_LLM_PORT" "${cmd[@]}") \
    >"$RUN/langgraph.log" 2>&1 </dev/null &
  local pid=$!; pids+=("$pid")
  wait_http "http://127.0.0.1:$LG_PORT/ok" "$pid" "$RUN/langgraph.log"
  echo "LangGraph ($LG_MODE) on 127.0.0.1:$LG_PORT (pid $pid)"
  local status=0
  drive langgraph "http://127.0.0.1:$LG_PORT" "$pid" || status=1
  stop_pid "$pid"
  return $status
}

# ---- 5. Taskforce
run_taskforce() {
  local dir="$RUN/taskforce"
  mkdir -p "$dir/configs/custom" "$dir/workspace" "$dir/data"
  printf pong >"$dir/workspace/ping"
  cat >"$dir/llm_config.yaml" <<EOF
default_provider: fake
default_model: fake
fallback_to_scripted: false
models:
  fake: {provider: fake, model: fake-model}
providers:
  fake: {type: openai, base_url: "http://127.0.0.1:$FAKE_LLM_PORT/v1", api_key_env: TASKFORCE_PEER_LLM_KEY, model: fake-model, max_attempts: 1}
EOF
  # The developer's LLM and global-MCP settings stay out; no key file means no API keys.
  local clean=(env -u TASKFORCE_LLM_PROVIDER -u TASKFORCE_LLM_MODEL -u TASKFORCE_LLM_SCRIPT
               -u OPENAI_BASE_URL -u OPENAI_API_KEY -u ANTHROPIC_BASE_URL -u ANTHROPIC_API_KEY
               -u TASKFORCE_API_KEYS -u TASKFORCE_API_KEYS_FILE -u OTEL_EXPORTER_OTLP_ENDPOINT
               -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT MCP_M365_ENABLE=0 AGENT_ENABLE=0
               RUST_LOG=warn)
  "${clean[@]}" "$BIN/registry-svc" --listen 127.0.0.1:0 --addr-file "$dir/registry.addr" \
    --config-dir "$dir/configs" --data-dir "$dir/data/registry" --metrics-listen 127.0.0.1:0 \
    >"$RUN/registry.log" 2>&1 </dev/null &
  local reg=$!; pids+=("$reg")
  wait_file "$dir/registry.addr" "$reg" "$RUN/registry.log"
  "${clean[@]}" TASKFORCE_PEER_LLM_KEY=not-a-real-key "$BIN/executor-svc" --listen 127.0.0.1:0 \
    --addr-file "$dir/executor.addr" --registry-url "http://$(cat "$dir/registry.addr")" \
    --data-dir "$dir/data/executor" --llm-config "$dir/llm_config.yaml" \
    --global-mcp-config "$dir/configs/mcp/global.yaml" --metrics-listen 127.0.0.1:0 \
    >"$RUN/executor.log" 2>&1 </dev/null &
  local exe=$!; pids+=("$exe")
  wait_file "$dir/executor.addr" "$exe" "$RUN/executor.log"
  "${clean[@]}" "$BIN/gateway" --listen 127.0.0.1:0 --addr-file "$dir/gateway.addr" \
    --registry-url "http://$(cat "$dir/registry.addr")" \
    --executor-url "http://$(cat "$dir/executor.addr")" \
    >"$RUN/gateway.log" 2>&1 </dev/null &
  local gw=$!; pids+=("$gw")
  wait_file "$dir/gateway.addr" "$gw" "$RUN/gateway.log"
  local url="http://$(cat "$dir/gateway.addr")"
  wait_http "$url/readyz" "$gw" "$RUN/gateway.log"
  echo "Taskforce on $url (registry $reg, executor $exe, gateway $gw)"
  # The runs' agent: its one tool is file_read over a workspace holding `ping`, so the fake's
  # call ({"path": "ping"}, the first string property of the first tool) reads a real file.
  curl -fsS -o /dev/null -X POST "$url/api/v1/agents" -H 'content-type: application/json' -d '{
    "agent_id": "peer-runner", "name": "Peer runner", "description": "The peer benchmark agent.",
    "system_prompt": "You are a benchmark agent. Use file_read when asked to.",
    "tool_allowlist": ["file_read"], "workspace": "'"$dir/workspace"'"}'
  local status=0
  drive taskforce "$url" "$reg,$exe,$gw" || status=1
  stop_pid "$gw"; stop_pid "$exe"; stop_pid "$reg"
  return $status
}

rc=0
for side in $SIDES; do
  case "$side" in
    langgraph) run_langgraph || rc=1 ;;
    taskforce) run_taskforce || rc=1 ;;
    *) echo "unknown side $side" >&2; exit 2 ;;
  esac
done

files=()
for side in taskforce langgraph; do [ -f "$OUT/$side.json" ] && files+=("$OUT/$side.json"); done
cmd="bench/peers/run.sh"
[ "$LG_MODE" != dev ] && cmd="LG_MODE=$LG_MODE $cmd"
[ "$LG_JOBS" != 10 ] && cmd="LG_JOBS=$LG_JOBS $cmd"
[ -n "${LOAD_ARGS:-}" ] && cmd="LOAD_ARGS=\"$LOAD_ARGS\" $cmd"
[ -n "${TASKFORCE_BIN_DIR:-}" ] && cmd="TASKFORCE_BIN_DIR=${BIN#"$ROOT"/} $cmd"
commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit + uncommitted changes"
{
  echo "Run of $STAMP (UTC): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end,"
  echo "Taskforce release binaries in \`${BIN#"$ROOT"/}\` built $(date -u -r "$BIN/gateway" '+%Y-%m-%d %H:%M UTC')" \
       "(working tree at $commit), LangGraph \`$LG_MODE\` with $LG_JOBS jobs."
  echo "Command: \`$cmd\`"
  echo
  "$PYBIN" "$HERE/load.py" table "${files[@]}"
} >"$OUT/table.md"
cat "$OUT/table.md"
echo
echo "results in $OUT (logs in $RUN)"
exit $rc
