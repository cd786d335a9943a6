"""A pod's extended resources backed by DRA as the scheduler reads it (`with_extended_claim`):
a waiting pod with the claim it needs made in the book, a bound one with the claim its status
names, and one left as it is where a node offers the resource or no class maps it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.claims.model import ClaimKey
from scheduler.runtime.claims.book import CLASSES, ClaimBook
from scheduler.runtime.claims.extended import made_key, with_extended_claim
from scheduler.runtime.claims.podrefs import claim_refs
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.claims import class_obj

GPU = "nvidia.com/gpu"
SCHEDULER = "gputopo-scheduler"


def _book(mapped: bool = True) -> ClaimBook:
    book = ClaimBook()
    body = class_obj()
    if mapped:
        body["spec"]["extendedResourceName"] = GPU
    book.replace(CLASSES, [body])
    return book


def _node(name: str, gpus: int) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: str(gpus)}
    return {
        "metadata": {"name": name},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def _cache(*nodes: dict[str, Any]) -> ClusterCache:
    cache = ClusterCache(SCHEDULER)
    for node in nodes:
        cache.upsert_node(node)
    return cache


def _pod(node: str | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    asks = {"cpu": "1", GPU: "2"}
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [{"name": "main", "resources": {"requests": asks, "limits": asks}}],
    }
    if node is not None:
        spec["nodeName"] = node
    meta = {"name": "p", "namespace": "team", "uid": "u1"}
    return {"metadata": meta, "spec": spec, "status": status or {"phase": "Pending"}}


def _asks(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"]["containers"][0]["resources"]["requests"])


def test_a_waiting_pod_is_read_with_the_claim_made_for_it_and_without_the_resource():
    book, cache = _book(), _cache(_node("dra", 0))
    info = with_extended_claim(cache.read_pod(_pod()), book, cache)
    key = made_key("team", "p")
    assert claim_refs(info.obj).keys == (key,)
    assert _asks(info.obj) == {"cpu": "1"}
    assert info.request.gpus == 0
    made = book.made(key)
    assert made is not None
    assert made.pod is not info.obj  # the pod as the API has it, kept for a new reading
    assert _asks(made.pod) == {"cpu": "1", GPU: "2"}


def test_a_waiting_pod_asks_the_device_plugin_first_where_a_node_offers_the_resource():
    """Read both ways: as it is (the cache's entry) and with its made claim (`dra_form`)."""
    book, cache = _book(), _cache(_node("dra", 0), _node("plugin", 8))
    read = cache.read_pod(_pod())
    info = with_extended_claim(read, book, cache)
    assert info.obj is read.obj
    assert info.request.gpus == 2
    assert info.dra_form is not None
    assert claim_refs(info.dra_form.obj).keys == (made_key("team", "p"),)
    assert info.dra_form.plugin_form is info
    assert book.made(made_key("team", "p")) is not None
    cache.delete_node("plugin")  # no node offers it now
    fresh = with_extended_claim(read, book, cache)
    assert claim_refs(fresh.obj).keys == (made_key("team", "p"),)
    assert fresh.plugin_form is not None


def test_a_waiting_pod_keeps_the_form_the_cache_holds():
    """A status patch during a bind with its claim reads the pod again: the form assumed stays."""
    book, cache = _book(), _cache(_node("dra", 0), _node("plugin", 8))
    first = with_extended_claim(cache.read_pod(_pod()), book, cache)
    assert first.dra_form is not None
    cache.upsert_pod(first.dra_form.obj, first.dra_form)
    again = with_extended_claim(cache.read_pod(_pod()), book, cache)
    assert claim_refs(again.obj).keys == (made_key("team", "p"),)


def test_a_pod_bound_by_the_device_plugin_keeps_no_made_claim():
    book, cache = _book(), _cache(_node("dra", 0), _node("plugin", 8))
    with_extended_claim(cache.read_pod(_pod()), book, cache)
    assert book.made(made_key("team", "p")) is not None
    bound = with_extended_claim(cache.read_pod(_pod("plugin")), book, cache)
    assert bound.request.gpus == 2
    assert book.made(made_key("team", "p")) is None


def test_a_pod_no_class_maps_is_read_as_it_is():
    book, cache = _book(mapped=False), _cache(_node("dra", 0))
    read = cache.read_pod(_pod())
    assert with_extended_claim(read, book, cache) is read


@pytest.mark.parametrize("classes", [True, False], ids=["classes", "no-classes-listed-yet"])
def test_a_bound_pod_is_read_with_the_claim_its_status_names(classes: bool):
    book, cache = (_book() if classes else ClaimBook()), _cache(_node("dra", 0))
    named = {
        "resourceClaimName": "p-extended-resources-abc",
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-1"}
        ],
    }
    status = {"phase": "Running", "extendedResourceClaimStatus": named}
    info = with_extended_claim(cache.read_pod(_pod("dra", status)), book, cache)
    assert claim_refs(info.obj).keys == (ClaimKey("team", "p-extended-resources-abc"),)
    assert _asks(info.obj) == {"cpu": "1"}
    assert info.request.gpus == 0


def test_a_waiting_pod_whose_status_names_a_claim_gets_a_new_one():
    """A bind that failed after writing the status deleted the claim: the next makes another."""
    book, cache = _book(), _cache(_node("dra", 0))
    status = {
        "phase": "Pending",
        "extendedResourceClaimStatus": {"resourceClaimName": "gone", "requestMappings": []},
    }
    info = with_extended_claim(cache.read_pod(_pod(None, status)), book, cache)
    assert claim_refs(info.obj).keys == (made_key("team", "p"),)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.integers(0, 2))),
        max_size=12,
    )
)
def test_the_nodes_offering_a_resource_are_counted_as_nodes_come_change_and_go(steps):
    """`offering` after any nodes added, changed (GPUs 0-2) and deleted (None) holds the nodes
    whose allocatable has the resource now, and no resource no node offers."""
    cache = ClusterCache(SCHEDULER)
    for name, gpus in steps:
        if gpus is None:
            cache.delete_node(name)
        else:
            cache.upsert_node(_node(name, gpus))
    now = {n.name for n in cache.nodes.values() if n.allocatable.get(GPU, 0) > 0}
    assert cache.offering_any([GPU]) == now
    assert all(cache.offering.values())
