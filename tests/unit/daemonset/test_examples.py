"""daemonset/examples/: what each example asks for, and that it asks gputopo-scheduler for it."""

from __future__ import annotations

import re

import pytest
import yaml

from agent.quantity import parse_quantity
from scheduler.placement.request import Effect, Taint
from scheduler.runtime.cluster.podspec import pod_request
from tests.builders import render as r

POD_FILES = {
    "mig-pod.yaml",
    "nvlink-8gpu-job.yaml",
    "gang-podgroup.yaml",
    "kueue-pod.yaml",
    "queues-borrowing-demo.yaml",
    "queues-hierarchy.yaml",
}
EXPECTED_FILES = POD_FILES | {"queues-two-teams.yaml", "elasticquota.yaml"}
GPU = "nvidia.com/gpu"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-[1-7]g\.[0-9]+gb(\.[a-z]+)*$")


def _pods(docs: list[r.Obj]) -> list[tuple[r.Obj, r.Obj]]:
    """(owner object, pod spec) for every pod an example creates or templates."""
    return [(o, spec) for o in docs for spec in r.pod_specs(o)]


def _limits(spec: r.Obj) -> dict[str, int]:
    """Summed integer extended-resource limits (nvidia.com/*) of a pod spec's containers."""
    total: dict[str, int] = {}
    for container in spec["containers"]:
        for name, value in (container.get("resources", {}).get("limits") or {}).items():
            if name.startswith("nvidia.com/"):
                total[name] = total.get(name, 0) + int(parse_quantity(value))
    return total


def _pod_labels(owner: r.Obj) -> dict[str, str]:
    """The labels the pods get: the Pod's own, or its owner's pod template's."""
    meta = owner["metadata"] if owner["kind"] == "Pod" else owner["spec"]["template"]["metadata"]
    labels: dict[str, str] = meta.get("labels") or {}
    return labels


def _replicas(owner: r.Obj) -> int:
    return int(owner["spec"].get("parallelism", 1)) if owner["kind"] == "Job" else 1


def test_the_examples_are_there(examples):
    assert set(examples) == EXPECTED_FILES


@pytest.mark.parametrize("name", sorted(POD_FILES))
def test_every_example_pod_uses_gputopo_scheduler(examples, name):
    pods = _pods(examples[name])
    assert pods
    assert {spec.get("schedulerName") for _, spec in pods} == {"gputopo-scheduler"}


@pytest.mark.parametrize("name", sorted(POD_FILES))
def test_gpu_requests_follow_extended_resource_rules(examples, name):
    """Extended resources: integer limits; requests, if given, equal the limits."""
    for _, spec in _pods(examples[name]):
        for container in spec["containers"]:
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            gpu = {n: v for n, v in limits.items() if n.startswith("nvidia.com/")}
            assert gpu, f"{name}: {container['name']} asks for no GPU"
            assert all(parse_quantity(v) == int(parse_quantity(v)) for v in gpu.values())
            assert all(str(requests[n]) == str(v) for n, v in gpu.items() if n in requests)


def test_mig_pod_asks_for_one_1g_10gb_slice(examples):
    ((owner, spec),) = _pods(examples["mig-pod.yaml"])
    assert owner["kind"] == "Pod"
    assert _limits(spec) == {"nvidia.com/mig-1g.10gb": 1}
    assert all(MIG_RESOURCE.match(n) for n in _limits(spec))


def test_nvlink_job_is_one_pod_with_eight_gpus(examples):
    ((owner, spec),) = _pods(examples["nvlink-8gpu-job.yaml"])
    assert (owner["apiVersion"], owner["kind"]) == ("batch/v1", "Job")
    assert _replicas(owner) == 1
    assert owner["spec"].get("completions", 1) == 1
    assert _limits(spec) == {"nvidia.com/gpu": 8}


def test_gang_is_a_podgroup_of_four_two_gpu_pods_in_one_rack(examples):
    docs = examples["gang-podgroup.yaml"]
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["metadata"]["annotations"]["gputopo.io/topology-required"] == "gputopo.io/rack"
    pods = _pods(docs)
    members = [
        (owner, spec)
        for owner, spec in pods
        if _pod_labels(owner).get("scheduling.x-k8s.io/pod-group") == group["metadata"]["name"]
    ]
    assert members == pods
    count = sum(_replicas(owner) for owner, _ in members)
    assert count == group["spec"]["minMember"] == 4
    assert all(_limits(spec) == {"nvidia.com/gpu": 2} for _, spec in members)
    gpus = sum(_replicas(o) * _limits(s)["nvidia.com/gpu"] for o, s in members)
    assert parse_quantity(group["spec"]["minResources"]["nvidia.com/gpu"]) == gpus


def test_gang_job_runs_all_members_at_once(examples):
    (job,) = [d for d in examples["gang-podgroup.yaml"] if d["kind"] == "Job"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"]


def test_kueue_pod_leaves_the_gate_to_kueue(examples):
    """Kueue's webhook adds its admission gate to a pod with a queue-name label; a gate written
    by hand would be there even where Kueue is not, and the pod would never start."""
    ((owner, spec),) = _pods(examples["kueue-pod.yaml"])
    assert owner["kind"] == "Pod"
    assert owner["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert "schedulingGates" not in spec
    assert spec["schedulerName"] == "gputopo-scheduler"


def test_examples_leave_the_namespace_to_the_user(examples):
    namespaced = [
        d["metadata"]["name"]
        for docs in examples.values()
        for d in docs
        if "namespace" in d["metadata"]
    ]
    assert namespaced == []


def test_gang_topology_label_is_a_configured_topology_level(examples, objects):
    (group,) = [d for d in examples["gang-podgroup.yaml"] if d["kind"] == "PodGroup"]
    config = r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    levels = yaml.safe_load(config).get("topologyLevels", [])
    assert group["metadata"]["annotations"]["gputopo.io/topology-required"] in levels


def _queues(docs: list[r.Obj]) -> dict[str, r.Obj]:
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Queue"}


def _gpus(limits: r.Obj) -> int:
    return int(parse_quantity(limits[GPU]))


def test_two_teams_are_guaranteed_8_and_capped_at_16_in_their_namespaces(examples):
    queues = _queues(examples["queues-two-teams.yaml"])
    assert set(queues) == {"team-a", "team-b"}
    for name, spec in queues.items():
        assert (_gpus(spec["min"]), _gpus(spec["max"])) == (8, 16)
        assert spec["namespaces"] == [name]
        assert spec["weight"] >= 1


def test_borrowing_demo_asks_team_a_for_more_than_its_min(examples):
    team_a = _queues(examples["queues-two-teams.yaml"])["team-a"]
    pods = _pods(examples["queues-borrowing-demo.yaml"])
    asked = sum(_replicas(owner) * _limits(spec)[GPU] for owner, spec in pods)
    assert _gpus(team_a["min"]) < asked <= _gpus(team_a["max"])
    assert all("gputopo.io/queue" not in _pod_labels(owner) for owner, _ in pods)


def test_hierarchy_children_are_capped_by_org(examples):
    docs = examples["queues-hierarchy.yaml"]
    queues = _queues(docs)
    assert "parent" not in queues["org"]
    assert _gpus(queues["org"]["max"]) == 12
    children = {n: q for n, q in queues.items() if q.get("parent") == "org"}
    assert {n: _gpus(q["max"]) for n, q in children.items()} == {"a": 10, "b": 10}
    ((owner, spec),) = _pods(docs)
    assert _pod_labels(owner)["gputopo.io/queue"] in children
    assert _replicas(owner) * _limits(spec)[GPU] > _gpus(children["a"]["max"])


def test_elasticquota_guarantees_less_than_its_max(examples):
    (quota,) = examples["elasticquota.yaml"]
    assert (quota["apiVersion"], quota["kind"]) == ("scheduling.x-k8s.io/v1alpha1", "ElasticQuota")
    assert 0 < _gpus(quota["spec"]["min"]) <= _gpus(quota["spec"]["max"])


def _readme_taints() -> set[Taint]:
    """Every taint the README tells you to put on GPU nodes (`kubectl taint node(s) ...`)."""
    text = (r.REPO / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"kubectl taint nodes? <node> ([\w./-]+)=([\w.-]*):(\w+)", text)
    return {Taint(key=key, value=value, effect=Effect(effect)) for key, value, effect in found}


def test_the_readme_recommends_one_taint_for_gpu_nodes():
    assert _readme_taints() == {
        Taint(key="gputopo.io/dedicated", value="true", effect=Effect.NO_SCHEDULE)
    }


@pytest.mark.parametrize("name", sorted(POD_FILES))
def test_every_example_pod_tolerates_the_taint_the_readme_recommends(examples, name):
    """Read as the scheduler reads a pod (its TaintToleration filter), on a node tainted as the
    README says."""
    taints = _readme_taints()
    for owner, spec in _pods(examples[name]):
        pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}
        request = pod_request(pod)
        untolerated = [t for t in taints if not any(x.tolerates(t) for x in request.tolerations)]
        assert untolerated == [], owner["metadata"]["name"]
