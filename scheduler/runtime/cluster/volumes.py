"""A pod's persistent volume claims, checked before it is placed (API reads, so outside the lock).

The claims are read on every check; the storage classes' binding modes are cached for `ttl`
seconds (they rarely change). What is wrong is `podspec.volume_problem`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE
from scheduler.errors import ApiError
from scheduler.kubeapi.client import KubeClient
from scheduler.runtime.cluster.podspec import claim_names, volume_problem

__all__ = ["VolumeCheck"]


class VolumeCheck:
    """`problem(pod)`: (category, message) when the pod's volumes keep it from being placed."""

    def __init__(self, kube: KubeClient, clock: Callable[[], float], ttl: float) -> None:
        self._kube, self._clock, self._ttl = kube, clock, ttl
        self._modes: tuple[float, dict[str, str]] | None = None  # read at, class -> mode

    def problem(self, obj: Mapping[str, Any]) -> tuple[str, str] | None:
        """None when the pod has no claims or they are fine; else category `volumes` (or
        `unsupported`) and the message the pod shows."""
        names = claim_names(obj)
        if not names:
            return None
        ns = str((obj.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE)
        try:
            claims = {name: self._kube.get_pvc(ns, name) for name in names}
        except ApiError as exc:
            return "volumes", f"cannot read the pod's volume claims: {exc}"
        if self._modes is None or self._clock() - self._modes[0] > self._ttl:
            self._modes = (self._clock(), self._kube.storage_class_modes())
        problem = volume_problem(obj, claims, self._modes[1])
        if problem is None:
            return None
        return ("unsupported" if problem.startswith("unsupported") else "volumes"), problem
