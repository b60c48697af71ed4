#!/usr/bin/env bash
# The size rules for product code (shared/, sandboxd/, controller/,
# backends/; tests, benchmarks and fuzzers are exempt): no source file over
# 1000 lines, no function over 150. Prints each offender and exits 1 when
# there is one. Functions are found in clang-format's layout: a definition
# starts at column 0 and its body ends with "}" at column 0.
set -euo pipefail
cd "$(dirname "$0")/.."
max_file=1000
max_fn=150
files=$(git ls-files 'shared/*.[ch]' 'sandboxd/*.[ch]' 'controller/*.[ch]' \
  'backends/*.[ch]')
rc=0
for f in $files; do
  n=$(wc -l <"$f")
  if [ "$n" -gt "$max_file" ]; then
    echo "$f: $n lines (at most $max_file)"
    rc=1
  fi
done
# shellcheck disable=SC2086
awk -v max="$max_fn" '
  FNR == 1 { infn = 0; pending = 0 }
  # A signature on one line: "type name(args) {".
  !infn && /^[A-Za-z_].*\) *\{$/ && !/=/ { infn = 1; start = FNR; name = $0; next }
  # A signature over several lines: "type name(args," ... "args) {".
  !infn && /^[A-Za-z_][^;{}]*[(,]$/ && !/=/ { pending = FNR; pname = $0; next }
  !infn && pending && /^ .*\) *\{$/ { infn = 1; start = pending; name = pname; next }
  !infn && pending && /;$/ { pending = 0 }
  /^\}/ {
    if (infn && FNR - start + 1 > max) {
      sub(/\(.*/, "", name)
      printf "%s:%d: %s is %d lines (at most %d)\n", FILENAME, start, name,
        FNR - start + 1, max
      bad = 1
    }
    infn = 0; pending = 0
  }
  END { exit bad }' $(echo "$files" | grep '\.c$') || rc=1
exit "$rc"
