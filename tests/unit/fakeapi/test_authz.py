"""The authorization attributes the fake derives per request, as kube-apiserver's resolver does."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.builders.fakeapi import make_nrt, make_pod
from tests.fakeapi import authz
from tests.fakeapi.authz import Attributes


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes/n1", {}, Attributes("get", "", "nodes", name="n1")),
        ("GET", "/api/v1/pods", {}, Attributes("list", "", "pods")),
        ("GET", "/api/v1/pods", {"watch": "true"}, Attributes("watch", "", "pods")),
        ("GET", "/api/v1/watch/pods", {}, Attributes("watch", "", "pods")),
        (
            "GET",
            "/api/v1/nodes",
            {"fieldSelector": "metadata.name=n1"},
            Attributes("list", "", "nodes", name="n1"),
        ),
        (
            "GET",
            "/api/v1/nodes",
            {"fieldSelector": "metadata.name!=n1"},
            Attributes("list", "", "nodes"),
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/binding",
            {},
            Attributes("create", "", "pods", "binding", "ns", "p"),
        ),
        (
            "PATCH",
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/g/status",
            {},
            Attributes("patch", "scheduling.x-k8s.io", "podgroups", "status", "ns", "g"),
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            {},
            Attributes("update", "coordination.k8s.io", "leases", "", "ns", "l"),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods",
            {},
            Attributes("deletecollection", "", "pods", namespace="ns"),
        ),
        ("GET", "/api/v1/namespaces/ns", {}, Attributes("get", "", "namespaces", "", "ns", "ns")),
        (
            "PUT",
            "/api/v1/namespaces/ns/finalize",
            {},
            Attributes("update", "", "namespaces", "finalize", "ns", "ns"),
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            {},
            Attributes("create", "", "pods", "eviction", "ns", "p"),
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p/status",
            {},
            Attributes("patch", "", "pods", "status", "ns", "p"),
        ),
        (
            "GET",
            "/apis/policy/v1/poddisruptionbudgets",
            {"watch": "true"},
            Attributes("watch", "policy", "poddisruptionbudgets"),
        ),
        (
            "GET",
            "/apis/policy/v1/namespaces/ns/poddisruptionbudgets",
            {},
            Attributes("list", "policy", "poddisruptionbudgets", namespace="ns"),
        ),
        ("GET", "/api/v1", {}, None),
        ("GET", "/apis/topology.node.k8s.io/v1alpha2", {}, None),
        ("GET", "/version", {}, None),
    ],
)
def test_request_attributes_follow_the_api_server(method, path, query, expected) -> None:
    assert authz.resolve(method, path, query) == expected


def test_rbac_resource_joins_the_subresource() -> None:
    assert Attributes("patch", "", "pods", "status").rbac_resource == "pods/status"
    assert Attributes("get", "", "pods").rbac_resource == "pods"


def test_apply_that_creates_is_checked_as_create_too(fake_api, custom_objects) -> None:
    nrt = make_nrt("n1")
    args = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "n1", nrt)
    kw = {"field_manager": "t", "_content_type": "application/apply-patch+yaml"}
    custom_objects.patch_cluster_custom_object(*args, _preload_content=False, **kw)
    custom_objects.patch_cluster_custom_object(*args, _preload_content=False, **kw)
    verbs = [
        c.verb for c in fake_api.authorization_checks if c.resource == "noderesourcetopologies"
    ]
    assert verbs == ["patch", "create", "patch"]


def test_checks_are_recorded_for_answered_and_failed_requests(fake_api, core_v1) -> None:
    core_v1.create_namespaced_pod("default", make_pod("p"), _preload_content=False)
    fake_api.fail_next(1, status=500, path_regex="/pods/p$")
    with pytest.raises(Exception, match="500"):
        core_v1.read_namespaced_pod("p", "default", _preload_content=False)
    assert [(c.verb, c.namespace, c.name) for c in fake_api.authorization_checks] == [
        ("create", "default", ""),
        ("get", "default", "p"),
    ]
    fake_api.clear_requests()
    assert fake_api.authorization_checks == []


def test_the_bearer_token_tells_clients_apart(fake_api) -> None:
    with fake_api.api_client(token="system:serviceaccount:ns:sa") as api:
        client.CoreV1Api(api).list_node(_preload_content=False)
    with fake_api.api_client() as api:
        client.CoreV1Api(api).list_node(_preload_content=False)
    assert [c.user for c in fake_api.authorization_checks] == ["system:serviceaccount:ns:sa", ""]


def test_preemption_requests_are_checked_as_rbac_sees_them(fake_api, core_v1) -> None:
    core_v1.create_namespaced_pod("default", make_pod("p"))
    policy = client.PolicyV1Api(core_v1.api_client)
    fake_api.clear_requests()
    policy.list_pod_disruption_budget_for_all_namespaces()
    core_v1.patch_namespaced_pod_status("p", "default", {"status": {"nominatedNodeName": "n1"}})
    body = {"metadata": {"name": "p", "namespace": "default"}}
    core_v1.create_namespaced_pod_eviction("p", "default", body)
    assert [(c.verb, c.group, c.rbac_resource) for c in fake_api.authorization_checks] == [
        ("list", "policy", "poddisruptionbudgets"),
        ("patch", "", "pods/status"),
        ("create", "", "pods/eviction"),
    ]
