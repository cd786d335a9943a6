"""Queues (DESIGN §10) in the fake API server: bodies, create/patch through the real client, and
what the scheduler wrote back."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.fakeapi import FakeApiServer

GROUP, VERSION, PLURAL = "scheduling.gputopo.io", "v1alpha1", "queues"
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "gputopo.io/queue"


def queue_body(
    name: str, *, gpu_min: int | None = None, gpu_max: int | None = None, **spec: Any
) -> dict[str, Any]:
    body_spec = dict(spec)
    if gpu_min is not None:
        body_spec["min"] = {GPU: gpu_min}
    if gpu_max is not None:
        body_spec["max"] = {GPU: gpu_max}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": body_spec,
    }


def create_queue(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)


def patch_queue(custom: client.CustomObjectsApi, name: str, spec: dict[str, Any]) -> None:
    custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": spec})


def queue_status(fake: FakeApiServer, name: str) -> dict[str, Any]:
    obj = fake.get_object(PLURAL, name) or {}
    return dict(obj.get("status") or {})


def condition(fake: FakeApiServer, name: str, kind: str) -> dict[str, Any] | None:
    for cond in queue_status(fake, name).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def create_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}}, _preload_content=False)


def bind_order(fake: FakeApiServer) -> list[str]:
    """`namespace/name` of every pod bound, in the order the binds arrived."""
    out = []
    for request in fake.requests_matching("POST", r"/pods/[^/]+/binding$"):
        parts = request.path.split("/")
        out.append(f"{parts[parts.index('namespaces') + 1]}/{parts[parts.index('pods') + 1]}")
    return out
