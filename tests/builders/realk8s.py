"""The real-Kubernetes tier's set-up: the cluster `scripts/realk8s/cluster.py` starts (a real
kube-apiserver, kube-controller-manager, kube-scheduler, one kubelet with containerd), the
project's manifests applied to it with the real kubectl, ServiceAccount kubeconfigs made with
TokenRequest, and the agent and scheduler run as the installed commands under those identities.

- `Cluster.start()` / `stop()`; `unavailable()` says why the tier cannot run (None when it can).
- `Cluster.kubectl(...)`: the real kubectl of the same release.
- `Cluster.service_account_kubeconfig(name)`: a kubeconfig holding a token of `gputopo-system/name`.
- `busybox_pod(...)`: a host-network busybox pod (the image imported by the cluster script).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.builders.commands import clean_env, command
from tests.builders.process import ROOT, CommandProcess
from tests.builders.wait import wait_for

SCRIPTS = ROOT / "scripts" / "realk8s"
RUN_DIR = Path(os.environ.get("REALK8S_RUN", "/tmp/gputopo-realk8s"))
NAMESPACE = "gputopo-system"
AGENT_NAMESPACE = "gputopo-agent"
TEST_IMAGE = "gputopo.test/busybox:1"
ENABLE = "GPUTOPO_REALK8S"
UNAVAILABLE = "GPUTOPO_REALK8S_UNAVAILABLE"


def unavailable() -> str | None:
    """Why the tier cannot run here, or None."""
    if os.environ.get(ENABLE) != "1":
        return f"the real-Kubernetes tier runs with `bash scripts/realk8s/test.sh` ({ENABLE}=1)"
    if why := os.environ.get(UNAVAILABLE):
        return why
    if os.geteuid() != 0:
        return "a real kubelet and containerd need root"
    return None


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """`wait_for`, polling a real cluster every 0.25 s."""
    return wait_for(predicate, timeout_s, what, interval_s=0.25)


@dataclass
class Cluster:
    run_dir: Path = RUN_DIR
    state: dict[str, Any] = field(default_factory=dict)
    processes: list[CommandProcess] = field(default_factory=list)
    node_agent: CommandProcess | None = None
    """The session's agent (fixture `agent`, dgx-h100) once a module has started it."""

    def start(self) -> None:
        subprocess.run(
            [sys.executable, str(SCRIPTS / "cluster.py"), "up", f"--run-dir={self.run_dir}"],
            check=True,
        )
        self.state = json.loads((self.run_dir / "state.json").read_text())
        self.kubectl("apply", "-f", str(ROOT / "daemonset" / "namespace.yaml"))
        self.kubectl("apply", "--server-side", "-k", str(ROOT / "daemonset" / "crds"))
        for crd in ("noderesourcetopologies.topology.node.k8s.io", "podgroups.scheduling.x-k8s.io"):
            self.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        for manifest in ("rbac-agent.yaml", "rbac-scheduler.yaml"):
            self.kubectl("apply", "-f", str(ROOT / "daemonset" / manifest))
        # The API server refuses pods until the controller-manager has made the namespace's
        # `default` ServiceAccount: a test that creates a pod first would fail.
        wait_until(
            lambda: (
                "serviceaccount/default"
                in self.kubectl(
                    "get", "serviceaccounts", "-n", "default", "-o", "name", check=False
                )
            ),
            60,
            "the default ServiceAccount of namespace default",
        )

    def stop(self) -> None:
        for proc in self.processes:
            proc.stop()
            name = Path(str(proc.proc.args[0])).name  # type: ignore[index]
            log = self.run_dir / "logs" / f"{name}-{proc.proc.pid}.log"
            log.write_text("\n".join(proc.lines) + "\n")
        subprocess.run(
            [sys.executable, str(SCRIPTS / "cluster.py"), "down", f"--run-dir={self.run_dir}"],
            check=False,
        )

    def restart_kubelet(self) -> None:
        """SIGTERM the kubelet and start it again with the same flags (as `systemctl restart`);
        returns once the Node's Ready condition has a heartbeat from the new kubelet."""
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        subprocess.run(
            [sys.executable, str(SCRIPTS / "cluster.py"), "restart", "--part", "kubelet",
             f"--run-dir={self.run_dir}"],
            check=True,
        )  # fmt: skip
        self.state = json.loads((self.run_dir / "state.json").read_text())

        def ready_again() -> bool:
            node = json.loads(self.kubectl("get", "node", self.node, "-o", "json"))
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            return bool(ready and ready[0]["status"] == "True"
                        and ready[0]["lastHeartbeatTime"] > started)  # fmt: skip

        wait_until(ready_again, 60, "the restarted kubelet's Ready heartbeat")

    def log_tail(self, part: str, lines: int, *, containing: tuple[str, ...] = ()) -> str:
        """The last `lines` lines of a cluster part's log (`kubelet`, `kube-apiserver`, ...),
        only those holding one of `containing` where given: what a failed wait shows, since the
        next session's `up` clears the run folder."""
        path = self.run_dir / "logs" / f"{part}.log"
        if not path.exists():
            return f"(no {path})"
        kept = [
            line for line in path.read_text(errors="replace").splitlines()
            if not containing or any(text in line for text in containing)
        ]  # fmt: skip
        return "\n".join(kept[-lines:])

    @property
    def node(self) -> str:
        return str(self.state["node"])

    @property
    def kubeconfig(self) -> Path:
        return Path(self.state["kubeconfig"])

    @property
    def kubelet(self) -> Mapping[str, str]:
        return dict(self.state["kubelet"])

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        stdin: str | None = None,
        as_user: str | None = None,
        kubeconfig: Path | None = None,
    ) -> str:
        """The real kubectl as the admin, or as `as_user` (a client certificate of the cluster
        script's: `tenant`), or with `kubeconfig`; its output, or its error when not `check`."""
        binary = Path(self.state["bin"]) / "kubectl"  # cluster.py records its binaries' folder
        config_file = kubeconfig or (
            self.run_dir / f"{as_user}.kubeconfig" if as_user else self.kubeconfig
        )
        done = subprocess.run(
            [str(binary), f"--kubeconfig={config_file}", *args],
            capture_output=True, text=True, input=stdin, timeout=120,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout if done.returncode == 0 else done.stderr

    def service_account_kubeconfig(
        self, name: str, namespace: str = NAMESPACE, bound_pod: str | None = None
    ) -> Path:
        """A kubeconfig with a fresh token of the ServiceAccount `namespace/name` the manifests
        create (TokenRequest, one hour)."""
        bound = ["--bound-object-kind=Pod", f"--bound-object-name={bound_pod}"] if bound_pod else []
        token = self.kubectl(
            "create", "token", name, "-n", namespace, "--duration=1h", *bound
        ).strip()
        admin = yaml.safe_load(self.kubeconfig.read_text())
        admin["users"] = [{"name": name, "user": {"token": token}}]
        admin["contexts"] = [{"name": name, "context": {"cluster": "gputopo-test", "user": name}}]
        admin["current-context"] = name
        path = self.run_dir / f"sa-{namespace}-{name}.kubeconfig"
        path.write_text(yaml.safe_dump(admin))
        return path

    def start_agent(self, *args: str, config_file: Path | None = None) -> CommandProcess:
        kubelet = self.kubelet
        argv = [
            command("gputopo-agent"), "run", "--node-name", self.node,
            "--nvml-fixture", "dgx-h100", "--allow-fake-gpus",
            "--device-plugin-dir", kubelet["device_plugin_dir"],
            "--pod-resources-socket", kubelet["pod_resources_socket"],
            "--kubelet-config", kubelet["config"],
            "--kubeconfig", str(self.agent_kubeconfig()),
            "--metrics-address", "127.0.0.1:0",
            "--share-record", str(self.run_dir / "agent" / "shares.json"),
            *(["--config", str(config_file)] if config_file else []), *args,
        ]  # fmt: skip
        proc = CommandProcess(argv, clean_env(home=Path(tempfile.mkdtemp(dir="/tmp"))))
        self.processes.append(proc)
        return proc

    def agent_kubeconfig(self) -> Path:
        """The agent's token, bound to a pod of its ServiceAccount on the node, as a DaemonSet
        pod's is: the token then names the node (`authentication.kubernetes.io/node-name`),
        which the shipped admission policy holds the agent to."""
        holder = busybox_pod("gputopo-agent", script="sleep 36000", node_name=self.node)
        holder["metadata"]["namespace"] = AGENT_NAMESPACE
        holder["spec"]["serviceAccountName"] = "gputopo-agent"
        self.kubectl("apply", "-f", "-", stdin=json.dumps(holder))
        return self.service_account_kubeconfig("gputopo-agent", AGENT_NAMESPACE, "gputopo-agent")

    def start_scheduler(self, *args: str) -> CommandProcess:
        argv = [
            command("gputopo-scheduler"), "run",
            "--kubeconfig", str(self.service_account_kubeconfig("gputopo-scheduler")),
            "--metrics-address", "127.0.0.1:0", *args,
        ]  # fmt: skip
        proc = CommandProcess(argv, clean_env(home=Path(tempfile.mkdtemp(dir="/tmp"))))
        self.processes.append(proc)
        return proc

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "pod", name, "-n", namespace, "-o", "json")))

    def scheduled_message(self, name: str, namespace: str = "default") -> str:
        """The message of the pod's PodScheduled condition ("" while it has none, or none)."""
        for entry in (self.pod(name, namespace).get("status") or {}).get("conditions") or []:
            if entry.get("type") == "PodScheduled":
                return str(entry.get("message") or "")
        return ""

    def wait_running(self, name: str, timeout_s: float = 90, namespace: str = "default") -> None:
        def running() -> bool:
            status = self.pod(name, namespace).get("status") or {}
            if status.get("phase") in ("Failed", "Succeeded"):
                raise AssertionError(f"pod {name} ended {status.get('phase')}: {status}")
            return bool(status.get("phase") == "Running")

        wait_until(running, timeout_s, f"pod {namespace}/{name} Running")

    def logs(self, name: str, namespace: str = "default", container: str = "main") -> str:
        """What the container wrote, read from the kubelet's log files: the API server cannot
        reach a kubelet whose only address is loopback (`kubectl logs` needs the node's IP)."""
        uid = self.pod(name, namespace)["metadata"]["uid"]
        folder = Path(self.kubelet["pod_logs_dir"]) / f"{namespace}_{name}_{uid}" / container
        lines = []
        for path in sorted(folder.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                # CRI format: <time> <stream> <P|F> <text>
                parts = line.split(" ", 3)
                lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)

    def node_allocatable(self, resource: str) -> int:
        return self._node_status_count("allocatable", resource)

    def node_capacity(self, resource: str) -> int:
        return self._node_status_count("capacity", resource)

    def _node_status_count(self, kind: str, resource: str) -> int:
        node = json.loads(self.kubectl("get", "node", self.node, "-o", "json"))
        return int(node["status"].get(kind, {}).get(resource, "0"))

    def create(self, *bodies: Mapping[str, Any]) -> None:
        """`kubectl create` each object."""
        for body in bodies:
            self.kubectl("create", "-f", "-", stdin=json.dumps(body))

    def delete_pods(self, *names: str, namespace: str = "default") -> None:
        if names:
            self.kubectl("delete", "pod", *names, "-n", namespace, "--wait=true",
                         "--grace-period=1", "--ignore-not-found")  # fmt: skip


def busybox_pod(
    name: str,
    *,
    limits: Mapping[str, str] | None = None,
    scheduler: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    script: str = "env; sleep 3600",
    node_name: str | None = None,
) -> dict[str, Any]:
    """A host-network pod of the locally imported busybox image that prints its environment."""
    container: dict[str, Any] = {
        "name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
        "resources": {"limits": dict(limits or {}), "requests": {"cpu": "10m", **(limits or {})}},
    }  # fmt: skip
    spec: dict[str, Any] = {
        "containers": [container], "hostNetwork": True, "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
    }  # fmt: skip
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": dict(annotations or {}), "labels": dict(labels or {})},
        "spec": spec,
    }  # fmt: skip


COMPOSITES = "compositepodgroups.scheduling.k8s.io"
PODGROUPS = "podgroups.scheduling.k8s.io"  # plain `podgroups` is this one on 1.37, not ours
_REF = {"workloadName": "train", "templateName": "replica"}


def composite(name: str, min_groups: int | None) -> dict[str, Any]:
    """A root CompositePodGroup (1.37 `v1alpha3`): a gang of `min_groups` children, else
    `basic`."""
    policy = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": policy, "workloadRef": dict(_REF)},
    }


def child(name: str, parent: str, min_count: int) -> dict[str, Any]:
    """A `scheduling.k8s.io` PodGroup of minCount `min_count` under CompositePodGroup `parent`."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parentCompositePodGroupName": parent,
            "workloadRef": dict(_REF),
            "schedulingPolicy": {"gang": {"minCount": min_count}},
        },
    }


def group_member(name: str, group: str, gpus: int, scheduler: str | None) -> dict[str, Any]:
    """A busybox pod of `gpus` whole GPUs in `scheduling.k8s.io` PodGroup `group`."""
    body = busybox_pod(name, limits={"nvidia.com/gpu": str(gpus)}, scheduler=scheduler)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def env_of(logs: str) -> dict[str, str]:
    """`env` output as a mapping."""
    return dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)


def gpu_zones(cluster: Cluster) -> dict[str, dict[str, str]]:
    """Per GPU UUID in the node's NodeResourceTopology: the available count of each resource
    in its GPU zone ({} while there is no NRT)."""
    found = cluster.kubectl("get", "noderesourcetopology", cluster.node, "-o", "json", check=False)
    if not found.startswith("{"):
        return {}
    nrt = json.loads(found)
    zones = {}
    for zone in nrt["zones"]:
        if zone["type"] != "GPU":
            continue
        uuid = next(a["value"] for a in zone.get("attributes", []) if a["name"] == "uuid")
        zones[uuid] = {r["name"]: r["available"] for r in zone.get("resources", [])}
    return zones
