#!/usr/bin/env bash
# The differential test against the real Agents SDK: installs @openai/agents
# (the version sbx follows, from the npm registry, with npm) into a cache
# directory once, then runs tests/sdk/sdk_diff.py, which plays each scenario
# of tests/sdk/scenarios/ to the SDK and to BUILD/sbx and compares every
# request they sent. Needs node (20 or later) and npm.
#
#   scripts/sdk-diff.sh [BUILD] [SCENARIO.json ...]
#
# SBX_SDK_DIR is the cache (default ${XDG_CACHE_HOME:-~/.cache}/sbx-sdk-diff).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
version=0.20.0
dir=${SBX_SDK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sbx-sdk-diff}/$version
for tool in node npm python3; do
  command -v "$tool" >/dev/null || { echo "sdk-diff: $tool is needed" >&2; exit 2; }
done
if [ ! -d "$dir/node_modules/@openai/agents" ]; then
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    "@openai/agents@$version" >&2
fi
exec python3 tests/sdk/sdk_diff.py "$build/sbx" "$dir/node_modules" "$@"
