#!/usr/bin/env bash
# Set up .venv/ and run the demo on the embedded default (no GPU, no cluster needed).
# The set-up (scripts/setup.sh, pip) runs only when .venv/ is missing or pyproject.toml or
# scripts/setup.sh changed since it last ran: a stamp in .venv/ keeps their SHA-256.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.gputopo-setup-sha256
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  bash scripts/setup.sh
  echo "$want" >"$stamp"
fi
exec .venv/bin/python -m scheduler.cli.demo "$@"
