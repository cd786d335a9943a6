#!/usr/bin/env bash
# Set up .venv/ and run the demo on the embedded default (no GPU, no cluster needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m scheduler.cli.demo "$@"
