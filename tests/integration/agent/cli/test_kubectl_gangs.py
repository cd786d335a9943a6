"""`kubectl gputopo gangs` against the fake API server (real client): both PodGroup APIs, the
served upstream version, a server without scheduling.k8s.io, and malformed groups."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
import yaml

from agent.cli import kubectl as kubectl_plugin
from tests.builders.scheduler import create_pod, create_podgroup, pod_body, podgroup
from tests.builders.workloads import (
    OURS,
    PODGROUPS,
    child_podgroup,
    composite_podgroup,
    create_composite,
    create_upstream_podgroup,
    create_workload,
    create_workload_pod,
    member_pod,
    upstream_podgroup,
    workload_135,
    workload_pod,
)
from tests.fakeapi import FakeApiServer

LABEL = "scheduling.x-k8s.io/pod-group"
HEADER = ["NAMESPACE", "NAME", "API", "MIN", "PODS", "BOUND", "PENDING", "TOPOLOGY", "STATUS"]


pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer) -> str:
    path = fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
    return str(path)


def _in_namespace(kubeconfig: str, namespace: str) -> str:
    """A copy of `kubeconfig` whose current context names `namespace` (as `kubectl config
    set-context --current --namespace` writes it)."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    current = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])
    current["context"]["namespace"] = namespace
    path = Path(kubeconfig).with_name(f"kubeconfig-{namespace}")
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = kubectl_plugin.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _ours(fake: FakeApiServer, custom, core) -> None:
    body = podgroup("train", 2, annotations={"gputopo.io/topology-required": "rack"})
    create_podgroup(custom, body)
    create_pod(core, pod_body("train-0", gpus=1, labels={LABEL: "train"}))
    create_pod(core, pod_body("train-1", gpus=1, labels={LABEL: "train"}, node="n1"))


def test_both_kinds_in_the_served_version(fake_api, kubeconfig, core_v1, custom_objects) -> None:
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    _ours(fake_api, custom_objects, core_v1)
    create_upstream_podgroup(custom_objects, upstream_podgroup("infer", 3, topology="zone"))
    create_upstream_podgroup(custom_objects, upstream_podgroup("web"))
    create_pod(core_v1, member_pod("infer-0", "infer"))
    create_pod(core_v1, member_pod("web-0", "web", node="n1"))
    group = fake_api.get_object(PODGROUPS, "infer", "default")
    condition = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}
    fake_api.put_object(PODGROUPS, group | {"status": {"conditions": [condition]}})
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()] == [
        HEADER,
        ["default", "infer", "scheduling.k8s.io/v1beta1", "3", "1", "0", "1", "zone",
         "Unschedulable"],
        ["default", "train", "scheduling.x-k8s.io", "2", "2", "1", "1", "rack", "-"],
        ["default", "web", "scheduling.k8s.io/v1beta1", "-", "1", "1", "0", "-", "-"],
    ]  # fmt: skip
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "-o", "json")
    assert (code, err) == (0, "")
    shown = {(g["name"], g["api"]): g for g in json.loads(out)["gangs"]}
    assert shown["infer", "scheduling.k8s.io/v1beta1"]["minCount"] == 3
    assert shown["web", "scheduling.k8s.io/v1beta1"]["basic"] is True
    assert shown["train", "scheduling.x-k8s.io"]["members"] == ["train-0", "train-1"]
    code, out, _ = run("--kubeconfig", kubeconfig, "gangs", "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out)["gangs"] == list(shown.values())


def test_a_tree_of_composite_pod_groups(fake_api, kubeconfig, core_v1, custom_objects) -> None:
    """With CompositePodGroups served: the root is a row of its own, counting its PodGroups'
    pods; `-o json` names each PodGroup's parent."""
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"), composite_gate=True)
    create_composite(custom_objects, composite_podgroup("job", 2, topology="rack"))
    for side, count in (("a", 2), ("b", 1)):
        create_upstream_podgroup(custom_objects, child_podgroup(side, count, "job"))
    for name, group, node in (("a-0", "a", "n1"), ("a-1", "a", "n1"), ("b-0", "b", None)):
        create_pod(core_v1, member_pod(name, group, node=node))
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()] == [
        HEADER,
        ["default", "a", "scheduling.k8s.io/v1beta1", "2", "2", "2", "0", "-", "-"],
        ["default", "b", "scheduling.k8s.io/v1beta1", "1", "1", "0", "1", "-", "-"],
        ["default", "job", "compositepodgroups.scheduling.k8s.io", "2", "3", "2", "1", "rack",
         "Waiting", "(1", "of", "2", "groups)"],
    ]  # fmt: skip
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "-o", "json")
    shown = {g["name"]: g for g in json.loads(out)["gangs"]}
    assert (shown["a"]["parent"], shown["b"]["parent"], shown["job"]["parent"]) == (
        "job",
        "job",
        None,
    )


def test_v1alpha2_and_its_condition(fake_api, kubeconfig, custom_objects) -> None:
    fake_api.serve_workload_api(("v1alpha2",))
    create_upstream_podgroup(custom_objects, upstream_podgroup("g", 2, version="v1alpha2"))
    group = fake_api.get_object(PODGROUPS, "g", "default")
    condition = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}
    fake_api.put_object(PODGROUPS, group | {"status": {"conditions": [condition]}})
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")
    assert (code, err) == (0, "")
    assert out.splitlines()[1].split() == [
        "default", "g", "scheduling.k8s.io/v1alpha2", "2", "0", "0", "0", "-", "Scheduled"
    ]  # fmt: skip


def test_1_35_workloads_pod_groups_per_replica_key(
    fake_api, kubeconfig, kube_client, custom_objects
) -> None:
    fake_api.serve_workload_api(("v1alpha1",))
    create_workload(custom_objects, workload_135("serve", replica=2))
    create_workload_pod(kube_client, workload_pod("r0-a", "serve", "replica", "0"))
    create_workload_pod(kube_client, workload_pod("r1-a", "serve", "replica", "1", node="n1"))
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()] == [
        HEADER,
        ["default", "serve/replica/0", "scheduling.k8s.io/v1alpha1", "2", "1", "0", "1", "-", "-"],
        ["default", "serve/replica/1", "scheduling.k8s.io/v1alpha1", "2", "1", "1", "0", "-", "-"],
    ]  # fmt: skip


def test_without_scheduling_k8s_io_our_gangs_are_listed(
    fake_api, kubeconfig, core_v1, custom_objects
) -> None:
    _ours(fake_api, custom_objects, core_v1)
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "-A")
    assert (code, err) == (0, "")
    assert [line.split()[:3] for line in out.splitlines()] == [
        HEADER[:3],
        ["default", "train", "scheduling.x-k8s.io"],
    ]


def test_namespaces(fake_api, kubeconfig, core_v1, custom_objects) -> None:
    fake_api.serve_workload_api()
    core_v1.create_namespace({"metadata": {"name": "team"}})
    _ours(fake_api, custom_objects, core_v1)
    create_upstream_podgroup(custom_objects, upstream_podgroup("t", 2, namespace="team"))
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "-n", "team")
    assert (code, err) == (0, "")
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["team", "t"]]
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "--all-namespaces")
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [
        ["default", "train"],
        ["team", "t"],
    ]
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")  # the context names none
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["default", "train"]]
    code, out, err = run("--kubeconfig", _in_namespace(kubeconfig, "team"), "gangs")
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["team", "t"]]
    code, out, err = run("--kubeconfig", kubeconfig, "gangs", "-n", "empty")
    assert (code, out, err) == (0, "", "kubectl-gputopo: no gangs in namespace empty\n")
    with pytest.raises(SystemExit):
        run("--kubeconfig", kubeconfig, "gangs", "-n", "team", "-A")


def test_malformed_groups_show_their_problem(fake_api, kubeconfig, core_v1) -> None:
    fake_api.serve_workload_api()
    fake_api.put_object(
        PODGROUPS,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": "two"}}},
        },
    )
    fake_api.put_object(
        OURS,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "worse", "namespace": "default"},
            "spec": "nonsense",
        },
    )
    create_pod(core_v1, pod_body("orphan-0", gpus=1, labels={LABEL: "gone"}))
    code, out, err = run("--kubeconfig", kubeconfig, "gangs")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].split()[:4] == ["default", "bad", "scheduling.k8s.io/v1beta1", "?"]
    assert lines[1].endswith(
        "invalid: spec.schedulingPolicy.gang.minCount: must be a positive integer, got 'two'"
    )
    assert lines[2].split()[:5] == ["default", "gone", "scheduling.x-k8s.io", "?", "1"]
    assert lines[2].endswith("PodGroup not found")
    assert lines[3].split()[:4] == ["default", "worse", "scheduling.x-k8s.io", "?"]
    assert lines[3].endswith("invalid: spec: must be an object, got 'nonsense'")
