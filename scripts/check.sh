#!/usr/bin/env bash
# Runs every ctest-registered Criterion test in the build tree BUILD and
# prints one closing line: "tests: N passed, N failed[, N skipped]".
set -uo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
# The docker backend's tests need a container engine: start podman's on a
# private socket and build the images, and stop it when the tests are done.
# When it cannot start, the reason is printed and those tests fail.
if host=$(bash "$src/scripts/containers.sh" start); then
  export DOCKER_HOST=$host
else
  unset DOCKER_HOST
  echo "check: the container engine did not start (above): the docker" \
    "backend's tests will fail" >&2
fi
trap 'bash "$src/scripts/containers.sh" stop' EXIT
cd "$build" || exit 2
ctest --output-on-failure --timeout 600 -j 2 >ctest.out 2>&1
rc=$?
# Criterion prints one "Synthesis:" line per test binary.
awk '
  /Synthesis: Tested:/ {
    for (i = 1; i <= NF; i++) {
      if ($i == "Passing:") p += $(i + 1)
      if ($i == "Failing:") f += $(i + 1)
      if ($i == "Crashing:") c += $(i + 1)
      if ($i == "Skipped:") s += $(i + 1)
    }
  }
  END { printf "%d %d %d\n", p, f + c, s }' \
  Testing/Temporary/LastTest.log >counts.out 2>/dev/null
read -r passed failed skipped <counts.out || { passed=0; failed=0; skipped=0; }
grep -E '^(100%|[0-9]+%) tests passed|tests failed|Failed|\*\*\*' ctest.out | grep -v '^ *[0-9]*/[0-9]* Test.*Passed' || true
# Criterion runs tests in forked children whose sanitizer reports do not
# always change an exit status: any report fails the run.
if grep -qE 'ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:' \
    Testing/Temporary/LastTest.log 2>/dev/null; then
  echo "--- sanitizer reports ---"
  grep -E -A20 'ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:' \
    Testing/Temporary/LastTest.log | head -100
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "--- failing test output ---"
  sed -n '/The following tests FAILED/,$p' ctest.out
  [ "$failed" -eq 0 ] && failed=1
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
