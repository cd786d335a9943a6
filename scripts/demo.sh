#!/usr/bin/env bash
# Set up .venv/ (pip runs only the first time, or after pyproject.toml changed) and run the demo on
# the embedded default (no GPU, no cluster needed): `gputopo-scheduler demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m scheduler.cli demo "$@"
