"""Node JSON as the API server sends it, and pods already bound to a node, for the scheduler's
cache tests (`ClusterCache.upsert_node` / `upsert_pod` take these dicts)."""

from __future__ import annotations

from typing import Any

from tests.builders.pods import container, pod


def node_obj(
    name: str, gpus: int = 8, taints: list[dict[str, Any]] | None = None, **alloc: str
) -> dict[str, Any]:
    """A Node with 64 CPUs, 512Gi, 110 pods and `gpus` whole GPUs allocatable (plus `alloc`)."""
    allocatable = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        "nvidia.com/gpu": str(gpus),
        **alloc,
    }
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": allocatable},
    }


def bound_pod(
    name: str,
    node: str,
    gpus: int,
    scheduler: str = "default-scheduler",
    namespace: str = "default",
) -> dict[str, Any]:
    """A pod in `namespace` bound to `node`, holding `gpus` GPUs, with uid `uid-<name>`."""
    body = pod(
        name,
        namespace,
        containers=[container(limits={"nvidia.com/gpu": gpus})],
        nodeName=node,
        schedulerName=scheduler,
    )
    body["metadata"]["uid"] = f"uid-{name}"
    return body
