#!/usr/bin/env bash
# gputopo-scheduler against a real Kubernetes 1.35 API server: the 1.35 gang API (v1alpha1
# Workloads, pods' spec.workloadRef; README "Kubernetes' own PodGroup"). Not part of the tier,
# which runs the release of versions.sh: this builds etcd, kube-apiserver and kubectl of 1.35
# (REALK8S_APISERVER_ONLY; minutes the first time, cached after), starts them with the
# GenericWorkload gate (scripts/realk8s/cluster.py, no kubelet or controllers: one Node object
# stands in), runs the scheduler from .venv/ and checks, exiting non-zero on the first miss:
#
#   - the server serves scheduling.k8s.io/v1alpha1 workloads and the scheduler reads them;
#   - two pods of replica key 0 of a minCount-2 pod group bind together; replica key 1's first
#     pod waits, naming its gang, and binds with the second;
#   - a pod naming a Workload that does not exist waits with that reason.
#
#   bash scripts/realk8s/check-1.35.sh      # after scripts/setup.sh; as root (a Node is created)
set -euo pipefail
cd "$(dirname "$0")/../.."
export REALK8S_K8S_VERSION=${REALK8S_K8S_VERSION:-v1.35.4} CHECK=check-1.35
source scripts/realk8s/standin.sh
serves workloads v1alpha1

pod() {  # name workload podGroup replicaKey
  local key=""
  [ -n "$4" ] && key=", podGroupReplicaKey: \"$4\""
  gpu_pod "$1" 2 "workloadRef: {name: $2, podGroup: $3$key}"
}
why() { k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}'; }
says() { why "$1" | grep -qF "$2"; }

k create -f - >/dev/null <<'EOF'
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {name: serve}
spec:
  podGroups:
  - {name: replica, policy: {gang: {minCount: 2}}}
EOF
start_scheduler
pod r0-a serve replica 0
pod r0-b serve replica 0
pod r1-a serve replica 1
pod lost late workers ""
wait_until "replica 0 binds" bound r0-a r0-b
wait_until "replica 1 waits for its second pod" \
  says r1-a "pod group replica of Workload default/serve (scheduling.k8s.io/v1alpha1, replica key 1): fewer than minCount (2) pods exist"
[ -z "$(node_of r1-a)" ] || fail "r1-a bound alone"
wait_until "a pod of a missing Workload says so" \
  says lost 'Workload "default/late" (scheduling.k8s.io/v1alpha1) not found'
pod r1-b serve replica 1
wait_until "replica 1 binds whole" bound r1-a r1-b
grep -q "upstream gangs: workloads scheduling.k8s.io/v1alpha1" "$run/scheduler.log" \
  || fail "the scheduler did not say it watches the 1.35 Workloads"
echo "check-1.35: passed on $(k version -o json | jq -r .serverVersion.gitVersion):"
k get pods -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,WHY:.status.conditions[0].message
echo "  lost: $(why lost)"
