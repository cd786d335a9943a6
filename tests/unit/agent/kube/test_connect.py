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
    context_namespace,
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


def test_unusable_credentials_are_one_config_error_naming_the_file(tmp_path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(
        ConfigError,
        match=rf"^no usable Kubernetes credentials \(kubeconfig {missing}\): no such file$",
    ):
        load_api_client(missing)
    empty = tmp_path / "empty"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=rf"no usable Kubernetes credentials \(kubeconfig {empty}\): "
    ):
        load_api_client(empty)
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^[^\n]*\(kubeconfig {broken}\): [^\n]*line 2[^\n]*$"):
        load_api_client(broken)


def _kubeconfig(path, context: str, server: str):
    path.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n"
        f"clusters: [{{name: c-{context}, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: u-{context}, user: {{token: t}}}}]\n"
        f"contexts: [{{name: {context}, context: {{cluster: c-{context}, user: u-{context}}}}}]\n",
        encoding="utf-8",
    )
    return path


def test_a_context_not_in_the_kubeconfig_is_named(tmp_path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", "a", "https://10.0.0.1:6443")
    assert load_api_client(kubeconfig, "a").configuration.host == "https://10.0.0.1:6443"
    with pytest.raises(ConfigError, match=rf"\(kubeconfig {kubeconfig}, context b\): no context b"):
        load_api_client(kubeconfig, "b")


def test_kubeconfig_lists_files_merged_and_named(tmp_path) -> None:
    first = _kubeconfig(tmp_path / "first", "a", "https://10.0.0.1:6443")
    second = _kubeconfig(tmp_path / "second", "b", "https://10.0.0.2:6443")
    listed = f"{first}:{tmp_path / 'gone'}:{second}"
    environ = {"KUBECONFIG": listed}
    assert load_configuration(None, "b", environ).host == "https://10.0.0.2:6443"
    assert load_configuration(None, "a", environ).host == "https://10.0.0.1:6443"
    with pytest.raises(
        ConfigError, match=rf"\(kubeconfig {listed} from \$KUBECONFIG, context c\): no context c"
    ):
        load_configuration(None, "c", environ)


def test_kubeconfig_names_the_files_it_lists_when_none_exists(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    with pytest.raises(
        ConfigError,
        match=rf"^no usable Kubernetes credentials \(kubeconfig {one} from \$KUBECONFIG\): "
        "no such file$",
    ):
        load_configuration(None, None, {"KUBECONFIG": str(one)})
    with pytest.raises(
        ConfigError, match=rf"\(kubeconfig {one}:{two} from \$KUBECONFIG\): none of these"
    ):
        load_configuration(None, None, {"KUBECONFIG": f"{one}:{two}"})


def test_without_a_pod_or_kubeconfig_both_are_named(tmp_path, monkeypatch) -> None:
    for variable in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=rf"^no usable Kubernetes credentials \(not in a pod; kubeconfig "
        rf"{tmp_path}/\.kube/config\): no such file$",
    ):
        load_configuration(None, None, {})


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


TWO_CONTEXTS = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.10:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts:
- {name: ctx, context: {cluster: c, user: u, namespace: team}}
- {name: bare, context: {cluster: c, user: u}}
current-context: ctx
"""


def test_the_namespace_without_n_is_the_contexts_as_kubectls(tmp_path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(TWO_CONTEXTS)
    absent = tmp_path / "no-serviceaccount"
    assert context_namespace(path, in_cluster_file=absent) == "team"
    assert context_namespace(path, "bare", in_cluster_file=absent) == "default"
    assert context_namespace(path, "unknown", in_cluster_file=absent) == "default"
    assert context_namespace(tmp_path / "missing", in_cluster_file=absent) == "default"
    (tmp_path / "broken").write_text("contexts: [")
    assert context_namespace(tmp_path / "broken", in_cluster_file=absent) == "default"


def test_in_a_pod_the_namespace_is_its_serviceaccounts(tmp_path) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("gputopo-system\n")
    environ = {"HOME": str(tmp_path)}
    assert context_namespace(None, environ=environ, in_cluster_file=namespace_file) == (
        "gputopo-system"
    )
