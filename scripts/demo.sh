#!/usr/bin/env bash
# Pontoon's main job: installs what it needs, builds in release mode, and
# runs `pontoon demo` — a local 3-OSD cluster serving a 3-replica volume
# over NBD, loaded with fio, beside the raw disk measured in the same run.
# Arguments are passed to `pontoon demo` (e.g. --keep, --seconds 20).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh demo
cargo build --release -p pontoon
exec ./target/release/pontoon demo "$@"
