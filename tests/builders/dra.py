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
