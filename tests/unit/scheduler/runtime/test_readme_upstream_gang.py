"""The README's Job with a scheduling.k8s.io PodGroup (section "Run a gang"): the PodGroup reads
as a gang of 4 in one rack, evicted whole, and every pod of the Job joins it. Its tree of a
CompositePodGroup: both replicas or neither, each in one rack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.composite import composite_key
from scheduler.runtime.cluster.groups import group_key, workload_gang
from scheduler.runtime.cluster.podinfo import read_pod
from scheduler.runtime.cluster.upstream import (
    members_disagree,
    parse_upstream_group,
    parse_workload_group,
)

README = Path(__file__).resolve().parents[4] / "README.md"


def _documents() -> list[dict[str, Any]]:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [d for b in blocks if "schedulingGroup" in b for d in yaml.safe_load_all(b)]


def test_the_job_and_its_podgroup_are_one_gang() -> None:
    group_body, job = _documents()
    assert group_body["apiVersion"] == "scheduling.k8s.io/v1beta1"
    group = parse_upstream_group(
        {**group_body, "spec": {**group_body["spec"], "priority": 100}},
        levels=("gputopo.io/rack",),
    )
    assert group.error is None
    assert (group.min_member, group.whole, group.priority) == (4, True, 100)
    assert group.topology is not None
    assert group.topology.label == "gputopo.io/rack"
    pod = {"metadata": {"name": "llm-train-0", "namespace": "default"}, **job["spec"]["template"]}
    info = read_pod(pod, "gputopo-scheduler")
    assert info.ours
    assert info.group_key == group_key("default", "llm-train", upstream=True)
    assert job["spec"]["parallelism"] == group.min_member


def test_the_jobs_pods_have_the_podgroups_priority_as_kube_requires() -> None:
    """The API server resolves each `priorityClassName` to the same `priority` on the PodGroup
    and on the pods: the gang is tried (not refused with kube-scheduler's SchedulerError)."""
    group_body, job = _documents()
    template = job["spec"]["template"]["spec"]
    assert template["priorityClassName"] == group_body["spec"]["priorityClassName"]
    resolved = {"spec": {**group_body["spec"], "priority": 100}}
    pods = [{"spec": {**template, "priority": 100}} for _ in range(job["spec"]["parallelism"])]
    assert members_disagree(resolved, pods) is None


def test_the_1_35_workload_and_its_pod_are_one_replicas_gang() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    workload, pod = next(list(yaml.safe_load_all(b)) for b in blocks if "kind: Workload" in b)
    assert workload["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    info = read_pod(
        {**pod, "metadata": {**pod["metadata"], "namespace": "default"}},
        pod["spec"]["schedulerName"],
    )
    assert info.ours
    assert info.group_key is not None
    gang = workload_gang(info.group_key)
    assert gang is not None
    group = parse_workload_group(
        {**workload, "metadata": {**workload["metadata"], "namespace": "default"}}, gang
    )
    assert group.error is None
    assert (group.min_member, gang.replica_key) == (2, "0")
    assert group.title == (
        "pod group replica of Workload default/serve (scheduling.k8s.io/v1alpha1, replica key 0)"
    )


def test_the_composite_and_its_replicas_are_one_tree_of_both() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    root, replica = next(
        list(yaml.safe_load_all(b)) for b in blocks if "kind: CompositePodGroup" in b
    )
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_composite({**root, "metadata": {**root["metadata"], "namespace": "default"}})
    for r in range(2):
        meta = {"name": f"llm-replica-{r}", "namespace": "default"}
        cache.upsert_group({**replica, "metadata": meta}, upstream=True)
    tree = cache.gang(composite_key("default", "llm-replicas"))
    assert tree is not None
    assert tree.error is None
    assert tree.tree is not None
    leaves = [group_key("default", f"llm-replica-{r}", upstream=True) for r in range(2)]
    assert tree.tree.leaves() == leaves
    assert [c.topology.label if c.topology else None for c in tree.tree.children] == [
        "gputopo.io/rack",
        "gputopo.io/rack",
    ]
    one = {leaves[0]: 4}
    assert not tree.tree.satisfied(lambda k: one.get(k, 0))
    assert tree.tree.satisfied(lambda k: 4)
