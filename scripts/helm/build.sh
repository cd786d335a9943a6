#!/usr/bin/env bash
# Builds the real helm (helm.sh/helm/v3) from the Go module proxy into a cache keyed by version, for
# the chart's tests (tests/test_helm_chart.py, tests/realk8s/test_helm.py). Idempotent: a second run
# finds the binary and returns in well under a second.
#
#   bash scripts/helm/build.sh          # prints the helm binary's path on its last line
#   bash scripts/helm/build.sh --path   # prints where it is (or would be), builds nothing
#
# Environment: GPUTOPO_HELM_VERSION (default below), GPUTOPO_HELM_CACHE (default
# ~/.cache/gputopo-helm).
set -euo pipefail

HELM_VERSION=${GPUTOPO_HELM_VERSION:-v3.22.0}
cache=${GPUTOPO_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo-helm}
helm_bin="$cache/bin/helm-$HELM_VERSION"

log() { echo "helm-build: $*" >&2; }

if [ "${1:-}" = --path ] || [ -x "$helm_bin" ]; then
  echo "$helm_bin"
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/../go/toolchain.sh"
ensure_go || { log "no Go toolchain: cannot build helm"; exit 3; }

start=$(date +%s)
src="$cache/src/helm-$HELM_VERSION"
mkdir -p "$cache/bin" "$src"
export GOFLAGS="-mod=mod" CGO_ENABLED=0 GOTOOLCHAIN=local
# A module of ours that requires helm, so helm's own go.mod picks every dependency version.
if [ ! -f "$src/go.mod" ]; then
  printf 'module gputopo.test/helm\n\ngo 1.25\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" \
    >"$src/go.mod.new"
  mv "$src/go.mod.new" "$src/go.mod"
fi
# Set at link time, as helm's Makefile does: its version (`helm version`, .Capabilities.HelmVersion)
# and the Kubernetes version `helm template` and `helm lint` assume without a cluster, from the
# client-go it is built with (client-go v0.N.x is Kubernetes 1.N); unset, both say 1.20, which a
# chart's `kubeVersion: >=1.30` refuses.
client_go=$(cd "$src" && go list -f '{{.Version}}' -m k8s.io/client-go)
k8s_minor=$(echo "$client_go" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
done
log "building helm $HELM_VERSION (client-go $client_go: Kubernetes 1.$k8s_minor without a cluster)"
(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$helm_bin.tmp" helm.sh/helm/v3/cmd/helm)
mv "$helm_bin.tmp" "$helm_bin"
log "done in $(( $(date +%s) - start )) s: $helm_bin"
echo "$helm_bin"
