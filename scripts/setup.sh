#!/usr/bin/env bash
# Create .venv/ at the repository root and install gputopo with the agent's and the scheduler's
# dependencies and the test tools. Idempotent and quick the second time: pip runs only when
# pyproject.toml changed since the last install here (the hash is kept in .venv/), or with --force.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.gputopo-installed
want=$(.venv/bin/python -c 'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')
if [ "${1:-}" != "--force" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[agent,scheduler,test]"
echo "$want" > "$stamp"
