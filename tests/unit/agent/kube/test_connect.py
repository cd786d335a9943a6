"""Connecting to the API: credentials from a kubeconfig file, Status messages, reads of absent
objects."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from agent.errors import ConfigError
from agent.kube.connect import load_api_client, load_configuration, read_or_none, status_message

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


def test_unusable_credentials_are_one_config_error(tmp_path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match=rf"no usable Kubernetes credentials \({missing}\): "):
        load_api_client(missing)


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
