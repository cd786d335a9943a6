#!/usr/bin/env bash
# Download the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, the FGD paper's "openb" data,
# from github.com/alibaba/clusterdata) that the simulator and the benches replay.
#
#   scripts/fetch-traces.sh [--dry-run] [DIR] [FILE...]
#
# DIR defaults to $GPUTOPO_TRACES or ../shared/traces (where bench/ looks); files go to
# DIR/alibaba-cluster-trace-gpu-v2023/. FILE defaults to the node list and the default pod list;
# `all` fetches every pod list variant. --dry-run prints the URLs and paths without downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv
VARIANTS="default cpu0 cpu037 cpu050 cpu072 cpu100 cpu200 cpu235 cpu250 cpu300 gpushare20
gpushare40 gpushare60 gpushare80 gpushare100 gpuspec05 gpuspec10 gpuspec20 gpuspec25 gpuspec33
multigpu20 multigpu30 multigpu40 multigpu50"
dry=false
if [ "${1:-}" = "--dry-run" ]; then dry=true; shift; fi
dir=${1:-${GPUTOPO_TRACES:-../shared/traces}}
[ $# -gt 0 ] && shift
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(openb_node_list_gpu_node.csv openb_pod_list_default.csv)
elif [ "${files[0]}" = all ]; then
  files=(openb_node_list_gpu_node.csv)
  for v in $VARIANTS; do files+=("openb_pod_list_$v.csv"); done
fi
target="$dir/alibaba-cluster-trace-gpu-v2023"
for f in "${files[@]}"; do
  case "$f" in
    openb_node_list_*.csv|openb_pod_list_*.csv) ;;
    *) echo "fetch-traces: $f is not a file of the trace (openb_node_list_*.csv, openb_pod_list_*.csv)" >&2; exit 2 ;;
  esac
  if $dry; then echo "$BASE/$f -> $target/$f"; continue; fi
  mkdir -p "$target"
  curl -fsSL --retry 3 -o "$target/$f.part" "$BASE/$f"
  mv "$target/$f.part" "$target/$f"
  echo "$target/$f"
done
