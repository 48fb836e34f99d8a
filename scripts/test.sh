#!/usr/bin/env bash
# Builds sdp and runs every test (unit tests, end-to-end CLI tests, MPI tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build && ctest --output-on-failure -j1 "$@"
