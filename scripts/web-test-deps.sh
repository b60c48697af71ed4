#!/usr/bin/env bash
# Installs what the web page's browser tests (tests/web/) drive Debian's
# chromium with: puppeteer-core from the npm registry, pinned, into
# DIR/node_modules. Idempotent and quiet, and safe to run from tests
# running at once (a lock). Prints nothing when it is there already.
# chromium itself is a Debian package (scripts/install-deps.sh).
#   scripts/web-test-deps.sh DIR
set -euo pipefail
dir=${1:?usage: web-test-deps.sh DIR}
# The last puppeteer-core that runs on Debian 12's Node.js 20.
pkg=puppeteer-core@24.43.1
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
pj="$dir/node_modules/${pkg%@*}/package.json"
[ -f "$pj" ] && grep -q "\"version\": \"${pkg##*@}\"" "$pj" && exit 0
if ! command -v npm >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends npm >/dev/null
  else
    echo "web-test-deps: npm is missing; install it (Debian package npm)" >&2
    exit 1
  fi
fi
echo "web-test-deps: installing $pkg" >&2
[ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$pkg" >/dev/null
