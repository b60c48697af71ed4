#!/bin/sh
# The credit note amounts finance books.
cd "$(dirname "$0")/.." || exit 2
. ./credit_note.sh
failed=0
check() {
  got=$(credit_note "$1" "$2")
  if [ "$got" = "$3" ]; then
    echo "ok   credit_note $1 $2 = $3"
  else
    echo "FAIL credit_note $1 $2: got $got, want $3"
    failed=1
  fi
}
check 2500 50 -1250
check 999 50 -500
check 1000 100 -1000
check 0 30 0
if [ "$failed" -ne 0 ]; then
  echo "tests failed"
  exit 1
fi
echo "all tests passed"
