#!/usr/bin/env bash
# Download the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, released with Weng et al.,
# "Beware of Fragmentation", USENIX ATC '23) that `gputopo-scheduler simulate` and bench/ read:
# the node lists and every pod list, from the alibaba/clusterdata GitHub repository
# (cluster-trace-gpu-v2023/csv/), into DIR/alibaba-cluster-trace-gpu-v2023/, each file checked
# against its SHA-256 below.
#
#   bash scripts/fetch-traces.sh [--dry-run] [DIR]
#
# DIR: the argument, else $GPUTOPO_TRACES, else ../shared/traces beside the repository root
# (where bench/ looks by default). --dry-run prints each URL and the file it would write and
# fetches nothing. Needs curl and sha256sum; files already present with the right sum are kept.
set -euo pipefail
BASE=https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv
TRACE=alibaba-cluster-trace-gpu-v2023
SUMS=$(cat <<'END'
5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15  openb_node_list_all_node.csv
2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5  openb_node_list_gpu_node.csv
1bc3fd9ee5c1468ccd018f624d9222746e08d59f963f66b925804734271c0eaa  openb_pod_list_cpu0.csv
8ed554026d041b15ff21ddc104d9a21dbd9a93c496262fa23ef7b5be27e220dc  openb_pod_list_cpu037.csv
747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e  openb_pod_list_cpu050.csv
f8a2b031461b54d7b9f06d55473c2371eb3357b78a255c646bdca5e0833a8a2f  openb_pod_list_cpu072.csv
bec1c33fbdde61fd463877534ec79b393aec73e1cbb22d55fab9f166ac480982  openb_pod_list_cpu100.csv
b7e9d8a1a601da84d6e0b4110b19ef5001be5e4796d33e7b82f166ba95161f87  openb_pod_list_cpu200.csv
87bebd4d012faa8305ce1fd82737f51cf03361aac28b75d42e34aa656d7f4ee0  openb_pod_list_cpu235.csv
134c21ff96d57533df8a37b67632972884fec9396e77cd0898ddc370cc8e607d  openb_pod_list_cpu250.csv
76528825f40ee662cb098b3b6e683c1efd9f87a0c8af7e628df1f32c639636d1  openb_pod_list_cpu300.csv
1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8  openb_pod_list_default.csv
12dbc07d6a49bf8641e2275a2ff5bf7be74b5df7d148d531e135b140b95f9a3d  openb_pod_list_gpushare100.csv
9be2d0efb52e242c32e23dd184cc5fcc1983478c6c9c02cbb6b4b62925c0ffcd  openb_pod_list_gpushare20.csv
d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40  openb_pod_list_gpushare40.csv
d31809628128a1f24491086eda4af3e23882b9213d3ef57a56ee2d1af69492fe  openb_pod_list_gpushare60.csv
88b6649369ced40d0fde287d2498ea61ff4b05fccba8bdc95daf6042f2f8431e  openb_pod_list_gpushare80.csv
8f1c0ef7e4e511e982bd2818898ba22ee6d273bf5fce124b7ace285b5928cf4e  openb_pod_list_gpuspec05.csv
2dc7e4cb9480484f08539720b433a9ec9ab5d76b396f3f7557c53a2ff78a7611  openb_pod_list_gpuspec10.csv
6b9b89ab8913c1c074e994e98f548cf1a872fc5f76f2442ca8cd514a478b00a9  openb_pod_list_gpuspec20.csv
9d030679a2ccd7e27a7ec9ff15baff34480d22a0012515691fc187e3f35ee68c  openb_pod_list_gpuspec25.csv
eca4f746db1e5b25864ad021b55ece3943e101a3ebd4574d09dcb95c46117652  openb_pod_list_gpuspec33.csv
d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01  openb_pod_list_multigpu20.csv
a5e479c6444b1d83eef848159cf00c3cfa13441b2d1e2c113c391b91f1cc5b11  openb_pod_list_multigpu30.csv
32c9e8731ca07ef96108aa65f2a289bb9aacb47f642ed9e3789f99b242df60eb  openb_pod_list_multigpu40.csv
206f2f5959db30ecb7c44e7f13197c8ec50b7a35558ad3777cc3662ef0fe5373  openb_pod_list_multigpu50.csv
END
)

usage() {
  echo "usage: bash scripts/fetch-traces.sh [--dry-run] [DIR]" >&2
  exit 2
}

dry_run=0
dir=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help)
      sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "fetch-traces.sh: unknown option $arg" >&2
      usage
      ;;
    *)
      if [ -n "$dir" ]; then
        echo "fetch-traces.sh: one DIR only, got $dir and $arg" >&2
        usage
      fi
      dir=$arg
      ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${dir:-${GPUTOPO_TRACES:-$root/../shared/traces}}
target=$dir/$TRACE

while read -r sum name; do
  if [ "$dry_run" = 1 ]; then
    echo "$BASE/$name -> $target/$name"
    continue
  fi
  mkdir -p "$target"
  if [ -f "$target/$name" ] && echo "$sum  $target/$name" | sha256sum --check --status; then
    echo "kept $target/$name"
    continue
  fi
  curl --fail --location --silent --show-error -o "$target/$name.part" "$BASE/$name"
  if ! echo "$sum  $target/$name.part" | sha256sum --check --status; then
    echo "fetch-traces.sh: $BASE/$name: SHA-256 differs from the released file; not kept" >&2
    rm -f "$target/$name.part"
    exit 1
  fi
  mv "$target/$name.part" "$target/$name"
  echo "fetched $target/$name"
done <<<"$SUMS"
if [ "$dry_run" = 0 ]; then
  echo "try: gputopo-scheduler simulate --cluster $target/openb_node_list_gpu_node.csv" \
    "--workload $target/openb_pod_list_default.csv"
fi
