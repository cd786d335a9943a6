#!/usr/bin/env bash
# gputopo on a real API server of an older release, as a user's cluster runs it (its default
# feature gates; REALK8S_GATES names others). The tier checks the release of versions.sh with its
# gates on; this builds etcd, kube-apiserver and kubectl of REALK8S_K8S_VERSION (default v1.34.4;
# about 4 minutes on 2 cores the first time, cached after), starts them with one Node object in
# place of a kubelet (scripts/realk8s/standin.sh), and checks, exiting non-zero on the first miss:
#
#   - every kustomization a user applies (the CRDs first) is applied (for real: this cluster is thrown away, and a
#     dry run cannot create the namespaces and CRDs what follows them needs), and the DRA
#     component's files pass a server dry run: CRDs, CEL rules, admission policies, DeviceClasses;
#   - the Helm chart with every optional part on (scripts/helm/build.sh) passes `helm template
#     --validate` against the server (its kubeVersion, the server's OpenAPI schemas);
#   - the agent (fake NVML, GPUs 6 and 7 on DRA, shared) publishes its ResourceSlice; below 1.36,
#     where DRAConsumableCapacity is off by default, the server drops allowMultipleAllocations and
#     the agent says so, naming the gate; from 1.36 the server keeps it and the agent says nothing;
#   - gputopo-scheduler binds a pod asking nvidia.com/gpu, and allocates a gpu-share.gputopo.io
#     claim (made directly: no resourceclaim controller runs) on a DRA GPU and binds its pod;
#   - a gang of our PodGroup CRD binds whole, and its status (a CRD status subresource) is
#     written: phase Scheduled;
#   - a Queue of max 1 GPU binds its namespace's first 1-GPU pod and holds the second, naming it.
#
#   bash scripts/realk8s/check-release.sh      # after scripts/setup.sh, as root
#   REALK8S_K8S_VERSION=v1.35.4 bash scripts/realk8s/check-release.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export REALK8S_K8S_VERSION=${REALK8S_K8S_VERSION:-v1.34.4} REALK8S_GATES=${REALK8S_GATES-}
export CHECK="check-release $REALK8S_K8S_VERSION"
source scripts/realk8s/standin.sh
agent=""
trap '[ -n "$agent" ] && kill "$agent" 2>/dev/null; cleanup' EXIT

# The chart first, on an empty server: --validate refuses objects another tool made. (No dry run
# of its objects: the server cannot dry-run objects into namespaces the same run would create.)
helm=$(bash scripts/helm/build.sh | tail -n 1)
out=$("$helm" template gputopo daemonset/helm/gputopo --kubeconfig "$KUBECONFIG" --validate \
  --set dra.enabled=true,mps.enabled=true,admission.enabled=true,queueLabelPolicy.enabled=true \
  2>&1) || fail "helm template --validate refused the chart: $out"
for kustomization in crds "" optional/mps optional/admission optional/queue-label; do
  out=$(k apply -k "daemonset/$kustomization" 2>&1) \
    || fail "daemonset/$kustomization was refused: $out"
done
for manifest in optional/dra/dra.yaml optional/dra/extended-resource/deviceclass.yaml; do
  out=$(k apply --dry-run=server -f "daemonset/$manifest" 2>&1) \
    || fail "daemonset/$manifest was refused: $out"
done
k apply -f daemonset/optional/dra/dra.yaml >/dev/null

mkdir -p "$run/agent/dp" "$run/agent/reg" "$run/agent/plugins" "$run/agent/host"
printf 'version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n' \
  >"$run/agent/agent.yaml"
.venv/bin/gputopo-agent run --node-name n1 --nvml-fixture dgx-a100 --allow-fake-gpus \
  --dra-gpus 6,7 --config "$run/agent/agent.yaml" --kubeconfig "$KUBECONFIG" \
  --device-plugin-dir "$run/agent/dp" --dra-registry-dir "$run/agent/reg" \
  --dra-plugins-dir "$run/agent/plugins" --host-root "$run/agent/host" --no-publish \
  --node-labels off --metrics-address 127.0.0.1:0 >"$run/agent.log" 2>&1 &
agent=$!
published() { [ -n "$(k get resourceslices -o name)" ]; }
bound_in() { [ -n "$(k get pod -n "$1" "$2" -o jsonpath='{.spec.nodeName}')" ]; }
wait_until "the agent publishes its ResourceSlice" published
multiple=$(k get resourceslices -o jsonpath='{.items[0].spec.devices[0].allowMultipleAllocations}')
minor=$(k version -o json | jq -r .serverVersion.minor | tr -dc 0-9)
warned() { grep -q "dropped allowMultipleAllocations .*DRAConsumableCapacity feature gate is off" "$run/agent.log"; }
if [ "$minor" -lt 36 ] && [ -z "$REALK8S_GATES" ]; then
  [ -z "$multiple" ] || fail "a $minor server kept allowMultipleAllocations with its gate off"
  wait_until "the agent says the server dropped allowMultipleAllocations" warned
else
  [ "$multiple" = true ] || fail "the server dropped allowMultipleAllocations"
  sleep 3
  ! warned || fail "the agent warned of a field the server kept"
fi

start_scheduler
k create -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: share}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu-share.gputopo.io}
---
apiVersion: v1
kind: Pod
metadata: {name: claimer}
spec:
  schedulerName: gputopo-scheduler
  resourceClaims: [{name: gpu, resourceClaimName: share}]
  containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
YAML
gpu_pod plain 1
wait_until "both pods bind" bound claimer plain
k create -f - >/dev/null <<'YAML'
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: pair}
spec: {minMember: 2}
YAML
for member in pair-0 pair-1; do gpu_pod "$member" 2 "" "{scheduling.x-k8s.io/pod-group: pair}"; done
wait_until "our PodGroup's gang binds" bound pair-0 pair-1
phase() { [ "$(k get podgroups.scheduling.x-k8s.io pair -o jsonpath='{.status.phase}')" = Scheduled ]; }
wait_until "the PodGroup's status says Scheduled" phase
k create namespace team-a >/dev/null
k create serviceaccount default -n team-a >/dev/null  # no controller makes it here
k create -f - >/dev/null <<'YAML'
apiVersion: scheduling.gputopo.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec: {max: {nvidia.com/gpu: 1}, namespaces: [team-a]}
YAML
gpu_pod q-0 1 "" "" team-a
wait_until "the queue's first pod binds" bound_in team-a q-0
gpu_pod q-1 1 "" "" team-a
held() { k get pod -n team-a q-1 -o jsonpath='{.status.conditions[0].message}' | grep -q team-a; }
wait_until "the queue's second pod waits, naming its queue" held
[ -z "$(k get pod -n team-a q-1 -o jsonpath='{.spec.nodeName}')" ] || fail "q-1 bound past max"
device=$(k get resourceclaim share -o jsonpath='{.status.allocation.devices.results[0].device}')
case "$device" in gpu-6|gpu-7) ;; *) fail "the claim holds '$device', not a DRA GPU" ;; esac
echo "$CHECK: passed on $(k version -o json | jq -r .serverVersion.gitVersion)" \
  "(gates: ${REALK8S_GATES:-the defaults}); the claim holds $device;" \
  "allowMultipleAllocations ${multiple:-dropped}"
echo "  q-1 waits: $(k get pod -n team-a q-1 -o jsonpath='{.status.conditions[0].message}')"
