#!/usr/bin/env bash
# A long fuzzing campaign: every fuzz target in BUILD (make fuzz) at once, at
# the lowest CPU priority (nice 19), each for SECONDS, keeping corpora, logs
# and findings in OUT so that the next campaign goes on from there.
#
#   scripts/fuzz-campaign.sh [BUILD] [SECONDS] [OUT]
#   scripts/fuzz-campaign.sh build-fuzz 3600 build-fuzz/campaign   # an hour
#
# FUZZ_TARGETS="sse tar" limits it to those targets. Each target is one
# scripts/fuzz-smoke.sh run with FUZZ_OUT=OUT (see there); at the end every
# target's summary is printed, and the exit status is 1 when any target
# found something (its input is in OUT/artifacts/, its log in
# OUT/<name>.log).
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-3600}
out=${3:-$build/campaign}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
pids=()
names=()
for short in $(FUZZ_LIST=1 bash "$here/fuzz-smoke.sh" "$build"); do
  FUZZ_TARGETS=$short FUZZ_OUT=$out nice -n 19 \
    bash "$here/fuzz-smoke.sh" "$build" "$secs" >"$out/$short.summary" 2>&1 &
  pids+=($!)
  names+=("$short")
done
echo "fuzz-campaign: ${names[*]} for ${secs}s each, in $out"
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  tail -1 "$out/${names[$i]}.summary"
done
exit "$failed"
