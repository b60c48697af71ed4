#!/usr/bin/env bash
# Runs the coding-task example: an agent fixes a failing shell test with a
# lazily loaded skill. With OPENAI_API_KEY set it calls the real API;
# otherwise it replays the recorded transcript (real sandbox, real tool
# calls, recorded model answers). Arguments after BUILD go to `sbx run`
# (for example --stream).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
shift || true
sbx="$build/sbx"
prompt='Fix the bug described in repo/task.md. Use $credit-note-fixer.'
if [ -n "${OPENAI_API_KEY:-}" ]; then
  echo "Calling the OpenAI API (OPENAI_API_KEY is set)." >&2
  exec "$sbx" run "$@" "$here/agent.json" "$prompt"
fi
echo "OPENAI_API_KEY is not set: replaying the recorded model responses in" >&2
echo "examples/coding-task/transcript.jsonl against a real sandbox." >&2
exec "$sbx" run --replay "$here/transcript.jsonl" "$@" "$here/agent.json" \
  "$prompt"
