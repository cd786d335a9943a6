#!/usr/bin/env bash
# Download the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, the FGD paper's "openb" data,
# from github.com/alibaba/clusterdata) that the simulator and the benches replay.
#
#   scripts/fetch-traces.sh [--dry-run|--check] [DIR] [FILE...]
#
# DIR defaults to $GPUTOPO_TRACES or ../shared/traces (where bench/ looks); files go to
# DIR/alibaba-cluster-trace-gpu-v2023/. FILE defaults to the node list and the default pod list;
# `all` fetches every pod list variant. --dry-run prints the URLs and paths without downloading.
# Each download is checked against the SHA-256 of the released file (below; the release is
# commit 50a91c7 of alibaba/clusterdata) and refused if it differs; --check only checks the files
# already in DIR, downloading nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv
VARIANTS="default cpu0 cpu037 cpu050 cpu072 cpu100 cpu200 cpu235 cpu250 cpu300 gpushare20
gpushare40 gpushare60 gpushare80 gpushare100 gpuspec05 gpuspec10 gpuspec20 gpuspec25 gpuspec33
multigpu20 multigpu30 multigpu40 multigpu50"
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
dry=false
check=false
case "${1:-}" in
  --dry-run) dry=true; shift ;;
  --check) check=true; shift ;;
esac

# 0 when FILE ($2) has the released SHA-256 of NAME ($1); names without a published sum pass.
released() {
  local want
  want=$(awk -v n="$1" '$2 == n { print $1 }' <<<"$SUMS")
  [ -z "$want" ] || [ "$(sha256sum "$2" | cut -d' ' -f1)" = "$want" ]
}
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
  if $check; then
    if [ ! -f "$target/$f" ]; then echo "missing $target/$f"; bad=1
    elif released "$f" "$target/$f"; then echo "ok $target/$f"
    else echo "differs from the released file: $target/$f"; bad=1; fi
    continue
  fi
  mkdir -p "$target"
  curl -fsSL --retry 3 -o "$target/$f.part" "$BASE/$f"
  if ! released "$f" "$target/$f.part"; then
    rm -f "$target/$f.part"
    echo "fetch-traces: $BASE/$f differs from the released file (SHA-256); not kept" >&2
    exit 1
  fi
  mv "$target/$f.part" "$target/$f"
  echo "$target/$f"
done
exit "${bad:-0}"
