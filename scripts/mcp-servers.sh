#!/usr/bin/env bash
# Installs the MCP servers the tests run and the MCP conformance suite
# (from the npm registry, pinned)
# into DIR/node_modules: idempotent and quiet, and safe to run from tests
# running at once (a lock). Prints nothing when they are there already.
#   scripts/mcp-servers.sh DIR
set -euo pipefail
dir=${1:?usage: mcp-servers.sh DIR}
pkgs=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  # The conformance suite's client scenarios, and the Node (22 or later)
  # it needs: the npm package "node" brings its binary from the registry.
  @modelcontextprotocol/conformance@0.1.16
  node@22.23.3
)
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
have() {
  local name=${1%@*} version=${1##*@}
  local pj="$dir/node_modules/$name/package.json"
  [ -f "$pj" ] && grep -q "\"version\": \"$version\"" "$pj"
}
missing=()
for p in "${pkgs[@]}"; do
  have "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v npm >/dev/null; then
  # Debian's nodejs comes without npm; NodeSource's has it.
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends npm >/dev/null
  else
    echo "mcp-servers: npm is missing; install it (Debian package npm)" >&2
    exit 1
  fi
fi
echo "mcp-servers: installing ${missing[*]}" >&2
[ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
  "${missing[@]}" >/dev/null
