#!/usr/bin/env bash
# Runs Pontoon's whole test suite (unit, property, crash, end-to-end with real
# clients). Installs what it needs first. Set PONTOON_LONG=1 for the long mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
# Libraries first (scripts/build-fio-engine.sh, run by a test, finds them
# built). Not the binaries: the test build below makes them again anyway,
# with the features its dev-dependencies add (vhost's frontend, ...), so
# building them here too cost a second compile of the largest crate.
cargo build --profile ci --workspace --lib
# Test binaries two at a time (most of their time is waiting): see
# scripts/run-tests.py. PONTOON_TEST_JOBS=1 PONTOON_TEST_THREADS=2 runs them
# as `cargo test -- --test-threads 2` would, one binary at a time.
exec scripts/run-tests.py --profile ci "$@"
