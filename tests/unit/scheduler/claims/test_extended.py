"""Extended resources backed by DRA (KEP-5004): which names DeviceClasses map, and the claim's
requests and mappings, as kube-scheduler 1.37.2 makes them (`createRequestsAndMappings`)."""

from __future__ import annotations

from typing import Any

from scheduler.claims.extended import (
    CLAIM_ANNOTATION,
    POD_CLAIM_NAME,
    RequestMapping,
    claim_body,
    extended_ask,
    mapped_names,
    pod_with_claim,
)
from scheduler.claims.model import DeviceClass

GPU = "nvidia.com/gpu"
CLASSES = mapped_names([DeviceClass(name="gpu.gputopo.io", extended_resource_name=GPU)])


def _container(name: str, asks: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": dict(asks), "limits": dict(asks)}, **more}


def _pod(*containers: dict[str, Any], inits: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if inits:
        spec["initContainers"] = list(inits)
    return {"metadata": {"name": "p", "namespace": "team", "uid": "u1"}, "spec": spec}


def _counts(pod: dict[str, Any]) -> dict[str, int]:
    ask = extended_ask(pod, CLASSES)
    assert ask is not None
    return {str(r["name"]): int(r["exactly"]["count"]) for r in ask.requests}


def test_a_class_maps_its_extended_resource_name_and_its_implicit_one():
    assert set(CLASSES) == {GPU, "deviceclass.resource.kubernetes.io/gpu.gputopo.io"}


def test_where_two_classes_map_one_name_the_newer_wins_then_the_lower_name():
    old = DeviceClass(name="a-old", extended_resource_name=GPU, created="2026-01-01T00:00:00Z")
    new = DeviceClass(name="z-new", extended_resource_name=GPU, created="2026-06-01T00:00:00Z")
    assert mapped_names([new, old])[GPU].name == "z-new"
    assert mapped_names([old, new])[GPU].name == "z-new"
    twin = DeviceClass(name="b-twin", extended_resource_name=GPU, created=new.created)
    assert mapped_names([new, twin])[GPU].name == "b-twin"


def test_each_container_asks_its_own_request_named_by_its_index_and_the_sorted_resource():
    pod = _pod(_container("a", {"cpu": "1", GPU: "2"}), _container("b", {GPU: "1"}))
    ask = extended_ask(pod, CLASSES)
    assert ask is not None
    # "cpu" sorts before "nvidia.com/gpu": the GPU is container 0's request 1
    assert _counts(pod) == {"container-0-request-1": 2, "container-1-request-0": 1}
    assert ask.requests[0]["exactly"]["deviceClassName"] == "gpu.gputopo.io"
    assert ask.mappings == (
        RequestMapping(container="a", resource=GPU, request="container-0-request-1"),
        RequestMapping(container="b", resource=GPU, request="container-1-request-0"),
    )
    assert ask.resources == {GPU}


def test_an_init_container_uses_the_later_containers_requests_first():
    pod = _pod(_container("main", {GPU: "1"}), inits=(_container("init", {GPU: "2"}),))
    ask = extended_ask(pod, CLASSES)
    assert ask is not None
    assert _counts(pod) == {"container-0-request-0": 1, "container-1-request-0": 1}
    assert [m.request for m in ask.mappings if m.container == "init"] == [
        "container-1-request-0",
        "container-0-request-0",
    ]


def test_init_containers_share_the_largest_of_their_requests():
    inits = (_container("i1", {GPU: "1"}), _container("i2", {GPU: "3"}))
    ask = extended_ask(_pod(_container("main", {"cpu": "1"}), inits=inits), CLASSES)
    assert ask is not None
    assert [(r["name"], r["exactly"]["count"]) for r in ask.requests] == [
        ("container-1-request-0", 3)
    ]
    assert {m.container: m.request for m in ask.mappings} == {
        "i1": "container-1-request-0",
        "i2": "container-1-request-0",
    }


def test_a_sidecar_is_long_lived_and_its_request_is_its_own():
    sidecar = _container("side", {GPU: "1"}, restartPolicy="Always")
    pod = _pod(_container("main", {GPU: "1"}), inits=(sidecar,))
    assert _counts(pod) == {"container-0-request-0": 1, "container-1-request-0": 1}


def test_a_pod_asking_no_mapped_resource_asks_nothing():
    assert (
        extended_ask(_pod(_container("main", {"cpu": "1", "example.com/x": "1"})), CLASSES) is None
    )
    assert extended_ask(_pod(_container("main", {GPU: "0"})), CLASSES) is None


def test_the_claim_is_owned_by_the_pod_and_the_pod_reads_it_instead_of_the_resource():
    pod = _pod(_container("main", {"cpu": "1", GPU: "2"}))
    ask = extended_ask(pod, CLASSES)
    assert ask is not None
    body = claim_body(pod, ask)
    meta = body["metadata"]
    assert meta["generateName"] == "p-extended-resources-"
    assert "name" not in meta
    assert meta["annotations"] == {CLAIM_ANNOTATION: "true"}
    assert (
        meta["ownerReferences"][0] | {"uid": "u1", "controller": True} == meta["ownerReferences"][0]
    )
    assert body["spec"]["devices"]["requests"] == list(ask.requests)
    read = pod_with_claim(pod, "p-extended-resources-x", [("main", GPU)])
    resources = read["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    assert read["spec"]["resourceClaims"] == [
        {"name": POD_CLAIM_NAME, "resourceClaimName": "p-extended-resources-x"}
    ]
    assert pod["spec"]["containers"][0]["resources"]["requests"][GPU] == "2"  # not changed
