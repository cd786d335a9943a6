"""A scheduler `Runtime` against the fake API server, and builders for what tests create."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client

from scheduler.cli.runtime import LeaseTiming, Runtime
from scheduler.cli.settings import RunSettings
from scheduler.config import load_config
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.leader import micro_time
from scheduler.runtime.loop import LoopSettings
from scheduler.runtime.pending import SchedulingQueue
from tests.builders.wait import wait_for
from tests.fakeapi import FakeApiServer

NAME = "gputopo-scheduler"
GPU = "nvidia.com/gpu"


def settings(**overrides: Any) -> RunSettings:
    values: dict[str, Any] = {
        "kubeconfig": None,
        "config": load_config(None),
        "scheduler_name": NAME,
        "leader_elect": False,
        "leader_elect_namespace": "default",
        "metrics_address": "127.0.0.1:0",
        "log_format": "text",
    }
    values.update(overrides)
    return RunSettings(**values)


@contextmanager
def running(
    fake: FakeApiServer,
    *,
    lease: LeaseTiming | None = None,
    bind_workers: int = LoopSettings().bind_workers,
    unschedulable_flush: float = 5.0,
    **overrides: Any,
) -> Iterator[Runtime]:
    """A started scheduler whose cache has synced; stopped on exit. Binds run on `bind_workers`
    threads, so with more than one they reach the API server in no set order; a test reading the
    order of decisions from the order of binds asks for one. Unschedulable pods are all tried
    again every `unschedulable_flush` seconds (production: 60); a test that a change retries
    them at once sets it longer than it waits."""
    kube = KubeClient(fake.api_client(), NAME, f"test-{uuid.uuid4().hex[:6]}")
    runtime = Runtime(
        settings(**overrides),
        kube,
        lease=lease,
        loop=LoopSettings(idle_wait=0.05, bind_workers=bind_workers, binding_poll=0.05),
        queue=SchedulingQueue(
            time.monotonic,
            initial_backoff=0.05,
            max_backoff=0.2,
            unschedulable_flush=unschedulable_flush,
        ),
        watch_timeout=30,
    )
    runtime.start()
    try:
        wait_for(runtime.ready, 5, "scheduler cache sync")
        yield runtime
    finally:
        runtime.stop()
        kube.close()


def hold_lease(fake: FakeApiServer, holder: str, duration_s: int = 3600) -> None:
    """The scheduler's Lease, renewed now by `holder` (another replica; "" for none): a replica
    started with `leader_elect=True` stays standby until it expires or is let go."""
    fake.put_object(
        "leases",
        {
            "metadata": {"name": NAME, "namespace": "default"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration_s,
                "renewTime": micro_time(time.time()),
            },
        },
    )


def gpu_node(
    fake: FakeApiServer,
    name: str,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus), **(extra or {})}
    fake.add_node(name, capacity=capacity, labels=labels)


def pod_body(
    name: str,
    *,
    gpus: int = 0,
    namespace: str = "default",
    scheduler: str = NAME,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    resources: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    limits = dict(resources or {})
    if gpus:
        limits[GPU] = str(gpus)
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if limits:
        container["resources"] = {"limits": limits, "requests": dict(limits)}
    body_spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container], **spec}
    if node:
        body_spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": body_spec,
    }


def create_pod(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    core.create_namespaced_pod(body["metadata"]["namespace"], body, _preload_content=False)


def node_of(fake: FakeApiServer, name: str, namespace: str = "default") -> str | None:
    pod = fake.get_object("pods", name, namespace)
    return None if pod is None else (pod.get("spec") or {}).get("nodeName")


def bound_pods(fake: FakeApiServer, namespace: str = "default") -> dict[str, str]:
    """Pod name -> node for every bound pod in `namespace`."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in fake.list_objects("pods", namespace)
        if (p.get("spec") or {}).get("nodeName")
    }


def events_for(fake: FakeApiServer, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        e
        for e in fake.list_objects("events", namespace)
        if (e.get("involvedObject") or {}).get("name") == name
    ]


def evicted_pods(fake: FakeApiServer) -> set[str]:
    """Pods the scheduler deleted as victims (a DELETE with a uid precondition)."""
    return {
        r.path.rsplit("/", 1)[1]
        for r in fake.requests_matching("DELETE", r"/pods/[^/]+$")
        if "preconditions" in (r.body or {})
    }


def scheduled_condition(
    fake: FakeApiServer, name: str, namespace: str = "default"
) -> dict[str, Any] | None:
    pod = fake.get_object("pods", name, namespace) or {}
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return None


def podgroup(
    name: str, min_member: int, namespace: str = "default", **extra: Any
) -> dict[str, Any]:
    annotations = extra.pop("annotations", {})
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"minMember": min_member, **extra},
    }


def create_podgroup(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io",
        "v1alpha1",
        body["metadata"]["namespace"],
        "podgroups",
        body,
        _preload_content=False,
    )


def create_gang(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    name: str,
    members: int,
    *,
    gpus: int,
    namespace: str,
    group_labels: dict[str, str] | None = None,
) -> None:
    """A PodGroup `name` of `members` pods `name-0`... asking `gpus` GPUs each."""
    group = podgroup(name, members, namespace=namespace)
    group["metadata"]["labels"] = dict(group_labels or {})
    create_podgroup(custom, group)
    for i in range(members):
        labels = {"scheduling.x-k8s.io/pod-group": name}
        create_pod(core, pod_body(f"{name}-{i}", gpus=gpus, namespace=namespace, labels=labels))


def delete_pod(core: client.CoreV1Api, name: str, namespace: str = "default") -> None:
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)


def set_pod_phase(
    core: client.CoreV1Api,
    name: str,
    phase: str,
    namespace: str = "default",
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
) -> None:
    """What a kubelet writes through `pods/status`: the phase (and conditions, a reason)."""
    status: dict[str, Any] = {"phase": phase}
    if conditions:
        status["conditions"] = conditions
    if reason:
        status["reason"] = reason
    core.patch_namespaced_pod_status(name, namespace, {"status": status}, _preload_content=False)


def delete_node(core: client.CoreV1Api, name: str) -> None:
    core.delete_node(name, _preload_content=False)


def podgroup_status(fake: FakeApiServer, name: str, namespace: str = "default") -> dict[str, Any]:
    return dict((fake.get_object("podgroups", name, namespace) or {}).get("status") or {})


def group_condition(
    fake: FakeApiServer, name: str, kind: str, namespace: str = "default"
) -> dict[str, Any] | None:
    """The PodGroup's status condition of type `kind`, or None."""
    for condition in podgroup_status(fake, name, namespace).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None
