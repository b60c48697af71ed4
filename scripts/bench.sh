#!/usr/bin/env bash
# Runs every benchmark program of the build tree BUILD (bench/bench_*, one
# per bench/bench_*.c) and prints what each measured, as Markdown. Figures
# are copied into bench/RESULTS.md by hand, with the command and the
# machine. Benchmarks share the machine with whatever else runs: the load
# average is printed before each, so a noisy run can be seen and repeated.
set -uo pipefail
build=${1:-build}
shopt -s nullglob
benches=()
for b in "$build"/bench/bench_*; do
  [ -f "$b" ] && [ -x "$b" ] && benches+=("$b")
done
if [ ${#benches[@]} -eq 0 ]; then
  echo "bench.sh: no benchmark programs in $build/bench (build first)" >&2
  exit 2
fi
rc=0
for b in "${benches[@]}"; do
  echo
  echo "<!-- $b; load average: $(cut -d' ' -f1-3 /proc/loadavg) -->"
  if ! "$b"; then
    echo "bench.sh: $(basename "$b") failed" >&2
    rc=1
  fi
done
exit "$rc"
