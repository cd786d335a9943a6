"""The Helm chart on a real API server 1.37 with the real helm (scripts/helm/build.sh): `helm
install` creates the objects, the agent and the scheduler start under the ServiceAccounts, RBAC and
config files the release created, `helm upgrade` with a changed value changes the objects, `helm
uninstall` removes them (and leaves the CRDs).

The release is a second copy of gputopo beside the one the tier's other tests use (the manifests'
namespaces and RBAC, applied by the session's cluster): other names (namePrefix `gth`), other
namespaces, scheduler name `gth-scheduler`. No registry is reachable, so the chart's pods cannot
pull the image: its DaemonSet selects no node and its scheduler pod stays Pending; the agent and
the scheduler run as the installed commands with what the release put in the cluster (its
container args, its ConfigMaps, its ServiceAccounts' tokens), as the tier's other tests run them.
The agent publishes for a Node of its own (`gth-node`, tainted, no kubelet), so the node the other
tests use is left alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import helm as h
from tests.builders.commands import clean_env, command, empty_dir
from tests.builders.manifests import parse_flags
from tests.builders.process import CommandProcess
from tests.builders.realk8s import Cluster, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

RELEASE = "gth"
AGENT_NS, SCHEDULER_NS = "gth-agent", "gth-system"
FAKE_NODE = "gth-node"
NO_NODE = {"gputopo.test/helm": "no-node-has-this"}
VALUES: dict[str, Any] = {
    "namePrefix": RELEASE,
    "namespaces": {"agent": AGENT_NS, "scheduler": SCHEDULER_NS},
    "agent": {"nodeSelector": NO_NODE},
    "scheduler": {"replicas": 1, "schedulerName": "gth-scheduler", "nodeSelector": NO_NODE},
}
CREATED = [
    ("namespace", AGENT_NS, None),
    ("namespace", SCHEDULER_NS, None),
    ("serviceaccount", "gth-agent", AGENT_NS),
    ("serviceaccount", "gth-scheduler", SCHEDULER_NS),
    ("clusterrole", "gth-agent", None),
    ("clusterrolebinding", "gth-scheduler", None),
    ("role", "gth-agent-share-locks", SCHEDULER_NS),
    ("configmap", "gth-agent-config", AGENT_NS),
    ("networkpolicy", "gth-scheduler-metrics", SCHEDULER_NS),
    ("daemonset", "gth-agent", AGENT_NS),
    ("deployment", "gth-scheduler", SCHEDULER_NS),
]


class Release:
    """`helm` against the tier's cluster, as its admin."""

    def __init__(self, cluster: Cluster, binary: str) -> None:
        self.cluster, self.binary = cluster, binary

    def helm(self, *args: str, check: bool = True) -> str:
        done = h.helm(self.binary, *args, f"--kubeconfig={self.cluster.kubeconfig}",
                      "--namespace=default", check=check)  # fmt: skip
        return done.stdout + done.stderr

    def get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        where = ["-n", namespace] if namespace else []
        out = self.cluster.kubectl("get", kind, name, *where, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def config_file(self, configmap: str, namespace: str, key: str) -> Path:
        obj = self.get("configmap", configmap, namespace)
        assert obj is not None, f"no ConfigMap {namespace}/{configmap}"
        path = empty_dir() / key
        path.write_text(obj["data"][key], encoding="utf-8")
        return path

    def container_args(self, kind: str, name: str, namespace: str) -> list[str]:
        obj = self.get(kind, name, namespace)
        assert obj is not None, f"no {kind} {namespace}/{name}"
        return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[Release]:
    binary, why = h.helm_binary()
    if binary is None:
        pytest.skip(why)
    rel = Release(cluster, binary)
    rel.helm("install", RELEASE, str(h.CHART), "--values", str(h.values_file(VALUES)))
    yield rel
    rel.helm("uninstall", RELEASE, check=False)
    cluster.kubectl("delete", "node", FAKE_NODE, "--ignore-not-found")


def _run(cluster: Cluster, argv: list[str]) -> CommandProcess:
    proc = CommandProcess(argv, clean_env(home=empty_dir()))
    cluster.processes.append(proc)  # its log lands in the run folder at the end
    return proc


def test_install_creates_every_object(release: Release) -> None:
    missing = [(k, n, ns) for k, n, ns in CREATED if release.get(k, n, ns) is None]
    assert missing == []
    status = release.helm("status", RELEASE, "--output=json")
    assert json.loads(status[status.index("{") :])["info"]["status"] == "deployed"


def test_the_agent_publishes_under_the_releases_account_and_config(release: Release) -> None:
    cluster = release.cluster
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": FAKE_NODE},
        "spec": {"taints": [{"key": "gputopo.test/no-kubelet", "effect": "NoSchedule"}]},
    }))  # fmt: skip
    config = release.config_file("gth-agent-config", AGENT_NS, "agent.yaml")
    chart_args = parse_flags(release.container_args("daemonset", "gth-agent", AGENT_NS))
    assert chart_args["--share-lock-namespace"] == SCHEDULER_NS
    kubeconfig = cluster.service_account_kubeconfig("gth-agent", AGENT_NS)
    proc = _run(cluster, [
        command("gputopo-agent"), "run", f"--config={config}", "--oneshot",
        f"--log-format={chart_args['--log-format']}",
        f"--share-lock-namespace={chart_args['--share-lock-namespace']}",
        f"--share-scheduler-name={chart_args['--share-scheduler-name']}",
        "--node-name", FAKE_NODE, "--nvml-fixture", "dgx-h100", "--allow-fake-gpus",
        "--kubeconfig", str(kubeconfig), "--kubelet-config", str(empty_dir() / "none.yaml"),
    ])  # fmt: skip
    assert proc.proc.wait(timeout=120) == 0, "\n".join(proc.lines)
    nrt = release.get("noderesourcetopologies.topology.node.k8s.io", FAKE_NODE, None)
    assert nrt is not None
    assert nrt["metadata"]["ownerReferences"][0]["name"] == FAKE_NODE
    node = release.get("node", FAKE_NODE, None)
    assert node is not None
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"


def test_the_scheduler_leads_under_the_releases_account_and_config(release: Release) -> None:
    cluster = release.cluster
    config = release.config_file("gth-scheduler-config", SCHEDULER_NS, "scheduler.yaml")
    args = [
        f"--config={config}" if a.startswith("--config=")
        else "--metrics-address=127.0.0.1:0" if a.startswith("--metrics-address=")
        else a.replace("$(POD_NAMESPACE)", SCHEDULER_NS)
        for a in release.container_args("deployment", "gth-scheduler", SCHEDULER_NS)
    ]  # fmt: skip
    kubeconfig = cluster.service_account_kubeconfig("gth-scheduler", SCHEDULER_NS)
    proc = _run(cluster, [command("gputopo-scheduler"), *args, "--kubeconfig", str(kubeconfig)])
    try:
        proc.port(timeout_s=60)

        def holder() -> str:
            lease = release.get("lease", "gth-scheduler", SCHEDULER_NS) or {}
            return str((lease.get("spec") or {}).get("holderIdentity") or "")

        assert wait_until(holder, 60, "the release's scheduler to take its Lease")
    finally:
        proc.stop()


def test_upgrade_with_a_changed_value_changes_the_objects(release: Release) -> None:
    sharing = {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    changed = {**VALUES, "scheduler": {**VALUES["scheduler"], "replicas": 2},
               "agent": {**VALUES["agent"], "config": {"sharing": sharing}}}  # fmt: skip
    release.helm("upgrade", RELEASE, str(h.CHART), "--values", str(h.values_file(changed)))
    deployment = release.get("deployment", "gth-scheduler", SCHEDULER_NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    agent_yaml = release.config_file("gth-agent-config", AGENT_NS, "agent.yaml").read_text()
    assert "timeSlicing" in agent_yaml
    history = release.helm("history", RELEASE, "--output=json")
    assert [e["revision"] for e in json.loads(history[history.index("[") :])] == [1, 2]


def _left(release: Release) -> list[str]:
    """The release's objects still there, each namespace with its status conditions."""
    left = []
    for kind, name, namespace in CREATED:
        obj = release.get(kind, name, namespace)
        if obj is not None:
            conditions = (obj.get("status") or {}).get("conditions") if kind == "namespace" else ""
            left.append(f"{kind}/{name} {conditions or ''}".strip())
    if left:  # what a namespace may be waiting for
        for namespace in (AGENT_NS, SCHEDULER_NS):
            what = ("get", "pods,leases,events", "-n", namespace, "-o", "wide")
            left.append(release.cluster.kubectl(*what, check=False))
    return left


def test_uninstall_removes_the_objects_and_keeps_the_crds(release: Release) -> None:
    release.helm("uninstall", RELEASE)
    try:
        wait_until(lambda: not _left(release), 120, "the release's objects to be gone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {_left(release)}") from None
    assert "not found" in release.helm("status", RELEASE, check=False)
    crds = release.cluster.kubectl("get", "crd", "-o", "name")
    assert "noderesourcetopologies.topology.node.k8s.io" in crds
