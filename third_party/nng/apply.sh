#!/bin/sh
# Applies the patches given, in order, to the nng source tree in the current
# directory, skipping any that is already applied: a build tree configured
# before a patch was added runs this step again on its patched source.
set -e
for p in "$@"; do
  if patch -p1 -s -f -R --dry-run -i "$p" >/dev/null 2>&1; then
    continue
  fi
  patch -p1 -s -f -i "$p"
done
