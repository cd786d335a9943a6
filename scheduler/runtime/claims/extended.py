"""A pod's extended resources backed by DRA (`scheduler.claims.extended`, KEP-5004) as the
claim machinery reads them: the pod, read again with the resources out of its containers and
its claim in `spec.resourceClaims`.

- A bound pod whose `status.extendedResourceClaimStatus` names its claim: that claim, and the
  containers' resources its request mappings name. A waiting pod's is not read: a bind that
  failed after writing it deleted the claim, and the next bind makes another (as kube-scheduler
  does).
- A waiting pod of this scheduler that asks a resource a DeviceClass maps, while no node's
  allocatable offers it: the claim it needs, made in the book (`ClaimBook.make`) and created by
  its bind. Where some node offers the resource (a device plugin serves it) the pod is left as
  it is and placed on the device plugin's nodes: kube-scheduler decides it node by node, using
  either; this scheduler does not mix the two for one resource (README, DRA).
Called with `cache.lock` held.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.claims.extended import claim_body, extended_ask, pod_with_claim
from scheduler.claims.model import ClaimKey
from scheduler.runtime.claims.book import ClaimBook, made_key
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import PodInfo, read_pod

__all__ = ["made_key", "with_extended_claim"]

Obj = Mapping[str, Any]


def with_extended_claim(info: PodInfo, book: ClaimBook, cache: ClusterCache) -> PodInfo:
    """`info` read again with its extended-resource claim, or `info` when it has none."""
    if info.terminal:
        return info
    obj = info.obj
    if info.node is not None:  # read with its claim whatever the classes (listed or not yet)
        named = (obj.get("status") or {}).get("extendedResourceClaimStatus") or {}
        if not named.get("resourceClaimName"):
            return info
        claim = ClaimKey(info.namespace, str(named["resourceClaimName"]))
        book.created(made_key(info.namespace, info.name), claim)
        pairs = [
            (str(m.get("containerName") or ""), str(m.get("resourceName") or ""))
            for m in named.get("requestMappings") or ()
            if isinstance(m, Mapping)
        ]
        return _read(pod_with_claim(obj, claim.name, pairs), cache)
    if not info.ours or not book.extended:
        return info
    ask = extended_ask(obj, book.extended)
    if ask is None or any(cache.offered[name] for name in ask.resources):
        if book.has_made:
            book.unmake(made_key(info.namespace, info.name))
        return info
    key = made_key(info.namespace, info.name)
    book.make(key, claim_body(obj, ask, key.name), ask, obj)
    pairs = [(m.container, m.resource) for m in ask.mappings]
    return _read(pod_with_claim(obj, key.name, pairs), cache)


def _read(obj: dict[str, Any], cache: ClusterCache) -> PodInfo:
    return read_pod(obj, cache.scheduler_name, None, cache.requests)
