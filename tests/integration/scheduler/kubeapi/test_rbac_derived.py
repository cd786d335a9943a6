"""The scheduler's roles grant exactly what the scheduler calls: derived from the fake API server's
authorization checks while the real scheduler runs with leader election through its scenarios: a
pod bound, a pod that does not fit (Event + PodScheduled=False), a gang (PodGroup status), a gang
of an upstream scheduling.k8s.io PodGroup (its condition), a tree of a CompositePodGroup
(CompositePodGroups listed and watched), then on a server of 1.35's gang API
the gang of a Workload's pod group (Workloads listed and watched), a pod
with a volume claim (PVC read, StorageClasses), a Queue (its status), a GPU share (its node's
share lock, the pod's annotation), a pod with a ResourceClaim (the claim read, its finalizer, its
allocation and reservation), a pod asking a DeviceClass's extended resource (its claim created,
and deleted when its first bind fails; its status), informers listing and watching."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from scheduler.cli.runtime import LeaseTiming
from tests.builders import rbac
from tests.builders import render as r
from tests.builders.claimcluster import claim_pod, gpu_claim
from tests.builders.claims import class_obj, island_devices, slice_obj
from tests.builders.scheduler import (
    create_pod,
    create_podgroup,
    gpu_node,
    node_of,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.shares import share_body, shared_gpu_node
from tests.builders.workloads import (
    child_podgroup,
    composite_podgroup,
    create_composite,
    create_upstream_podgroup,
    create_workload,
    create_workload_pod,
    member_pod,
    upstream_condition,
    upstream_podgroup,
    workload_135,
    workload_pod,
)

SA = "gputopo-scheduler"
SETUP = "test-setup"  # the bearer token of this test's own requests, left out of the derivation
GANG_LABEL = "scheduling.x-k8s.io/pod-group"
IMPLICIT_GPU = "deviceclass.resource.kubernetes.io/gpu.gputopo.io"  # KEP-5004: a claim made
FAST_LEASE = LeaseTiming(duration=2.0, renew_deadline=1.5, retry_period=0.1)


@pytest.fixture(scope="module")
def objects() -> tuple[r.Obj, ...]:
    return r.render().objects


@pytest.fixture
def setup_client(fake_api) -> Iterator[client.ApiClient]:
    with fake_api.api_client(token=SETUP) as api:
        yield api


def _create_workload(api: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    create_pod(core, pod_body("fits", gpus=2))
    create_pod(core, pod_body("too-big", gpus=16))
    create_podgroup(custom, podgroup("gang", 2))
    for name in ("gang-0", "gang-1"):
        create_pod(core, pod_body(name, gpus=4, labels={GANG_LABEL: "gang"}))
    create_upstream_podgroup(custom, upstream_podgroup("up", 2))
    for name in ("up-0", "up-1"):
        create_pod(core, member_pod(name, "up"))
    create_composite(custom, composite_podgroup("tree", 1))
    create_upstream_podgroup(custom, child_podgroup("leaf", 1, "tree"))
    create_pod(core, member_pod("leaf-0", "leaf"))
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    create_pod(core, pod_body("with-claim", gpus=1, volumes=[claim]))
    queue = {"metadata": {"name": "team"}, "spec": {"max": {"nvidia.com/gpu": 16}}}
    custom.create_cluster_custom_object("scheduling.gputopo.io", "v1alpha1", "queues", queue)
    create_pod(core, share_body("share", "10Gi"))
    create_pod(core, claim_pod("with-gpus", "gpus"))
    create_pod(core, pod_body("extended", resources={IMPLICIT_GPU: "1"}))


def _called(fake, verb: str, resource: str) -> bool:
    return any(
        c.verb == verb and c.rbac_resource == resource and c.user != SETUP
        for c in fake.authorization_checks
    )


def _wait_for_every_scenario(fake) -> None:
    wait_for(lambda: node_of(fake, "fits"), 30, "pod fits bound")
    wait_for(lambda: node_of(fake, "share"), 30, "the share bound under its node's lock")
    wait_for(lambda: node_of(fake, "with-gpus"), 30, "the pod with a claim bound")
    wait_for(lambda: node_of(fake, "extended"), 30, "the pod with a claim made for it bound")
    wait_for(lambda: _called(fake, "delete", "resourceclaims"), 30, "a made claim deleted")
    wait_for(lambda: node_of(fake, "gang-0") and node_of(fake, "gang-1"), 30, "the gang bound")
    wait_for(lambda: node_of(fake, "up-0") and node_of(fake, "up-1"), 30, "the upstream gang")
    wait_for(lambda: upstream_condition(fake, "up"), 30, "the upstream PodGroup's condition")
    wait_for(lambda: node_of(fake, "leaf-0"), 30, "the CompositePodGroup's tree")
    wait_for(lambda: scheduled_condition(fake, "too-big"), 30, "too-big: PodScheduled=False")
    wait_for(lambda: scheduled_condition(fake, "with-claim"), 30, "with-claim: PodScheduled")
    wait_for(lambda: _called(fake, "patch", "podgroups/status"), 30, "the PodGroup status")
    wait_for(lambda: _called(fake, "update", "leases"), 30, "a Lease renewal")
    wait_for(lambda: _called(fake, "patch", "queues/status"), 30, "the Queue status")


def _preempt(fake, api: client.ApiClient) -> None:
    """A higher-priority pod that fits nowhere evicts (DisruptionTarget + delete)."""
    core = client.CoreV1Api(api)
    client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": "high"}, "value": 9})
    create_pod(core, pod_body("urgent", gpus=8, priorityClassName="high"))
    wait_for(lambda: _called(fake, "delete", "pods"), 30, "a victim deleted")
    wait_for(lambda: _called(fake, "list", "poddisruptionbudgets"), 30, "budgets listed")


def _serve_1_35(fake) -> None:
    """From now on the server serves 1.35's gang API alone."""
    for plural in ("podgroups", "workloads", "compositepodgroups"):
        fake.registry.remove("scheduling.k8s.io", plural)
    fake.serve_workload_api(("v1alpha1",))


def _on_1_35(fake, api: client.ApiClient) -> None:
    """The scheduler, started again on the 1.35 server, watches v1alpha1 Workloads: a gang of a
    Workload's pod group binds."""
    create_workload(client.CustomObjectsApi(api), workload_135("w135", replica=2))
    for i in range(2):
        create_workload_pod(api, workload_pod(f"w135-{i}", "w135", "replica", gpus=0))
    wait_for(lambda: node_of(fake, "w135-0") and node_of(fake, "w135-1"), 30, "the 1.35 gang")


@pytest.mark.timeout(60)  # two scheduler runs, each waiting for its leader Lease
def test_scheduler_roles_grant_exactly_what_the_scheduler_calls(
    objects, fake_api, setup_client
) -> None:
    namespace = rbac.service_account_namespace(objects, SA)
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"), composite_gate=True)
    client.CoreV1Api(setup_client).create_namespace(
        {"metadata": {"name": namespace}}, _preload_content=False
    )
    gpu_node(fake_api, "gpu-a", gpus=8)
    gpu_node(fake_api, "gpu-b", gpus=8)
    shared_gpu_node(fake_api, client.CustomObjectsApi(setup_client), "gpu-s")
    fake_api.put_object("deviceclasses", class_obj())
    fake_api.put_object("resourceslices", slice_obj("gpu-a", island_devices()))
    fake_api.put_object("resourceclaims", gpu_claim("gpus", 1))
    # the first bind of "extended" fails at its status (the claim it made is deleted), the next
    # binds
    fake_api.fail_next(1, 500, path_regex=r"/pods/extended/status$", method="PATCH")
    with running(fake_api, lease=FAST_LEASE, leader_elect=True, leader_elect_namespace=namespace):
        _create_workload(setup_client)
        _wait_for_every_scenario(fake_api)
        _preempt(fake_api, setup_client)
    _serve_1_35(fake_api)
    with running(fake_api, lease=FAST_LEASE, leader_elect=True, leader_elect_namespace=namespace):
        _on_1_35(fake_api, setup_client)
    calls = [c for c in fake_api.authorization_checks if c.user != SETUP]
    used = rbac.used_permissions(calls, namespace)
    granted = rbac.effective_permissions(objects, SA, namespace)
    assert rbac.describe(granted) == rbac.describe(used)  # no more, no less
