#!/usr/bin/env bash
# The GPU tier (tests/gpu) on a machine with the NVIDIA driver and PyTorch but no network:
# installs the wheels in .whl/ (downloaded elsewhere for this Python: see tests/README.md,
# "The GPU tier") into /tmp/site, then runs the tier. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d /usr/local/nvidia/bin ] && export PATH="$PATH:/usr/local/nvidia/bin"
# The machine's own pytest plugins may not load beside this pytest: load only pytest-timeout.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONUNBUFFERED=1
exec python3 -m pytest -p pytest_timeout -p no:cacheprovider -s -v -rs tests/gpu "$@"
