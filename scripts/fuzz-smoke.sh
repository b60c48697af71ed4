#!/usr/bin/env bash
# Runs every fuzz target in BUILD for SECONDS each, starting from its seed
# corpus in tests/fuzz/corpus/<name>/ (copied, so the tree stays clean).
set -euo pipefail
build=$(cd "${1:-build-fuzz}" && pwd) # absolute: the runs cd away
secs=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for bin in "$build"/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus="$work/$name"
  mkdir -p "$corpus"
  seeds="$root/tests/fuzz/corpus/${name#fuzz_}"
  [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
  echo "fuzz: $name for ${secs}s"
  ( cd "$work" && "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 "$corpus" 2>"$work/$name.log" ) || {
    tail -50 "$work/$name.log" >&2
    echo "fuzz: $name failed" >&2
    exit 1
  }
  grep -E 'stat::number_of_executed_units' "$work/$name.log" || true
done
