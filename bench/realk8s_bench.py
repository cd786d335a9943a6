"""Start-up and throughput against a real API server, with the real kube-scheduler as the baseline
in the same run (not a test).

A control plane of `scripts/realk8s/cluster.py` (etcd and kube-apiserver of the release
`scripts/realk8s/versions.sh` names; no controllers, no kubelet) holds N ready nodes of 8 GPUs
each. Each run stores P pending one-GPU pods for one scheduler in a fresh namespace, then starts
that scheduler as a process and measures from its start: the time to the first bind, the time to
the last, bound pods per second from the start and between the first and the last bind, and the
scheduler process's CPU time (start-up included) in all and per pod. The binds are seen through a
watch of the namespace. Runs alternate between the schedulers (kube-scheduler first in odd runs,
gputopo first in even ones); after each, the pods are deleted and no node may hold more than 8.

kube-scheduler runs its default profile with client QPS and burst raised to 5,000 (its defaults,
50 and 100, would cap it at about 50 binds a second); gputopo-scheduler runs its built-in defaults.
Both use the admin kubeconfig. The project's modules are compiled to bytecode first, as the image's
`pip install` leaves them (a development checkout, with `PYTHONDONTWRITEBYTECODE` set as on these
machines, would compile every module at each start: about a second of it).

    .venv/bin/python bench/realk8s_bench.py [--nodes 5000] [--pods 10000] [--runs 3] [--json]
        [--dra]

`--dra`: the nodes' GPUs are DRA devices alone (a ResourceSlice of 8 per node, none in the
node's allocatable) and a DeviceClass maps `nvidia.com/gpu` to them (KEP-5004, GA in 1.37): each
scheduler makes every pod's claim, allocates it, writes the pod's
`status.extendedResourceClaimStatus` and binds. No controller runs, so after each run the claims
are released by hand (finalizer removed, deleted).

Needs the binaries of `bash scripts/realk8s/build.sh` and root (as the tier does).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "realk8s" / "cluster.py"
RUN_DIR = Path("/tmp/gputopo-realk8s-bench")
GPU = "nvidia.com/gpu"
SCHEDULERS = ("kube-scheduler", "gputopo-scheduler")
KUBE_SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
"""


@dataclass
class Run:
    scheduler: str
    run: int
    pods: int
    bound: int
    first_bind_s: float
    last_bind_s: float
    pods_per_s_from_start: float
    pods_per_s_first_to_last: float
    cpu_s: float
    cpu_ms_per_pod: float
    max_pods_per_node: int


def cluster(action: str, *extra: str) -> None:
    subprocess.run([sys.executable, str(CLUSTER), action, f"--run-dir={RUN_DIR}", *extra],
                   check=True)  # fmt: skip


def state() -> dict[str, Any]:
    return dict(json.loads((RUN_DIR / "state.json").read_text()))


def api() -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(RUN_DIR / "admin.kubeconfig"), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    return client.CoreV1Api(client.ApiClient(configuration))


DRIVER = "gpu.gputopo.io"


def make_node(core: client.CoreV1Api, i: int, dra: bool = False) -> None:
    name = f"bench-node-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"z{i % 4}"}
    try:
        core.create_node({"metadata": {"name": name, "labels": labels}}, _preload_content=False)
    except client.ApiException as exc:
        if exc.status != 409:  # created by an earlier try whose answer was lost
            raise
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": "64", "memory": "512Gi", "pods": "250"}
    if dra:
        make_slice(core, name)
    else:
        resources[GPU] = "8"
    status = {"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }}  # fmt: skip
    core.patch_node_status(name, status, _preload_content=False)
    # TaintNodesByCondition tainted it not-ready at create; no node controller runs to lift it.
    core.patch_node(name, {"spec": {"taints": None}}, _preload_content=False)


def make_slice(core: client.CoreV1Api, node: str) -> None:
    """The node's 8 GPUs as DRA devices of driver gpu.gputopo.io (each a UUID of its own)."""
    devices = [
        {"name": f"gpu-{g}", "attributes": {"type": {"string": "gpu"},
                                            "uuid": {"string": f"GPU-{node}-{g}"}},
         "capacity": {"memory": {"value": "80Gi"}}}
        for g in range(8)
    ]  # fmt: skip
    body = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node, "devices": devices,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
    }  # fmt: skip
    try:
        client.CustomObjectsApi(core.api_client).create_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", body, _preload_content=False
        )
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def make_device_class(core: client.CoreV1Api) -> None:
    """A DeviceClass mapping `nvidia.com/gpu` to the driver's GPUs (KEP-5004)."""
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
    body = {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": expression}}], "extendedResourceName": GPU},
    }  # fmt: skip
    client.CustomObjectsApi(core.api_client).create_cluster_custom_object(
        "resource.k8s.io", "v1", "deviceclasses", body, _preload_content=False
    )


def release_claims(core: client.CoreV1Api, namespace: str) -> int:
    """Every claim of the namespace deleted, its finalizer removed first (what the resourceclaim
    controller does once the pod is gone); how many there were."""
    custom = client.CustomObjectsApi(core.api_client)
    group = ("resource.k8s.io", "v1", namespace, "resourceclaims")
    names = [c["metadata"]["name"] for c in custom.list_namespaced_custom_object(*group)["items"]]

    def release(i: int) -> None:
        patch = {"metadata": {"finalizers": None}}
        try:
            custom.patch_namespaced_custom_object(*group, names[i], patch, _preload_content=False)
            custom.delete_namespaced_custom_object(*group, names[i], _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    in_parallel(release, len(names))
    return len(names)


def make_pod(core: client.CoreV1Api, namespace: str, scheduler: str, i: int) -> None:
    resources = {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}
    body = {
        "metadata": {"name": f"p-{i:05d}", "namespace": namespace},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "gputopo.test/busybox:1",
                                 "resources": resources}]},
    }  # fmt: skip
    core.create_namespaced_pod(namespace, body, _preload_content=False)


def in_parallel(work: Any, count: int, threads: int = 16) -> None:
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(_retried, work, i) for i in range(count)]:
            future.result()


def _retried(work: Any, i: int) -> None:
    """`work(i)`, again after a 429/5xx of a loaded server (an object it created is kept)."""
    for attempt in range(5):
        try:
            work(i)
            return
        except client.ApiException as exc:
            if exc.status == 409 and attempt:  # the earlier try went through after all
                return
            if exc.status not in (429, 500, 503, 504) or attempt == 4:
                raise
            time.sleep(1 + attempt)


class BindWatch:
    """Records when each pod of a namespace is first seen with a node."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.bound: dict[str, tuple[float, str]] = {}
        self.stop = threading.Event()
        self.error = ""
        listed = core.list_namespaced_pod(namespace, limit=1)
        self.version = listed.metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # noqa: BLE001 (reported by the main thread)
            self.error = repr(exc)

    def _watch(self) -> None:
        """Raw JSON lines, of which only the name, node and resourceVersion are read: the
        client's typed models cost about a millisecond of CPU a pod, taken from the two cores
        the API server and the scheduler under test share (most in the faster one's run)."""
        while not self.stop.is_set():  # a watch may end early; go on from the last version
            answer = self.core.list_namespaced_pod(
                self.namespace, watch=True, resource_version=self.version,
                allow_watch_bookmarks=True, timeout_seconds=60, _request_timeout=90,
                _preload_content=False,
            )  # fmt: skip
            try:
                pending = b""
                for chunk in answer.stream(65536):
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if line.strip():
                            self._seen(json.loads(line))
                    if self.stop.is_set():
                        return
            finally:
                answer.release_conn()

    def _seen(self, event: dict[str, Any]) -> None:
        if event["type"] == "ERROR":
            raise RuntimeError(f"watch error: {event['object']}")
        pod = event["object"]
        self.version = pod["metadata"]["resourceVersion"]
        node, name = pod.get("spec", {}).get("nodeName"), pod["metadata"].get("name")
        if event["type"] != "BOOKMARK" and node and name not in self.bound:
            self.bound[name] = (time.monotonic(), node)


def delete_all_pods(core: client.CoreV1Api, namespace: str) -> None:
    """Delete the namespace's pods (grace 0: no kubelet confirms them) until none is left; a
    delete-collection of 10,000 pods outlives the server's request timeout (504) and stops."""
    while core.list_namespaced_pod(namespace, limit=1).items:
        try:
            core.delete_collection_namespaced_pod(
                namespace, grace_period_seconds=0, _preload_content=False, _request_timeout=120
            )
        except client.ApiException as exc:
            if exc.status != 504:
                raise


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks


def scheduler_argv(name: str) -> list[str]:
    kubeconfig = RUN_DIR / "admin.kubeconfig"
    if name == "kube-scheduler":
        path = RUN_DIR / "bench-kube-scheduler.yaml"
        path.write_text(KUBE_SCHEDULER_CONFIG.format(kubeconfig=kubeconfig))
        binary = Path(state()["bin"]) / "kube-scheduler"
        return [str(binary), f"--config={path}", "--secure-port=0", "--v=0"]
    binary = Path(sys.executable).parent / "gputopo-scheduler"
    return [str(binary), "run", f"--kubeconfig={kubeconfig}", "--metrics-address=127.0.0.1:0"]


def one_run(core: client.CoreV1Api, name: str, run: int, pods: int, dra: bool = False) -> Run:
    namespace = f"bench-{name.split('-')[0]}-{run}"
    core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    # No controller manager runs (its node controller would taint the kubelet-less nodes), so
    # nothing creates the namespace's default ServiceAccount, which pod admission looks up.
    core.create_namespaced_service_account(
        namespace, {"metadata": {"name": "default"}}, _preload_content=False
    )
    scheduler = "default-scheduler" if name == "kube-scheduler" else "gputopo-scheduler"
    in_parallel(lambda i: make_pod(core, namespace, scheduler, i), pods)
    seen = BindWatch(core, namespace)
    log = open(RUN_DIR / "logs" / f"bench-{name}-{run}.log", "wb")  # noqa: SIM115
    started = time.monotonic()
    proc = subprocess.Popen(scheduler_argv(name), stdout=log, stderr=subprocess.STDOUT)
    deadline = started + 900
    while len(seen.bound) < pods and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if not seen.thread.is_alive():
            raise SystemExit(f"the watch of {namespace} ended: {seen.error}")
    cpu = cpu_seconds(proc.pid) if proc.poll() is None else float("nan")
    proc.terminate()
    proc.wait(timeout=30)
    seen.stop.set()
    times = sorted(t - started for t, _ in seen.bound.values())
    per_node: dict[str, int] = {}
    for _, node in seen.bound.values():
        per_node[node] = per_node.get(node, 0) + 1
    delete_all_pods(core, namespace)
    if dra:
        release_claims(core, namespace)
    first, last = (times[0], times[-1]) if times else (float("nan"), float("nan"))
    return Run(
        scheduler=name, run=run, pods=pods, bound=len(times), first_bind_s=first,
        last_bind_s=last, pods_per_s_from_start=len(times) / last if times else 0.0,
        pods_per_s_first_to_last=(len(times) - 1) / (last - first) if len(times) > 1 else 0.0,
        cpu_s=cpu, cpu_ms_per_pod=1000 * cpu / max(1, len(times)),
        max_pods_per_node=max(per_node.values(), default=0),
    )  # fmt: skip


def table(runs: list[Run]) -> str:
    head = (f"{'scheduler':<18} {'run':>3} {'bound':>6} {'first s':>8} {'last s':>8} "
            f"{'pods/s start':>12} {'pods/s 1st-last':>15} {'cpu s':>7} {'cpu ms/pod':>10} "
            f"{'max/node':>8}")  # fmt: skip
    lines = [head]
    for r in runs:
        lines.append(
            f"{r.scheduler:<18} {r.run:>3} {r.bound:>6} {r.first_bind_s:>8.2f} "
            f"{r.last_bind_s:>8.2f} "
            f"{r.pods_per_s_from_start:>12.0f} {r.pods_per_s_first_to_last:>15.0f} "
            f"{r.cpu_s:>7.1f} {r.cpu_ms_per_pod:>10.2f} {r.max_pods_per_node:>8}"
        )  # fmt: skip
    return "\n".join(lines)


def summary(runs: list[Run]) -> list[str]:
    out = []
    by_run: dict[int, dict[str, Run]] = {}
    for r in runs:
        by_run.setdefault(r.run, {})[r.scheduler] = r
    ratios, firsts = [], []
    for run, pair in sorted(by_run.items()):
        if len(pair) == 2:
            kube, ours = pair["kube-scheduler"], pair["gputopo-scheduler"]
            ratio = ours.pods_per_s_from_start / kube.pods_per_s_from_start
            ratios.append(ratio)
            firsts.append(ours.first_bind_s - kube.first_bind_s)
            out.append(f"run {run}: gputopo/kube pods/s from start {ratio:.2f}x; first bind "
                       f"{ours.first_bind_s:.2f} s vs {kube.first_bind_s:.2f} s")  # fmt: skip
    if ratios:
        out.append(f"median ratio {statistics.median(ratios):.2f}x (target >= 2x in every run: "
                   f"{'met' if min(ratios) >= 2 else 'NOT met'}); first bind no later than "
                   "kube-scheduler's in every run: "
                   f"{'met' if max(firsts) <= 0 else 'NOT met'}")  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--dra", action="store_true", help="GPUs on DRA alone, asked as nvidia.com/gpu (KEP-5004)"
    )
    args = parser.parse_args(argv)
    for package in ("agent", "scheduler"):
        compileall.compile_dir(ROOT / package, quiet=1)
    cluster("up", "--without=kubelet", "--without=controllers", "--without=scheduler")
    try:
        kubectl = [
            str(Path(state()["bin"]) / "kubectl"),
            f"--kubeconfig={RUN_DIR / 'admin.kubeconfig'}",
        ]
        subprocess.run([*kubectl, "apply", "--server-side", "-k", str(ROOT / "daemonset" / "crds")],
                       check=True, capture_output=True)  # fmt: skip
        # A CRD's storage starts at its first request (429 until then); in a cluster the
        # scheduler joins, its CRDs have long been served.
        for plural in (
            "noderesourcetopologies.topology.node.k8s.io",
            "podgroups.scheduling.x-k8s.io",  # "podgroups" alone is scheduling.k8s.io's
            "queues.scheduling.gputopo.io",
        ):
            while subprocess.run([*kubectl, "get", plural, "-A"], capture_output=True).returncode:
                time.sleep(0.2)
        core = api()
        started = time.monotonic()
        if args.dra:
            make_device_class(core)
        in_parallel(lambda i: make_node(core, i, args.dra), args.nodes)
        print(f"{args.nodes} nodes ready in {time.monotonic() - started:.0f} s", flush=True)
        runs: list[Run] = []
        for run in range(1, args.runs + 1):
            order = SCHEDULERS if run % 2 else tuple(reversed(SCHEDULERS))
            for name in order:
                result = one_run(core, name, run, args.pods, args.dra)
                runs.append(result)
                print(table([result]).splitlines()[1], flush=True)
        release = state()["version"]
        how = " on DRA (KEP-5004 made claims)" if args.dra else ""
        print(
            f"\n{args.nodes} nodes x 8 GPUs{how}, {args.pods} pending 1-GPU pods, release {release}"
        )
        print(table(runs))
        for line in summary(runs):
            print(line)
        if args.json:
            print(json.dumps([asdict(r) for r in runs]))
    finally:
        cluster("down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
