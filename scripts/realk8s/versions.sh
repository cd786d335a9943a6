# The versions of the real Kubernetes the tests run against: one place. Sourced by the realk8s scripts.
K8S_VERSION=${REALK8S_K8S_VERSION:-v1.37.2}
ETCD_VERSION=${REALK8S_ETCD_VERSION:-v3.6.16}
CONTAINERD_VERSION=${REALK8S_CONTAINERD_VERSION:-v2.2.9}
REALK8S_CACHE=${REALK8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo-realk8s}
REALK8S_BIN="$REALK8S_CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-containerd-$CONTAINERD_VERSION"
