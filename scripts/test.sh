#!/usr/bin/env bash
# Installs what sdp needs, builds it, and runs every test: unit tests, end-to-end CLI tests and
# MPI tests on real ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build && ctest --output-on-failure -j1 "$@"
