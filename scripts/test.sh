#!/usr/bin/env bash
# Runs Pontoon's whole test suite (unit, property, crash, end-to-end with real
# clients). Installs what it needs first. Set PONTOON_LONG=1 for the long mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cargo build --profile ci --workspace --bins --lib
cargo test --profile ci --workspace -- --test-threads "${PONTOON_TEST_THREADS:-2}"
