#!/usr/bin/env bash
# The real-Kubernetes tier: build (or reuse) the real Kubernetes of build.sh, then run
# tests/realk8s against it (each test starts what it needs; the session starts one cluster and
# stops it at the end). Where the binaries cannot be built the tier still runs and every test
# skips with the reason. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
export GPUTOPO_REALK8S=1
start=$(date +%s)
if ! build_log=$(bash scripts/realk8s/build.sh 2>&1); then
  echo "$build_log" | tail -n 30
  export GPUTOPO_REALK8S_UNAVAILABLE="the real Kubernetes could not be built: $(echo "$build_log" | tail -n 1)"
fi
# The real helm for test_helm.py (which skips, saying why, where it cannot be built).
if ! helm_log=$(bash scripts/helm/build.sh 2>&1); then
  echo "$helm_log" | tail -n 10
fi
echo "realk8s: build step took $(( $(date +%s) - start )) s"
# One real kubelet per machine (its device-plugin and plugin-registry folders are fixed paths):
# runs of the tier from several checkouts wait for each other.
# The next run's `up` clears the run folder: a failed run's logs are copied beside it first.
exec 9>"${GPUTOPO_REALK8S_LOCK:-/tmp/gputopo-realk8s.lock}"
flock 9
status=0
.venv/bin/python -m pytest -p no:cacheprovider -m realk8s tests/realk8s -rs "$@" || status=$?
run_dir="${REALK8S_RUN:-/tmp/gputopo-realk8s}"
if [ "$status" -ne 0 ] && [ -d "$run_dir/logs" ]; then
  kept="$run_dir-failed-$(date -u +%Y%m%dT%H%M%SZ)"
  cp -r "$run_dir/logs" "$kept" && echo "realk8s: the failed run's logs are kept in $kept"
fi
exit "$status"
