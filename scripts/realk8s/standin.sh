# Sourced by check-1.35.sh and check-1.36.sh (run from the repository root, with CHECK set to
# the check's name and REALK8S_K8S_VERSION to the release): builds and starts an API server of
# that release without a kubelet or controllers, makes one Node object (n1, 8 GPUs) stand in for
# a kubelet, and defines what both checks use: k (kubectl), fail (prints the pods and the
# scheduler's log, then exits 1), serves, start_scheduler, gpu_pod, node_of, bound, wait_until. The
# cluster and the scheduler are stopped on exit.
export REALK8S_APISERVER_ONLY=1
bin=$(bash scripts/realk8s/build.sh | tail -n 1)
run=$(mktemp -d)
export KUBECONFIG="$run/admin.kubeconfig"
k() { "$bin/kubectl" "$@"; }
fail() {
  echo "$CHECK: FAILED: $*" >&2
  k get pods -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,WHY:.status.conditions[0].message >&2 || true
  tail -n 20 "$run/scheduler.log" >&2 2>/dev/null || true
  exit 1
}
scheduler=""
cleanup() {
  [ -n "$scheduler" ] && kill "$scheduler" 2>/dev/null
  .venv/bin/python scripts/realk8s/cluster.py down --run-dir "$run" || true
}
trap cleanup EXIT
.venv/bin/python scripts/realk8s/cluster.py up --run-dir "$run" \
  --without kubelet --without controllers --without scheduler

k create -f - <<'YAML' >/dev/null
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
YAML
resources='{"cpu":"64","memory":"512Gi","pods":"110","nvidia.com/gpu":"8"}'
ready='{"type":"Ready","status":"True","reason":"KubeletReady","message":"stand-in",'
ready+='"lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}'
k patch node n1 --subresource=status --type=merge \
  -p "{\"status\":{\"capacity\":$resources,\"allocatable\":$resources,\"conditions\":[$ready]}}" >/dev/null
k taint node n1 node.kubernetes.io/not-ready- >/dev/null  # what the node controller would lift
k create serviceaccount default >/dev/null  # ... and the service account controller create

serves() {  # resource version: the server must serve scheduling.k8s.io/<version> <resource>
  k api-resources --api-group=scheduling.k8s.io | grep -q "^$1 .*scheduling.k8s.io/$2" \
    || fail "the server does not serve scheduling.k8s.io/$2 $1"
}
start_scheduler() {
  .venv/bin/gputopo-scheduler run --kubeconfig "$KUBECONFIG" --metrics-address 127.0.0.1:0 \
    >"$run/scheduler.log" 2>&1 &
  scheduler=$!
}
gpu_pod() {  # name gpus [a line of spec] [labels, as {k: v}] [namespace]: a gputopo-scheduler pod
  local labels=${4:-"{}"}
  k create ${5:+-n "$5"} -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: $labels}
spec:
  schedulerName: gputopo-scheduler
  ${3:-}
  containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "$2"}}}]
YAML
}
node_of() { k get pod "$1" -o jsonpath='{.spec.nodeName}'; }
bound() { local name; for name in "$@"; do [ -n "$(node_of "$name")" ] || return 1; done; }
wait_until() {  # what, then a command that must succeed within 30 s
  local what=$1; shift
  for _ in $(seq 60); do "$@" && return 0; sleep 0.5; done
  fail "$what"
}
