#!/usr/bin/env bash
# Runs the example agents with the sbx and sandboxd of the build tree BUILD:
# examples/renewal-packet, then examples/coding-task.
set -euo pipefail
build=${1:-build}
echo "== examples/renewal-packet" >&2
bash examples/renewal-packet/run.sh "$build"
echo >&2
echo "== examples/coding-task" >&2
bash examples/coding-task/run.sh "$build"
