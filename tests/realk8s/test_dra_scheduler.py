"""gputopo-scheduler allocating ResourceClaims on a real 1.37 API server and kubelet, beside the
real kube-scheduler, with the agent as DRA driver gpu.gputopo.io (fixture pcie-4x-nvlink-pairs:
GPUs 0-1 and 2-3 NVLink pairs, all four given to DRA, its NRT published so the scheduler knows the
pairs).

On the same node state (gpu-0 held by a pod of kube-scheduler's): kube-scheduler gives a 2-GPU
claim the first two free devices, gpu-1 and gpu-2, across the pairs; gputopo-scheduler gives it
gpu-2 and gpu-3, one pair, and the pod runs. A gang of 4 pods x 2-GPU claims (8 GPUs on a
4-GPU node) binds none and allocates nothing; one of 2 x 2 binds both. A claim two pods share is
allocated once and reserved for both. An upstream PodGroup's claim (DRAWorkloadResourceClaims),
made by the resourceclaim controller from a template, is allocated once for the gang, one NVLink
pair, reserved for the PodGroup, and both members run with it. A claim no device satisfies stays
Pending with a reason naming its selector. A high-priority pod whose 2-GPU claim finds the node
full evicts one of two lower-priority claim pods, and runs on the pair its claim frees once the
resourceclaim controller has deallocated it; a high-priority gang of two 1-GPU claim pods evicts
two of four lower-priority ones and runs on the GPUs their claims free, and so does a tree of
two PodGroups of one 1-GPU claim pod each, each PodGroup in one rack; a high-priority claim
pod whose queue's max (2 GPUs) its claim would pass evicts its queue's lower-priority pod, though
the node has room, and runs."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.dra import DRIVER
from agent.nvml.fixture import load_fixture
from tests.builders.claims import taint_rule_obj
from tests.builders.dra import claim_template, make_claim, with_claim_template
from tests.builders.process import ROOT, CommandProcess
from tests.builders.realk8s import (
    COMPOSITES,
    PODGROUPS,
    Cluster,
    busybox_pod,
    child,
    composite,
    env_of,
    gpu_zones,
    wait_until,
)
from tests.builders.scheduler import podgroup
from tests.builders.workloads import upstream_podgroup

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(600)]

SCHEDULER = "gputopo-scheduler"
FIXTURE = "pcie-4x-nvlink-pairs"
DRA_YAML = ROOT / "daemonset" / "optional" / "dra" / "dra.yaml"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_LABEL = "gputopo.io/queue"
IMPLICIT_GPU = "deviceclass.resource.kubernetes.io/gpu.gputopo.io"
EXPLICIT_GPU = "gpu.gputopo.io/dra-gpu"
EXPLICIT_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
    "metadata": {"name": "test-dra-gpu.gputopo.io"},
    "spec": {"extendedResourceName": EXPLICIT_GPU,
             "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def pairs_agent(cluster: Cluster) -> Iterator[CommandProcess]:
    """The agent as DRA driver of the fixture's four GPUs, publishing the node's NRT.

    The session agent (dgx-h100), when a module started it, is paused meanwhile: both publish
    the node's one NRT, and each one's resync (60 s) puts its own back, so a 2-GPU claim would
    now and then be scored on the session agent's GPUs (first fit: 1, 2; CI saw it once).
    """
    cluster.kubectl("apply", "-f", str(DRA_YAML))
    held = cluster.node_agent
    with held.paused() if held is not None else contextlib.nullcontext():
        kubelet = cluster.kubelet
        proc = cluster.start_agent(
            "--nvml-fixture", FIXTURE, "--dra-gpus", "all", "--node-labels", "off",
            "--dra-registry-dir", kubelet["plugins_registry"],
            "--dra-plugins-dir", kubelet["plugins_dir"],
            "--share-record", str(cluster.run_dir / "agent" / "dra-pairs-shares.json"),
        )  # fmt: skip
        proc.port(timeout_s=60)
        wait_until(lambda: len(_devices(cluster)) == 4, 90, "the agent's ResourceSlice")
        uuids = {gpu.uuid for gpu in load_fixture(FIXTURE).inventory.gpus}
        wait_until(lambda: set(gpu_zones(cluster)) == uuids, 90, "the agent's NodeResourceTopology")
        yield proc
        proc.stop()


def _devices(cluster: Cluster) -> list[str]:
    listed = json.loads(
        cluster.kubectl(
            "get", "resourceslices", "-o", "json",
            f"--field-selector=spec.nodeName={cluster.node},spec.driver={DRIVER}",
        )
    )  # fmt: skip
    return [d["name"] for s in listed["items"] for d in s["spec"].get("devices", [])]


def _apply(cluster: Cluster, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))


def _claim_pod(name: str, template: str, scheduler: str | None = SCHEDULER) -> dict[str, Any]:
    return with_claim_template(busybox_pod(name, scheduler=scheduler), template)


def _claims(cluster: Cluster) -> list[dict[str, Any]]:
    return list(json.loads(cluster.kubectl("get", "resourceclaims", "-o", "json"))["items"])


def _claim_of(cluster: Cluster, pod: str) -> dict[str, Any] | None:
    """The claim the pod's status names (made from its template), as it is now."""
    statuses = (cluster.pod(pod).get("status") or {}).get("resourceClaimStatuses") or []
    names = [s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")]
    found = [c for c in _claims(cluster) if c["metadata"]["name"] in names]
    return found[0] if found else None


def _devices_of(claim: dict[str, Any] | None) -> list[str]:
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return sorted(r["device"] for r in (allocation.get("devices") or {}).get("results") or [])


def _allocated_devices(cluster: Cluster) -> set[str]:
    return {d for c in _claims(cluster) for d in _devices_of(c)}


def _pair(device: str) -> int:
    return int(device.removeprefix("gpu-")) // 2


def _refused_saying(cluster: Cluster, pod: str, word: str) -> str:
    """The pod's PodScheduled message, once it says `word`."""

    def refused() -> str:
        said = cluster.scheduled_message(pod)
        return said if word in said else ""

    return str(wait_until(refused, 90, f"{pod} refused, saying {word!r}"))


def _clean(cluster: Cluster, pods: list[str], templates: list[str]) -> None:
    cluster.delete_pods(*pods)
    if templates:
        cluster.kubectl("delete", "resourceclaimtemplates", *templates, "--ignore-not-found")
    wait_until(lambda: not _allocated_devices(cluster), 90, "every claim deallocated")


def test_a_two_gpu_claim_gets_one_nvlink_pair_where_kube_scheduler_takes_any_two(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    _apply(cluster, claim_template("one-gpu", DRIVER), claim_template("two-gpus", DRIVER, count=2))
    try:
        _apply(cluster, _claim_pod("hold", "one-gpu", scheduler=None))
        wait_until(lambda: _devices_of(_claim_of(cluster, "hold")), 90, "hold's claim allocated")
        assert _devices_of(_claim_of(cluster, "hold")) == ["gpu-0"]
        _apply(cluster, _claim_pod("theirs", "two-gpus", scheduler=None))
        theirs = wait_until(lambda: _devices_of(_claim_of(cluster, "theirs")), 90, "theirs")
        cluster.delete_pods("theirs")
        wait_until(lambda: _allocated_devices(cluster) == {"gpu-0"}, 90, "theirs deallocated")
        _apply(cluster, _claim_pod("ours", "two-gpus"))
        ours = wait_until(lambda: _devices_of(_claim_of(cluster, "ours")), 90, "ours allocated")
        cluster.wait_running("ours", timeout_s=120)
        print(f"kube-scheduler: {theirs}; gputopo-scheduler: {ours}")  # shown with -s
        assert theirs == ["gpu-1", "gpu-2"]  # first fit: across the pairs
        assert ours == ["gpu-2", "gpu-3"]  # one NVLink pair
        assert len({_pair(d) for d in ours}) == 1
        claim = _claim_of(cluster, "ours")
        assert claim is not None
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        assert [r["name"] for r in claim["status"]["reservedFor"]] == ["ours"]
    finally:
        _clean(cluster, ["hold", "theirs", "ours"], ["one-gpu", "two-gpus"])


@pytest.mark.parametrize("resource", [IMPLICIT_GPU, EXPLICIT_GPU])
def test_a_pod_asking_a_class_extended_resource_gets_a_claim_made_on_one_nvlink_pair(
    cluster: Cluster, pairs_agent, scheduler, resource: str
) -> None:
    """KEP-5004: the pod asks 2 of `deviceclass.resource.kubernetes.io/gpu.gputopo.io` (the
    name every class maps) or of `gpu.gputopo.io/dra-gpu` (a test class's
    `extendedResourceName`; `nvidia.com/gpu` is the session agent's device plugin's here).
    gputopo-scheduler creates the claim, allocates one NVLink pair around kube-scheduler's gpu-0,
    and names it in the pod's status; the kubelet admits the pod and has the agent prepare it."""
    _apply(cluster, claim_template("one-gpu", DRIVER), EXPLICIT_CLASS)
    try:
        _apply(cluster, _claim_pod("hold", "one-gpu", scheduler=None))
        wait_until(lambda: _devices_of(_claim_of(cluster, "hold")), 90, "hold's claim allocated")
        assert _devices_of(_claim_of(cluster, "hold")) == ["gpu-0"]
        _apply(cluster, busybox_pod("ext", scheduler=SCHEDULER, limits={resource: "2"}))
        cluster.wait_running("ext", timeout_s=120)
        pod = cluster.pod("ext")
        named = pod["status"]["extendedResourceClaimStatus"]
        assert named["requestMappings"] == [
            {"containerName": "main", "resourceName": resource,
             "requestName": "container-0-request-1"}  # cpu sorts first
        ]  # fmt: skip
        [claim] = [
            c for c in _claims(cluster) if c["metadata"]["name"] == named["resourceClaimName"]
        ]
        meta = claim["metadata"]
        assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        assert meta["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert _devices_of(claim) == ["gpu-2", "gpu-3"]  # one pair; first fit took gpu-1, gpu-2
        uuids = [gpu.uuid for gpu in load_fixture(FIXTURE).inventory.gpus]
        visible = wait_until(
            lambda: env_of(cluster.logs("ext")).get("NVIDIA_VISIBLE_DEVICES"), 30, "ext's env"
        )
        assert sorted(visible.split(",")) == sorted(uuids[2:4])
    finally:
        _clean(cluster, ["hold", "ext"], ["one-gpu"])
        cluster.kubectl("delete", "deviceclass", EXPLICIT_CLASS["metadata"]["name"])


PLUGIN_NODE = "test-plugin-node"  # an API object alone: no kubelet


def _plugin_node(cluster: Cluster, offered: str) -> None:
    """A node whose allocatable offers `offered: 1` (as a device plugin's resource shows)."""
    _apply(cluster, {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": PLUGIN_NODE},
        "spec": {"taints": [{"key": "gputopo.test/no-kubelet", "effect": "NoSchedule"}]},
    })  # fmt: skip
    amounts = {"cpu": "4", "memory": "8Gi", "pods": "10", offered: "1"}
    status = {"status": {"capacity": amounts, "allocatable": amounts}}
    cluster.kubectl(
        "patch", "node", PLUGIN_NODE, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


def _made_claim(cluster: Cluster, pod: str) -> list[str]:
    """The devices of the claim the pod's status names for its extended resources ([]: none)."""
    named = (cluster.pod(pod).get("status") or {}).get("extendedResourceClaimStatus") or {}
    name = named.get("resourceClaimName")
    return next((_devices_of(c) for c in _claims(cluster) if c["metadata"]["name"] == name), [])


def test_a_resource_a_device_plugin_serves_on_one_node_and_dra_on_another_is_taken_on_both(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    """A cluster half moved to DRA (kube-scheduler 1.37 decides node by node): a node whose
    allocatable offers 1 of `gpu.gputopo.io/dra-gpu` (its device plugin's, as the node says)
    and the kubelet's node, which does not and has four DRA GPUs the test class maps to it.
    Two pods of each scheduler ask 1: kube-scheduler's each take the resource as the node it
    chose serves it (no claim on the device plugin's node, a made claim on the other);
    gputopo-scheduler puts the first on the device plugin's node and, that one full, gives the
    second a made claim on the DRA node, where it runs."""
    _apply(cluster, EXPLICIT_CLASS)
    _plugin_node(cluster, EXPLICIT_GPU)
    theirs, ours = ["k1", "k2"], ["o1", "o2"]
    try:
        for pod in theirs:
            _apply(cluster, busybox_pod(pod, limits={EXPLICIT_GPU: "1"}))
        placed = {p: wait_until(lambda p=p: cluster.pod(p)["spec"].get("nodeName"), 90, p)
                  for p in theirs}  # fmt: skip
        kube = {p: (placed[p], _made_claim(cluster, p)) for p in theirs}
        cluster.kubectl("delete", "pod", *theirs, "--force", "--grace-period=0")
        wait_until(lambda: not _allocated_devices(cluster), 90, "kube-scheduler's claims gone")
        _apply(cluster, busybox_pod("o1", scheduler=SCHEDULER, limits={EXPLICIT_GPU: "1"}))
        wait_until(lambda: cluster.pod("o1")["spec"].get("nodeName"), 90, "o1 bound")
        _apply(cluster, busybox_pod("o2", scheduler=SCHEDULER, limits={EXPLICIT_GPU: "1"}))
        cluster.wait_running("o2", timeout_s=120)
        mine = {p: (cluster.pod(p)["spec"]["nodeName"], _made_claim(cluster, p)) for p in ours}
        print(f"kube-scheduler: {kube}; gputopo-scheduler: {mine}")
        for node, devices in kube.values():
            assert (node == PLUGIN_NODE) == (devices == [])  # the way the node serves it
            assert node in (PLUGIN_NODE, cluster.node)
        assert mine["o1"] == (PLUGIN_NODE, [])
        assert mine["o2"][0] == cluster.node
        assert len(mine["o2"][1]) == 1
    finally:
        cluster.kubectl("delete", "pod", *theirs, *ours, "--force", "--grace-period=0",
                        "--ignore-not-found")  # fmt: skip
        cluster.kubectl("delete", "node", PLUGIN_NODE, "--ignore-not-found")
        cluster.kubectl("delete", "deviceclass", EXPLICIT_CLASS["metadata"]["name"])
        wait_until(lambda: not _allocated_devices(cluster), 90, "every claim deallocated")


def test_a_gang_of_two_gpu_claims_binds_all_or_none(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    _apply(cluster, claim_template("gang-gpus", DRIVER, count=2))
    big, small = [f"big-{i}" for i in range(4)], [f"small-{i}" for i in range(2)]
    try:
        _apply(cluster, podgroup("big", len(big)), podgroup("small", len(small)))
        for pod in big:
            body = _claim_pod(pod, "gang-gpus")
            body["metadata"]["labels"] = {GANG_LABEL: "big"}
            _apply(cluster, body)
        wait_until(lambda: all(_claim_of(cluster, p) for p in big), 60, "big's claims made")
        wait_until(lambda: cluster.scheduled_message(big[0]), 60, "the big gang refused")
        time.sleep(5)
        assert [cluster.pod(p)["spec"].get("nodeName") for p in big] == [None] * 4
        assert _allocated_devices(cluster) == set()
        print(f"4 x 2 GPUs on 4: {cluster.scheduled_message(big[0])}")
        cluster.delete_pods(*big)
        for pod in small:
            body = _claim_pod(pod, "gang-gpus")
            body["metadata"]["labels"] = {GANG_LABEL: "small"}
            _apply(cluster, body)
        wait_until(
            lambda: all(cluster.pod(p)["spec"].get("nodeName") for p in small), 90, "small bound"
        )
        held = [_devices_of(_claim_of(cluster, p)) for p in small]
        assert sorted(held) == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]
    finally:
        _clean(cluster, [*big, *small], ["gang-gpus"])
        cluster.kubectl(
            "delete", "podgroups.scheduling.x-k8s.io", "big", "small", "--ignore-not-found"
        )


def test_a_claim_shared_by_two_pods_is_allocated_once_for_both(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    claim = make_claim("shared")
    claim["metadata"]["namespace"] = "default"
    pods = ["share-a", "share-b"]
    try:
        _apply(cluster, claim)
        for pod in pods:
            body = busybox_pod(pod, scheduler=SCHEDULER)
            body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
            body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            _apply(cluster, body)
        for pod in pods:
            cluster.wait_running(pod, timeout_s=120)
        found = json.loads(cluster.kubectl("get", "resourceclaim", "shared", "-o", "json"))
        assert sorted(r["name"] for r in found["status"]["reservedFor"]) == pods
        assert len(_devices_of(found)) == 1
    finally:
        cluster.delete_pods(*pods)
        cluster.kubectl("delete", "resourceclaim", "shared", "--ignore-not-found")
        wait_until(lambda: not _allocated_devices(cluster), 90, "the shared claim gone")


def test_a_podgroup_claim_is_allocated_once_and_reserved_for_the_podgroup(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    entry = {"name": "gpu", "resourceClaimTemplateName": "group-gpus"}
    group = upstream_podgroup("pgc", 2, resourceClaims=[entry])
    pods = ["pgc-0", "pgc-1"]
    try:
        _apply(cluster, claim_template("group-gpus", DRIVER, count=2), group)
        for pod in pods:
            body = _claim_pod(pod, "group-gpus")
            body["spec"]["schedulingGroup"] = {"podGroupName": "pgc"}
            _apply(cluster, body)
        for pod in pods:
            cluster.wait_running(pod, timeout_s=120)
        claims = {(_claim_of(cluster, p) or {}).get("metadata", {}).get("name") for p in pods}
        assert len(claims) == 1  # one claim, the group's
        claim = _claim_of(cluster, pods[0])
        assert claim is not None
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("PodGroup", "pgc")
        reserved = claim["status"]["reservedFor"]
        print(f"group claim {claim['metadata']['name']}: {_devices_of(claim)}; {reserved}")
        assert [(r.get("apiGroup"), r["resource"], r["name"]) for r in reserved] == [
            ("scheduling.k8s.io", "podgroups", "pgc")
        ]
        assert len({_pair(d) for d in _devices_of(claim)}) == 1 == len(_devices_of(claim)) // 2
    finally:
        cluster.delete_pods(*pods)
        cluster.kubectl(
            "delete", "podgroups.scheduling.k8s.io", "pgc", "--ignore-not-found", "--wait=false"
        )
        _clean(cluster, [], ["group-gpus"])


def test_device_taint_rules_keep_both_schedulers_off_the_devices_they_taint(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    """DeviceTaintRules (GA in 1.37) taint gpu-0..2: kube-scheduler and gputopo-scheduler each
    give a 1-GPU claim gpu-3, and gputopo-scheduler refuses a 2-GPU claim, naming the taints."""
    rules = [
        taint_rule_obj(f"test-maint-{g}", selector={"driver": DRIVER, "device": f"gpu-{g}"})
        for g in range(3)
    ]
    _apply(cluster, claim_template("one-gpu", DRIVER), claim_template("two-gpus", DRIVER, count=2))
    _apply(cluster, *rules)
    try:
        _apply(cluster, _claim_pod("theirs", "one-gpu", scheduler=None))
        theirs = wait_until(lambda: _devices_of(_claim_of(cluster, "theirs")), 90, "theirs")
        cluster.delete_pods("theirs")
        wait_until(lambda: not _allocated_devices(cluster), 90, "theirs deallocated")
        _apply(cluster, _claim_pod("ours", "one-gpu"))
        ours = wait_until(lambda: _devices_of(_claim_of(cluster, "ours")), 90, "ours allocated")
        _apply(cluster, _claim_pod("more", "two-gpus"))
        reason = _refused_saying(cluster, "more", "taints")
        print(f"kube-scheduler: {theirs}; gputopo-scheduler: {ours}; then: {reason}")
        assert theirs == ours == ["gpu-3"]
        assert "1 of 2 devices tolerate their taints" in reason
        assert cluster.pod("more")["spec"].get("nodeName") is None
    finally:
        names = [r["metadata"]["name"] for r in rules]
        cluster.kubectl("delete", "devicetaintrules", *names, "--ignore-not-found")
        _clean(cluster, ["theirs", "ours", "more"], ["one-gpu", "two-gpus"])


def test_a_claim_no_device_satisfies_stays_pending_naming_its_selector(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    selector = f"device.attributes['{DRIVER}'].productName == 'NVIDIA B300'"
    _apply(cluster, claim_template("nowhere", DRIVER, selector))
    try:
        _apply(cluster, _claim_pod("lost", "nowhere"))
        reason = _refused_saying(cluster, "lost", "selector")
        print(f"unsatisfiable: {reason}")
        assert selector in reason
        assert cluster.pod("lost")["spec"].get("nodeName") is None
    finally:
        _clean(cluster, ["lost"], ["nowhere"])


def _low_pods_left(cluster: Cluster, pods: list[str]) -> list[str]:
    listed = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
    alive = {p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")}
    return [p for p in pods if p in alive]


def _running_claim_pods(cluster: Cluster, pods: list[str], template: str) -> dict[str, list[str]]:
    """`pods` with a claim from `template` each, running: each one's devices."""
    for pod in pods:
        _apply(cluster, _claim_pod(pod, template))
    for pod in pods:
        cluster.wait_running(pod, timeout_s=120)
    return {pod: _devices_of(_claim_of(cluster, pod)) for pod in pods}


def _ran_where_victims_were(
    cluster: Cluster, pods: list[str], low: list[str], held: dict[str, list[str]]
) -> tuple[list[str], list[str], list[str]]:
    """Once `pods` run: the `low` pods left, the devices `pods` got and those the evicted low
    pods held (`held`), both sorted."""
    for pod in pods:
        cluster.wait_running(pod, timeout_s=180)
    left = _low_pods_left(cluster, low)
    got = sorted(d for pod in pods for d in _devices_of(_claim_of(cluster, pod)))
    print(f"held {held}; {pods} got {got}; left {left}")  # shown with -s
    return left, got, sorted(d for pod in set(low) - set(left) for d in held[pod])


def _priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


@contextlib.contextmanager
def _preempting(
    cluster: Cluster, template: str, count: int, priority: str, pods: list[str]
) -> Iterator[None]:
    """Claim template `template` (`count` GPUs) and PriorityClass `priority` (1000) applied; on
    exit `pods` deleted and their claims deallocated, the template and the class removed."""
    _apply(cluster, claim_template(template, DRIVER, count=count))
    _apply(cluster, _priority_class(priority, 1000))
    try:
        yield
    finally:
        _clean(cluster, pods, [template])
        cluster.kubectl("delete", "priorityclass", priority, "--ignore-not-found")


def test_a_high_priority_claim_pod_evicts_a_lower_one_and_runs_on_its_gpus(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    low = ["low-0", "low-1"]
    with _preempting(cluster, "pair", 2, "dra-urgent", [*low, "urgent"]):
        held = _running_claim_pods(cluster, low, "pair")
        urgent = _claim_pod("urgent", "pair")
        urgent["spec"]["priorityClassName"] = "dra-urgent"
        _apply(cluster, urgent)
        cluster.wait_running("urgent", timeout_s=180)
        left = _low_pods_left(cluster, low)
        got = _devices_of(_claim_of(cluster, "urgent"))
        print(f"held {held}; urgent got {got}; left {left}")  # shown with -s
        assert len(left) == 1
        (victim,) = set(low) - set(left)
        assert got == held[victim]


def test_a_high_priority_claim_gang_evicts_two_lower_pods_and_runs_on_their_gpus(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    low = [f"low-{i}" for i in range(4)]
    gang = ["urgent-0", "urgent-1"]
    try:
        with _preempting(cluster, "one", 1, "dra-urgent-gang", [*low, *gang]):
            held = _running_claim_pods(cluster, low, "one")
            _apply(cluster, podgroup("urgent", len(gang)))
            for pod in gang:
                body = _claim_pod(pod, "one")
                body["metadata"]["labels"] = {GANG_LABEL: "urgent"}
                body["spec"]["priorityClassName"] = "dra-urgent-gang"
                _apply(cluster, body)
            left, got, freed = _ran_where_victims_were(cluster, gang, low, held)
            assert len(left) == 2
            assert got == freed
    finally:
        cluster.kubectl("delete", "podgroups.scheduling.x-k8s.io", "urgent", "--ignore-not-found")


def test_a_tree_of_claim_pods_with_a_rack_per_podgroup_evicts_two_lower_pods(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    """A root of priority 1000 over PodGroups a and b, each of one pod with a 1-GPU claim and
    the rack as its topology (the node is rack r1), finds the node's four GPUs held by four
    1-GPU claim pods of priority 0: two are evicted, and both groups run on the GPUs their
    claims freed. (The tree's pods have the root's priority, as 1.37 asks.)"""
    low = [f"low-{i}" for i in range(4)]
    members = ["tree-a-0", "tree-b-0"]
    try:
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack=r1", "--overwrite")
        with _preempting(cluster, "one", 1, "dra-urgent-tree", [*low, *members]):
            held = _running_claim_pods(cluster, low, "one")
            root = composite("tree", 2)
            root["spec"]["priorityClassName"] = "dra-urgent-tree"
            _apply(cluster, root)
            for side, pod in zip("ab", members, strict=True):
                group = child(f"tree-{side}", "tree", 1)
                group["spec"]["schedulingConstraints"] = {"topology": [{"key": "gputopo.io/rack"}]}
                body = _claim_pod(pod, "one")
                body["spec"]["schedulingGroup"] = {"podGroupName": f"tree-{side}"}
                body["spec"]["priorityClassName"] = "dra-urgent-tree"
                _apply(cluster, group, body)
            left, got, freed = _ran_where_victims_were(cluster, members, low, held)
            assert len(left) == 2
            assert got == freed
    finally:
        cluster.kubectl("delete", PODGROUPS, "tree-a", "tree-b", "--ignore-not-found")
        cluster.kubectl("delete", COMPOSITES, "tree", "--ignore-not-found")
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack-")


def test_a_claim_pod_over_its_queues_max_evicts_its_queues_lower_pod(
    cluster: Cluster, pairs_agent, scheduler
) -> None:
    queue = {"apiVersion": "scheduling.gputopo.io/v1alpha1", "kind": "Queue"}
    queue.update({"metadata": {"name": "dra-team"}, "spec": {"max": {"nvidia.com/gpu": "2"}}})
    _apply(cluster, queue)
    try:
        with _preempting(cluster, "pair", 2, "dra-urgent-queue", ["team-low", "team-urgent"]):
            low = _claim_pod("team-low", "pair")
            low["metadata"]["labels"] = {QUEUE_LABEL: "dra-team"}
            _apply(cluster, low)
            cluster.wait_running("team-low", timeout_s=120)
            urgent = _claim_pod("team-urgent", "pair")
            urgent["metadata"]["labels"] = {QUEUE_LABEL: "dra-team"}
            urgent["spec"]["priorityClassName"] = "dra-urgent-queue"
            _apply(cluster, urgent)
            cluster.wait_running("team-urgent", timeout_s=180)
            assert _low_pods_left(cluster, ["team-low"]) == []
            assert len(_devices_of(_claim_of(cluster, "team-urgent"))) == 2
    finally:
        cluster.kubectl("delete", "queues.scheduling.gputopo.io", "dra-team", "--ignore-not-found")
