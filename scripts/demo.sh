#!/usr/bin/env bash
# Runs the example agent. Until the controller lands, it shows sandboxd.
set -euo pipefail
build=${1:-build}
if [ -x "$build/sbx" ] && [ -f examples/renewal-packet/agent.json ]; then
  exec bash examples/renewal-packet/run.sh "$build"
fi
echo "The sbx controller is not built yet; this demo only shows sandboxd:"
"$build/sandboxd" --version
