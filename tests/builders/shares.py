"""GPU shares in scheduler integration tests (DESIGN §12): a node whose GPUs are shared (its Node
and the NRT the agent publishes), share pod bodies, and a stand-in for the agent's half of the
share lock (issue 26): once a lock's pod is bound, it patches `gputopo.io/allocated` and
releases the lock, as the agent does after the pod's last share container's Allocate."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client

from agent.shares import ALLOCATED_ANNOTATION, GPUS_ANNOTATION, LOCK_POD_ANNOTATION
from tests.builders.nrt import make_shared_nrt
from tests.builders.scheduler import NAME, gpu_node
from tests.builders.topology import dgx_h100
from tests.fakeapi import FakeApiServer

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
SHARED = "nvidia.com/gpu.shared"


def shared_gpu_node(
    fake: FakeApiServer,
    custom: client.CustomObjectsApi,
    name: str,
    *,
    shared: tuple[int, ...] = (0, 1),
    slots: int = 4,
) -> None:
    """An 8-GPU node whose GPUs `shared` are split into `slots` replicas of
    `nvidia.com/gpu.shared` (the rest whole GPUs), with the NRT that says so."""
    whole = 8 - len(shared)
    gpu_node(fake, name, gpus=whole, extra={SHARED: str(len(shared) * slots)})
    body = make_shared_nrt(name, dgx_h100(), shared=shared, slots=slots)
    custom.create_cluster_custom_object(*NRT, body, _preload_content=False)


def share_body(
    name: str,
    memory: str | None = None,
    *,
    compute: int | None = None,
    scheduler: str = NAME,
    node: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod with one container asking one replica of `nvidia.com/gpu.shared` and `memory`."""
    limits: dict[str, Any] = {SHARED: "1"}
    if memory is not None:
        limits["gputopo.io/gpu-memory"] = memory
    if compute is not None:
        limits["gputopo.io/gpu-compute"] = str(compute)
    container = {"name": "main", "image": "busybox:1.36", "resources": {"limits": limits}}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if node is not None:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "default", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def gpus_annotation(fake: FakeApiServer, name: str) -> dict[str, str] | None:
    pod = fake.get_object("pods", name, "default") or {}
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPUS_ANNOTATION)
    return None if text is None else dict(json.loads(text))


def _release_allocated(fake: FakeApiServer, namespace: str) -> None:
    for lease in fake.list_objects("leases", namespace):
        spec = lease.get("spec") or {}
        pod_key = ((lease["metadata"].get("annotations")) or {}).get(LOCK_POD_ANNOTATION)
        if not spec.get("holderIdentity") or not pod_key:
            continue
        pod_ns, pod_name = pod_key.split("/", 1)
        pod = fake.get_object("pods", pod_name, pod_ns)
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            continue
        annotations = dict(pod["metadata"].get("annotations") or {})
        annotations[ALLOCATED_ANNOTATION] = json.dumps({"main": ["replica-0"]})
        pod["metadata"]["annotations"] = annotations
        fake.put_object("pods", pod)
        released = dict(lease)
        released["spec"] = {k: v for k, v in spec.items() if k != "holderIdentity"}
        released["metadata"] = dict(lease["metadata"], annotations={})
        fake.put_object("leases", released)


@contextmanager
def agent_releasing_locks(fake: FakeApiServer, namespace: str = "default") -> Iterator[None]:
    """While open, every share lock whose pod is bound is released (after the pod's
    `gputopo.io/allocated` is written), as the agent does after Allocate."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.02):
            _release_allocated(fake, namespace)

    thread = threading.Thread(target=loop, name="agent-stand-in", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
