"""A pod's phase as the API server reports it, and which phases are final.

The agent's share usage, the device plugin's share target and the publisher's terminal-pod
filter all ask the same question of a pod object: has it finished (`Succeeded` or `Failed`)? A
pod whose status has no phase yet reads as `""`, which is not finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TERMINAL_PHASES", "finished", "pod_phase", "pod_phases"]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_phase(pod: Mapping[str, Any]) -> str:
    """`status.phase` of a pod object, `""` when it has none."""
    return str((pod.get("status") or {}).get("phase") or "")


def finished(pod: Mapping[str, Any]) -> bool:
    """Has the pod ended (its phase is `Succeeded` or `Failed`)?"""
    return pod_phase(pod) in TERMINAL_PHASES


def pod_phases(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> phase of each pod object."""
    return {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): pod_phase(p) for p in pods}
