"""A pod's extended resources backed by DRA (`scheduler.claims.extended`, KEP-5004) as the
claim machinery reads them: the pod, read again with the resources out of its containers and
its claim in `spec.resourceClaims`.

- A bound pod whose `status.extendedResourceClaimStatus` names its claim: that claim, and the
  containers' resources its request mappings name. A waiting pod's is not read: a bind that
  failed after writing it deleted the claim, and the next bind makes another (as kube-scheduler
  does).
- A waiting pod of this scheduler that asks a resource a DeviceClass maps: the claim it needs,
  made in the book (`ClaimBook.make`) and created by its bind, and the pod read two ways (as
  kube-scheduler 1.37 decides it node by node): as it is, for the nodes whose allocatable
  offers the resource (a device plugin serves it there), and with the made claim in place of the
  resource (`dra_form`), for the others. The one returned, for the cache's entry, is the one the
  cache holds now, else the device plugin's where some node offers the resource; the cycle
  tries them in turn (`ClaimCharges.first_form`).
- A pod bound without a claim in its status (the device plugin's): no made claim is kept.
Called with `cache.lock` held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
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
            if book.has_made:
                book.unmake(made_key(info.namespace, info.name))
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
    if ask is None:
        if book.has_made:
            book.unmake(made_key(info.namespace, info.name))
        return info
    key = made_key(info.namespace, info.name)
    book.make(key, claim_body(obj, ask, key.name), ask, obj)
    pairs = [(m.container, m.resource) for m in ask.mappings]
    dra = _read(pod_with_claim(obj, key.name, pairs), cache)
    plugin = replace(info, dra_form=dra, plugin_form=None)
    dra.plugin_form = plugin
    held = cache.pods.get(info.key)
    if held is not None and (held.dra_form is not None or held.plugin_form is not None):
        return dra if held.plugin_form is not None else plugin
    return plugin if cache.offering_any(ask.resources) else dra


def _read(obj: dict[str, Any], cache: ClusterCache) -> PodInfo:
    return read_pod(obj, cache.scheduler_name, None, cache.requests)
