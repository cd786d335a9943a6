"""Small builders for pod JSON, as the API server sends it (scheduler-plugins' MakePod style)."""

from __future__ import annotations

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
