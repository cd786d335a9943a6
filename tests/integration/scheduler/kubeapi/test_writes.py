"""`KubeClient`'s per-pod writes (binding, Events, `PodScheduled=False`) over the client's pool.

They skip the client's request building; what the API server receives, how its answers map to
errors, and how little Python work one write takes are pinned here, against the fake API server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from scheduler.errors import ApiError, ConflictError, NotFoundError
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.pooled_writes import read_answer
from tests.builders.scheduler import create_pod, gpu_node, pod_body, running, wait_for

BIND_CALL_BUDGET = 150  # Python function calls; through the client's models a bind took 411


@pytest.fixture
def kube(fake_api) -> Iterator[KubeClient]:
    client = KubeClient(fake_api.api_client(), "gputopo-scheduler", "writer-test", timeout=5.0)
    yield client
    client.close()


def _pending(fake_api, name: str) -> dict[str, Any]:
    fake_api.add_node("n1", capacity={"cpu": "8", "memory": "8Gi", "pods": "110"})
    return fake_api.put_object("pods", pod_body(name))


def _python_calls(action: Callable[[], None]) -> int:
    """Python function calls `action` makes in this thread."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def test_a_bind_binds_and_a_second_one_conflicts(fake_api, kube) -> None:
    pod = _pending(fake_api, "p")
    kube.bind("default", "p", pod["metadata"]["uid"], "n1")
    assert fake_api.get_object("pods", "p", "default")["spec"]["nodeName"] == "n1"
    [request] = fake_api.requests_matching("POST", r"/pods/p/binding$")
    assert request.body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert request.content_type == "application/json"
    with pytest.raises(ConflictError, match=r"bind pod default/p to n1: HTTP 409"):
        kube.bind("default", "p", pod["metadata"]["uid"], "n1")


def test_a_bind_takes_few_python_calls(fake_api, kube) -> None:
    pod = _pending(fake_api, "warm")
    kube.bind("default", "warm", pod["metadata"]["uid"], "n1")  # the connection is open now
    pod = fake_api.put_object("pods", pod_body("p"))
    calls = _python_calls(lambda: kube.bind("default", "p", pod["metadata"]["uid"], "n1"))
    assert fake_api.get_object("pods", "p", "default")["spec"]["nodeName"] == "n1"
    assert calls <= BIND_CALL_BUDGET, f"a bind made {calls} Python calls"


def test_the_status_message_of_an_error_answer_names_the_write(fake_api, kube) -> None:
    _pending(fake_api, "p")
    fake_api.fail_next(1, status=500, path_regex="/binding", message="etcd is sad")
    with pytest.raises(ApiError, match=r"bind pod default/p to n1: HTTP 500: etcd is sad") as info:
        kube.bind("default", "p", "", "n1")
    assert info.value.status == 500
    with pytest.raises(NotFoundError, match=r"HTTP 404"):
        kube.bind("default", "missing", "", "n1")


def test_a_server_that_is_gone_is_status_0_and_its_return_is_used(fake_api, kube) -> None:
    _pending(fake_api, "p")
    fake_api.put_object("pods", pod_body("q"))
    kube.set_pod_scheduled_false("default", "p", "Unschedulable", "warm the pool")
    fake_api.down()  # cuts the pooled connection too
    try:
        with pytest.raises(ApiError) as info:
            kube.bind("default", "p", "", "n1")
        assert info.value.status == 0
    finally:
        fake_api.up()
    kube.bind("default", "q", "", "n1")
    assert fake_api.get_object("pods", "q", "default")["spec"]["nodeName"] == "n1"


def test_event_and_condition_arrive_as_the_api_expects(fake_api, kube) -> None:
    pod = _pending(fake_api, "p")
    kube.create_event(pod, "Pod", "Warning", "FailedScheduling", "0/1 nodes are available")
    kube.set_pod_scheduled_false("default", "p", "Unschedulable", "0/1 nodes are available")
    [event] = fake_api.list_objects("events", "default")
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert (event["reason"], event["type"]) == ("FailedScheduling", "Warning")
    [patch] = fake_api.requests_matching("PATCH", r"/pods/p/status$")
    assert patch.content_type == "application/strategic-merge-patch+json"
    stored = fake_api.get_object("pods", "p", "default")
    [condition] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")


def _recv(*chunks: bytes) -> Callable[[int], bytes]:
    """`recv` of a socket that delivers `chunks`, then end of stream."""
    parts = list(chunks)
    return lambda size: parts.pop(0) if parts else b""


def test_answers_are_read_by_length_by_chunks_and_to_the_end() -> None:
    by_length = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    answer, keep = read_answer(_recv(by_length[:9], by_length[9:]), "POST")
    assert (answer.status, answer.reason, answer.body, keep) == (201, "Created", b"{}", True)
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n4;x=y\r\n":1}\r\n'
    chunked += b"0\r\nTrailer: t\r\n\r\n"
    answer, keep = read_answer(_recv(chunked), "PATCH")
    assert (answer.body, keep) == (b'{"a":1}', True)
    closing = b'HTTP/1.0 409 Conflict\r\nX: y\r\n\r\n{"message":'
    answer, keep = read_answer(_recv(closing, b'"taken"}'), "POST")
    assert (answer.status, answer.body, keep) == (409, b'{"message":"taken"}', False)
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    answer, keep = read_answer(_recv(interim), "POST")
    assert (answer.status, answer.body, keep) == (204, b"", False)


def test_an_answer_cut_short_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="closed before the answer was complete"):
        read_answer(_recv(b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\n{}"), "POST")


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 201 Created\r\nContent-Length: two\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["length", "chunk-size", "status"],
)
def test_a_malformed_answer_is_a_protocol_error(answer: bytes) -> None:
    """A transport error (`api_call` maps it to status 0), never a `ValueError` that escapes."""
    with pytest.raises(ProtocolError, match="malformed HTTP answer"):
        read_answer(_recv(answer), "POST")


def test_bytes_after_the_answer_stop_the_connection_being_reused() -> None:
    """They would be read as the next request's answer."""
    answer_bytes = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    answer, keep = read_answer(_recv(answer_bytes + answer_bytes), "POST")
    assert (answer.status, answer.body, keep) == (201, b"{}", False)
    answer, keep = read_answer(_recv(answer_bytes + b"garbage\r\n\r\n"), "POST")
    assert (answer.status, answer.body, keep) == (201, b"{}", False)


def _failed_scheduling(fake_api) -> list[dict[str, Any]]:
    return [
        e for e in fake_api.list_objects("events", "default") if e["reason"] == "FailedScheduling"
    ]


def test_a_condition_the_pod_already_shows_is_not_written_again(fake_api, core_v1) -> None:
    gpu_node(fake_api, "n1", gpus=8)
    create_pod(core_v1, pod_body("big", gpus=16))
    with running(fake_api):
        wait_for(lambda: fake_api.requests_matching("PATCH", r"/pods/big/status$"), 10, "patch")
        wait_for(lambda: _failed_scheduling(fake_api), 10, "the first FailedScheduling event")
    fake_api.clear_requests()
    with running(fake_api):  # a new run: its reporter remembers nothing
        wait_for(lambda: len(_failed_scheduling(fake_api)) >= 2, 10, "a second event")
        runtime_patches = fake_api.requests_matching("PATCH", r"/pods/big/status$")
    assert runtime_patches == []
