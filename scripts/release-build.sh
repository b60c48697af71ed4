#!/usr/bin/env bash
# The build a user or a packager makes: `cmake -DCMAKE_BUILD_TYPE=Release`
# with no developer flags (warnings are not errors), by the compiler CC
# (gcc or clang), into build-release-CC. Fails when the compiler prints a
# single warning for sbx's code, tests and benchmarks included: such a build
# must be clean, not merely succeed.
set -euo pipefail
cc=${1:?usage: release-build.sh gcc|clang}
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build-release-$cc
mkdir -p "$build"
log=$build/release-build.log
CC=$cc cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_RULE_MESSAGES=OFF >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
if ! cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >>"$log" 2>&1; then
  grep -E 'error|Error' "$log" | head -n 30 >&2
  echo "release-build: the $cc Release build failed (log: $log)" >&2
  exit 1
fi
if grep -E '(warning|Warning):' "$log" | grep -v 'CMake Warning' | grep -q .; then
  grep -E '(warning|Warning):' "$log" | grep -v 'CMake Warning' | head -n 30 >&2
  echo "release-build: the $cc Release build printed warnings (log: $log)" >&2
  exit 1
fi
echo "release-build: $cc Release: no warnings"
