"""Connecting to the API: credentials from a kubeconfig file, Status messages, reads of absent
objects."""

from __future__ import annotations

import http.client
import socket

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection

from agent.errors import ConfigError
from agent.kube.connect import (
    load_api_client,
    load_configuration,
    read_or_none,
    status_message,
    transport_reason,
)

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.10:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
"""


def _answer(status: int, reason: str, body: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


def test_an_explicit_kubeconfig_file_is_used(tmp_path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    assert load_configuration(path).host == "https://192.0.2.10:6443"
    assert load_api_client(str(path)).configuration.host == "https://192.0.2.10:6443"


def test_the_client_makes_one_attempt_per_call(tmp_path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    assert load_configuration(path).retries is False  # the callers retry, one line per failure


def _refused() -> urllib3.exceptions.NewConnectionError:
    try:
        raise ConnectionRefusedError(111, "Connection refused")
    except ConnectionRefusedError as exc:
        try:
            conn = HTTPConnection("127.0.0.1", 1)
            raise urllib3.exceptions.NewConnectionError(conn, f"Failed: {exc}") from exc
        except urllib3.exceptions.NewConnectionError as wrapped:
            return wrapped


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(_refused(), "Connection refused", id="refused"),
        pytest.param(
            urllib3.exceptions.MaxRetryError(None, "/api", _refused()),  # type: ignore[arg-type]
            "Connection refused",
            id="refused, after retries",
        ),
        pytest.param(
            urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out. (timeout=2)"),  # type: ignore[arg-type]
            "read timed out",
            id="read timeout",
        ),
        pytest.param(
            urllib3.exceptions.ProtocolError(
                "Connection aborted.", http.client.RemoteDisconnected("Remote end closed")
            ),
            "Remote end closed",
            id="hung up",
        ),
        pytest.param(
            socket.gaierror(-2, "Name or service not known"), "Name or service not known", id="DNS"
        ),
    ],
)
def test_transport_reason(error, reason) -> None:
    assert transport_reason(error).endswith(reason)


def test_unusable_credentials_are_one_config_error(tmp_path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(
        ConfigError, match=rf"^no usable Kubernetes credentials: no kubeconfig file {missing}$"
    ):
        load_api_client(missing)
    empty = tmp_path / "empty"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"no usable Kubernetes credentials \({empty}\): "):
        load_api_client(empty)


def test_a_context_not_in_the_kubeconfig_is_named(tmp_path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n",
        encoding="utf-8",
    )
    assert load_api_client(kubeconfig, "a").configuration.host == "https://10.0.0.1:6443"
    with pytest.raises(ConfigError, match=rf"\({kubeconfig}, context b\): "):
        load_api_client(kubeconfig, "b")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            '{"kind": "Status", "message": "lease changed"}', "lease changed", id="Status"
        ),
        pytest.param('{"kind": "Status"}', "Conflict", id="Status without message"),
        pytest.param("<html>", "Conflict", id="not JSON"),
        pytest.param(None, "Conflict", id="no body"),
    ],
)
def test_status_message(body, message) -> None:
    assert status_message(_answer(409, "Conflict", body)) == message


def test_read_or_none() -> None:
    def fails(status: int, reason: str):
        def call() -> dict[str, str]:
            raise _answer(status, reason)

        return call

    assert read_or_none(lambda: {"kind": "Lease"}) == {"kind": "Lease"}
    assert read_or_none(fails(404, "Not Found")) is None
    with pytest.raises(ApiException, match="Forbidden"):
        read_or_none(fails(403, "Forbidden"))
