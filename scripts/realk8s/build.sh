#!/usr/bin/env bash
# Builds the real Kubernetes the project tests against, from the Go module proxy, into a cache keyed
# by version: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl (one module of
# ours that requires k8s.io/kubernetes and replaces each k8s.io/<staging> module with its published
# v0.<minor>.<patch>), etcd and containerd 2.x (with its runc shim and ctr). runc and the CNI plugins
# come from Debian's packages. Idempotent: a second run finds every binary and returns in seconds.
#
#   bash scripts/realk8s/build.sh            # prints the bin directory on its last line
#
# Environment: REALK8S_K8S_VERSION (default below), REALK8S_ETCD_VERSION, REALK8S_CONTAINERD_VERSION,
# REALK8S_CACHE (default ~/.cache/gputopo-realk8s), REALK8S_NO_APT=1 to skip apt-get,
# REALK8S_APISERVER_ONLY=1 to build only etcd, kube-apiserver and kubectl (an API server of another
# release, as scripts/realk8s/check-1.35.sh runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"

log() { echo "realk8s-build: $*" >&2; }

source "$(dirname "${BASH_SOURCE[0]}")/../go/toolchain.sh"
ensure_go || { log "no Go toolchain: cannot build Kubernetes"; exit 3; }

bin="$REALK8S_BIN"
mkdir -p "$bin" "$REALK8S_CACHE/src"
export GOFLAGS="-mod=mod" CGO_ENABLED=0 GOTOOLCHAIN=local

# The module that builds k8s.io/kubernetes: every staging module replaced with its published twin.
k8s_module() {
  local dir="$REALK8S_CACHE/src/k8s-$K8S_VERSION" staging_version mod_file
  staging_version="v0.${K8S_VERSION#v1.}"
  mkdir -p "$dir"
  if [ ! -f "$dir/go.mod" ]; then
    log "resolving k8s.io/kubernetes@$K8S_VERSION"
    mod_file=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -f "$mod_file" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION"; exit 3; }
    {
      echo "module gputopo.test/realk8s"
      echo
      echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$mod_file")"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      # Only the staging modules the release publishes (the sample-* ones are not, and no binary
      # needs them).
      sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$mod_file" \
        | grep -v '^k8s.io/sample-' \
        | while read -r staged; do echo "replace $staged => $staged $staging_version"; done
    } >"$dir/go.mod.new"
    mv "$dir/go.mod.new" "$dir/go.mod"
  fi
  echo "$dir"
}

build_k8s() {
  local dir ldflags want=() name names=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
  [ "${REALK8S_APISERVER_ONLY:-0}" = 1 ] && names=(kube-apiserver kubectl)
  for name in "${names[@]}"; do
    [ -x "$bin/$name" ] || want+=("$name")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  dir=$(k8s_module)
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  for name in "${want[@]}"; do
    log "building $name $K8S_VERSION"
    (cd "$dir" && go build -trimpath -tags providerless -ldflags "$ldflags" \
      -o "$bin/$name.tmp" "k8s.io/kubernetes/cmd/$name") && mv "$bin/$name.tmp" "$bin/$name"
  done
}

# A module of ours per upstream project, so their dependency versions never meet k8s's.
simple_module() {  # name module version
  local dir="$REALK8S_CACHE/src/$1-$3"
  mkdir -p "$dir"
  if [ ! -f "$dir/go.mod" ]; then
    printf 'module gputopo.test/%s\n\ngo 1.25\n\nrequire %s %s\n' "$1" "$2" "$3" >"$dir/go.mod"
  fi
  echo "$dir"
}

build_etcd() {
  [ -x "$bin/etcd" ] && return 0
  local dir
  dir=$(simple_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION")
  log "building etcd $ETCD_VERSION"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) \
    && mv "$bin/etcd.tmp" "$bin/etcd"
}

build_containerd() {
  local dir name tags="no_btrfs no_devmapper no_zfs no_aufs"
  local ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
  dir=$(simple_module containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION")
  for name in containerd containerd-shim-runc-v2 ctr; do
    [ -x "$bin/$name" ] && continue
    log "building $name $CONTAINERD_VERSION"
    (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$bin/$name.tmp" \
      "github.com/containerd/containerd/v2/cmd/$name") && mv "$bin/$name.tmp" "$bin/$name"
  done
}

debian_packages() {
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing+=(containernetworking-plugins)
  command -v busybox >/dev/null || missing+=(busybox-static)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${REALK8S_NO_APT:-0}" = 1 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "missing Debian packages (${missing[*]}) and cannot install them"; exit 3
  fi
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start=$(date +%s)
if [ "${REALK8S_APISERVER_ONLY:-0}" != 1 ]; then
  debian_packages
  build_containerd
fi
build_etcd
build_k8s
log "done in $(( $(date +%s) - start )) s: $bin"
echo "$bin"
