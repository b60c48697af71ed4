#!/usr/bin/env bash
# Runs every fuzz target in BUILD for SECONDS each, one after the other,
# starting from its seed corpus in tests/fuzz/corpus/<name>/ (copied, so the
# tree stays clean), with leak detection on. Prints each target's runs and
# final coverage; fails at the first target that finds something, showing
# the end of its log and where the input that did it was saved.
#
#   scripts/fuzz-smoke.sh [BUILD] [SECONDS]
#
# FUZZ_TARGETS="sse tar" runs only those targets. FUZZ_OUT=DIR keeps what a
# run makes in DIR: the corpus it grew in DIR/corpus/<name>/ (a later run
# goes on from it), the log in DIR/<name>.log and any finding in
# DIR/artifacts/; without it they go to a temporary directory, findings to
# BUILD/fuzz-artifacts/. FUZZ_LIST=1 only prints the names of the targets
# it would run. scripts/fuzz-campaign.sh runs the targets at once.
set -euo pipefail
build=$(cd "${1:-build-fuzz}" && pwd) # absolute: the runs cd away
secs=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${FUZZ_OUT:-}" ]; then
  mkdir -p "$FUZZ_OUT"
  out=$(cd "$FUZZ_OUT" && pwd)
  artifacts="$out/artifacts"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  artifacts="$build/fuzz-artifacts"
fi
mkdir -p "$artifacts"
for bin in "$build"/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  short=${name#fuzz_}
  if [ -n "${FUZZ_TARGETS:-}" ] && ! [[ " $FUZZ_TARGETS " == *" $short "* ]]; then
    continue
  fi
  if [ -n "${FUZZ_LIST:-}" ]; then
    echo "$short"
    continue
  fi
  corpus="$out/corpus/$short"
  log="$out/$short.log"
  mkdir -p "$corpus"
  seeds="$root/tests/fuzz/corpus/$short"
  [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
  echo "fuzz: $name for ${secs}s"
  ( cd "$out" && "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts/$short-" \
      "$corpus" 2>"$log" ) || {
    tail -50 "$log" >&2
    echo "fuzz: $name failed; its input is in $artifacts/" >&2
    exit 1
  }
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(printf '%s' "$last" | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([^ ]*\).*/cov \1, ft \2, corpus \3/p')
  echo "fuzz: $name: ${runs:-?} runs, ${cov:-no coverage line}"
done
