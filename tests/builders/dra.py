"""Builders for DRA tests: claims as kube-scheduler leaves them, and their API objects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.dra import API_VERSION, DRIVER


def make_claim(name: str, requests: Sequence[str] = ("gpu",)) -> dict[str, Any]:
    """A claim asking one device of class gpu.gputopo.io per request name."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": r, "exactly": {"deviceClassName": DRIVER}} for r in requests]
            }
        },
    }


def allocation_status(
    node: str,
    devices: Sequence[tuple[str, str]],
    pods: Sequence[tuple[str, str]],
    *,
    driver: str = DRIVER,
    pool: str | None = None,
) -> dict[str, Any]:
    """The status kube-scheduler writes: `devices` are (request, device) in `node`'s pool,
    `pods` are (name, uid) in reservedFor."""
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": driver, "pool": pool or node, "device": d}
                        for r, d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in pods],
        }
    }


def claim_template(
    name: str,
    device_class: str,
    *selectors: str,
    count: int = 1,
    match_attribute: str | None = None,
    tolerate: str | None = None,
    capacity: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaimTemplate with one request `gpu` of `count` devices of `device_class`,
    filtered by CEL `selectors`; `match_attribute` constrains them to one value of it,
    `tolerate` a device taint key the request tolerates, `capacity` what it consumes of a
    shared device."""
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    if tolerate:
        exactly["tolerations"] = [{"key": tolerate, "operator": "Exists"}]
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if match_attribute:
        devices["constraints"] = [{"requests": ["gpu"], "matchAttribute": match_attribute}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": devices}},
    }


def with_claim_template(pod: dict[str, Any], template: str) -> dict[str, Any]:
    """The pod with one claim `gpu` made from `template`, used by its first container."""
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod
