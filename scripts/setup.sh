#!/usr/bin/env bash
# Create .venv/ at the repository root and install gputopo with the agent's and the scheduler's
# dependencies and the test tools (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[agent,scheduler,test]"
