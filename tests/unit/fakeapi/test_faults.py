"""Fault injection, the request log, direct object access, kubeconfig, discovery."""

from __future__ import annotations

import time

import pytest
from kubernetes import config
from kubernetes.client import (
    ApiClient,
    ApiException,
    Configuration,
    CoreV1Api,
    V1Node,
    V1ObjectMeta,
)
from urllib3.exceptions import MaxRetryError

from tests.builders.fakeapi import make_pod, status_body
from tests.fakeapi import FakeApiServer


def test_down_refuses_connections_and_up_serves_the_same_state_on_the_same_port(fake_api, core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    port = fake_api.port
    fake_api.down()
    with pytest.raises(MaxRetryError):
        core_v1.list_node()
    fake_api.up()
    assert fake_api.port == port
    assert [n.metadata.name for n in core_v1.list_node().items] == ["n1"]


def test_fail_next_answers_injected_errors_for_matching_paths_only(fake_api, core_v1):
    fake_api.fail_next(2, status=503, path_regex=r"/nodes")
    core_v1.list_namespace()
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core_v1.list_node()
        assert err.value.status == 503
        assert status_body(err.value)["reason"] == "ServiceUnavailable"
    assert core_v1.list_node().items == []


def test_fail_next_by_method(fake_api, core_v1):
    fake_api.fail_next(1, status=500, method="POST")
    with pytest.raises(ApiException) as err:
        core_v1.create_node({"metadata": {"name": "n1"}})
    assert err.value.status == 500
    assert core_v1.list_node().items == []
    assert core_v1.create_node({"metadata": {"name": "n1"}}).metadata.name == "n1"


def test_slow_delays_every_request(fake_api, core_v1):
    fake_api.slow(0.2)
    start = time.monotonic()
    core_v1.list_node()
    assert time.monotonic() - start >= 0.2
    fake_api.slow(0)


def test_request_log_records_method_path_query_body_and_content_type(fake_api, core_v1):
    fake_api.clear_requests()
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    core_v1.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    core_v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    post, patch, get = fake_api.requests
    assert (post.method, post.path, post.body["metadata"]["name"]) == (
        "POST",
        "/api/v1/namespaces/default/pods",
        "p1",
    )
    assert (patch.content_type, patch.body) == (
        "application/strategic-merge-patch+json",
        {"metadata": {"labels": {"a": "b"}}},
    )
    assert (get.path, get.query["fieldSelector"]) == ("/api/v1/pods", "spec.nodeName=n1")
    assert [r.method for r in fake_api.writes()] == ["POST", "PATCH"]


def test_direct_object_access_emits_watch_events_and_bypasses_rules(fake_api, core_v1):
    fake_api.put_object("nodes", {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    node = core_v1.read_node("n1")
    assert (node.spec, node.status.capacity) == (None, {"cpu": "4"})
    assert (
        fake_api.get_object("nodes", "n1")["metadata"]["resourceVersion"]
        == node.metadata.resource_version
    )
    assert fake_api.get_object("nodes", "ghost") is None
    assert fake_api.delete_object("nodes", "n1")
    assert core_v1.list_node().items == []


def test_kubeconfig_file_works_with_the_client_loader(fake_api, tmp_path):
    path = fake_api.write_kubeconfig(tmp_path / "kubeconfig")
    loaded = Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=loaded)  # type: ignore[no-untyped-call]
    with ApiClient(loaded) as api:
        names = [ns.metadata.name for ns in CoreV1Api(api).list_namespace().items if ns.metadata]
        assert names == [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
        ]


def test_discovery_documents(fake_api, kube_client):
    from kubernetes.client import ApisApi, VersionApi

    assert VersionApi(kube_client).get_code().git_version.startswith("v1.28")
    groups = {g.name for g in ApisApi(kube_client).get_api_versions().groups}
    assert {"topology.node.k8s.io", "scheduling.x-k8s.io", "coordination.k8s.io"} <= groups


def test_an_unstarted_server_can_be_filled_then_started():
    fake = FakeApiServer()
    fake.add_node("n1", capacity={"nvidia.com/gpu": "8"})
    with fake, ApiClient(fake.configuration()) as api:
        status = CoreV1Api(api).read_node("n1").status
        assert status is not None
        assert status.capacity == {"nvidia.com/gpu": "8"}


def test_request_log_keeps_only_the_most_recent_requests():
    with FakeApiServer(request_log_limit=2) as fake, ApiClient(fake.configuration()) as api:
        core = CoreV1Api(api)
        for name in ("a", "b", "c"):
            core.create_node(V1Node(metadata=V1ObjectMeta(name=name)))
        assert [r.body["metadata"]["name"] for r in fake.requests] == ["b", "c"]
    with FakeApiServer(request_log_limit=0) as quiet, ApiClient(quiet.configuration()) as api:
        CoreV1Api(api).list_node()
        assert quiet.requests == []
