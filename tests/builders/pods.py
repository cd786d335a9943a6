"""Small builders for pod JSON, as the API server sends it (scheduler-plugins' MakePod style)."""

from __future__ import annotations

import json
from typing import Any


def container(
    name: str = "main",
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(
    name: str = "p",
    namespace: str = "default",
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": containers or [container()], **spec},
    }
    if init:
        body["spec"]["initContainers"] = init
    return body


def share_pod(
    name: str = "s",
    namespace: str = "default",
    *,
    memory: str | None = None,
    compute: int | None = None,
    resource: str = "nvidia.com/gpu.shared",
    containers: tuple[str, ...] = ("main",),
    gpus: dict[str, str] | None = None,
    init: tuple[str, ...] = (),
    **spec: Any,
) -> dict[str, Any]:
    """A pod whose `containers` (and `init` containers) each ask one replica of `resource`,
    plus `memory` (`gputopo.io/gpu-memory`) and `compute` when given; `gpus`: its
    `gputopo.io/gpus` annotation (container -> GPU UUID), as the scheduler writes it."""
    limits: dict[str, Any] = {resource: 1}
    if memory is not None:
        limits["gputopo.io/gpu-memory"] = memory
    if compute is not None:
        limits["gputopo.io/gpu-compute"] = compute
    body = pod(
        name,
        namespace,
        containers=[container(c, limits=dict(limits)) for c in containers],
        init=[container(c, limits=dict(limits)) for c in init] or None,
        **spec,
    )
    if gpus is not None:
        body["metadata"]["annotations"] = {"gputopo.io/gpus": json.dumps(gpus)}
    return body
