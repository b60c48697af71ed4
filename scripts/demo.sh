#!/usr/bin/env bash
# Runs the example agent with the sbx and sandboxd of the build tree BUILD.
set -euo pipefail
build=${1:-build}
exec bash examples/renewal-packet/run.sh "$build"
