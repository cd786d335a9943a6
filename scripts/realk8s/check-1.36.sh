#!/usr/bin/env bash
# gputopo-scheduler against a real Kubernetes 1.36 API server: the 1.36 gang API (v1alpha2
# PodGroups, pods' spec.schedulingGroup, the PodGroupScheduled condition; README "Kubernetes' own
# PodGroup"). Not part of the tier, which runs the release of versions.sh: this builds etcd,
# kube-apiserver and kubectl of 1.36 (REALK8S_APISERVER_ONLY; minutes the first time, cached
# after), starts them with the GenericWorkload gate (scripts/realk8s/cluster.py, no kubelet or
# controllers: one Node object stands in), runs the scheduler from .venv/ and checks, exiting
# non-zero on the first miss:
#
#   - the server serves scheduling.k8s.io/v1alpha2 podgroups and the scheduler reads them;
#   - a minCount-2 gang of two 2-GPU pods binds whole, and its PodGroupScheduled is True with
#     reason Scheduled (kube-scheduler 1.36's words);
#   - a minCount-2 gang of two 3-GPU pods, of which one would fit in the 4 GPUs left, binds
#     neither, and its PodGroupScheduled is False with reason Unschedulable;
#   - a pod of a `basic` PodGroup binds alone.
#
#   bash scripts/realk8s/check-1.36.sh      # after scripts/setup.sh; as root (a Node is created)
set -euo pipefail
cd "$(dirname "$0")/../.."
export REALK8S_K8S_VERSION=${REALK8S_K8S_VERSION:-v1.36.3} CHECK=check-1.36
source scripts/realk8s/standin.sh
serves podgroups v1alpha2

group() {  # name policy (gang MIN | basic)
  local policy="{basic: {}}"
  [ "$2" = gang ] && policy="{gang: {minCount: $3}}"
  k create -f - >/dev/null <<YAML
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: $1}
spec: {schedulingPolicy: $policy}
YAML
}
pod() { gpu_pod "$1" "$3" "schedulingGroup: {podGroupName: $2}"; }  # name podGroup gpus
scheduled() {  # group field (status, reason or message) of its PodGroupScheduled condition
  k get podgroups.scheduling.k8s.io "$1" \
    -o jsonpath="{.status.conditions[?(@.type==\"PodGroupScheduled\")].$2}"
}
is() { [ "$(scheduled "$1" "$2")" = "$3" ]; }

group pair gang 2
group big gang 2
group alone basic
start_scheduler
pod pair-a pair 2
pod pair-b pair 2
wait_until "the 2 x 2 GPU gang binds" bound pair-a pair-b
wait_until "its PodGroupScheduled is True" is pair status True
is pair reason Scheduled || fail "pair's reason is $(scheduled pair reason), not Scheduled"
pod big-a big 3
pod big-b big 3
wait_until "the 2 x 3 GPU gang's PodGroupScheduled is Unschedulable" is big reason Unschedulable
is big status False || fail "big's PodGroupScheduled is $(scheduled big status), not False"
sleep 3
[ -z "$(node_of big-a)$(node_of big-b)" ] || fail "a pod of the 2 x 3 GPU gang bound alone"
pod alone-a alone 1
wait_until "the basic group's pod binds" bound alone-a
grep -q "upstream gangs: podgroups scheduling.k8s.io/v1alpha2" "$run/scheduler.log" \
  || fail "the scheduler did not say it watches the 1.36 PodGroups"
echo "check-1.36: passed on $(k version -o json | jq -r .serverVersion.gitVersion):"
k get pods -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName
echo "  pair: $(scheduled pair status) $(scheduled pair reason): $(scheduled pair message)"
echo "  big: $(scheduled big status) $(scheduled big reason): $(scheduled big message)"
