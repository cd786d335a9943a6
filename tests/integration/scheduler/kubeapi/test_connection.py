"""The scheduler's own connection (`scheduler.kubeapi.connection`): kubeconfig and in-cluster
credentials read without the `kubernetes` client, checked against real HTTP(S) servers (TLS with
a client certificate made by openssl), and what is left to the client."""

from __future__ import annotations

import base64
import json
import re
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.errors import ConfigError
from scheduler.errors import ApiError
from scheduler.kubeapi.client import NODES, KubeClient
from scheduler.kubeapi.connection import Connection, _TokenFile, connect

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for who, subject, ext in (("server", "/CN=127.0.0.1", ["-extfile", "san.ext"]),
                              ("client", "/O=system:masters/CN=scheduler", [])):  # fmt: skip
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
                 f"{who}.csr", "-subj", subject, cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", *ext, cwd=d)  # fmt: skip
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


class _Seen:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []


def _server(tls: ssl.SSLContext | None) -> tuple[ThreadingHTTPServer, _Seen]:
    """A server that answers every GET with an empty NodeList and records what it was sent."""
    seen = _Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert() if tls is not None else None  # type: ignore[attr-defined]
            seen.requests.append(
                {"path": self.path, "auth": self.headers.get("Authorization"), "peer": peer}
            )
            body = json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "7"},
                               "items": []}).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def https(pki: Pki) -> Iterator[tuple[str, _Seen]]:
    """An HTTPS server that refuses a client without a certificate its CA signed."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki.server_cert, pki.server_key)
    tls.load_verify_locations(pki.ca)
    tls.verify_mode = ssl.CERT_REQUIRED
    server, seen = _server(tls)
    yield f"https://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def http() -> Iterator[tuple[str, _Seen]]:
    server, seen = _server(None)
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _list_nodes(connection: Connection) -> list[dict[str, Any]]:
    kube = KubeClient(connection, "gputopo-scheduler", "test", timeout=5.0)
    try:
        items, rv = kube.list(NODES)
        assert rv == "7"
        return items
    finally:
        kube.close()


def test_client_certificate_as_data_reaches_a_server_that_requires_it(tmp_path, pki, https):
    host, seen = https
    path = _kubeconfig(
        tmp_path / "config",
        {"server": host, "certificate-authority-data": _b64(pki.ca)},
        {"client-certificate-data": _b64(pki.client_cert),
         "client-key-data": _b64(pki.client_key)},
    )  # fmt: skip
    connection = connect(str(path), 4, environ={})
    assert connection.source == f"kubeconfig {path}"
    assert _list_nodes(connection) == []
    subject = dict(x[0] for x in seen.requests[0]["peer"]["subject"])
    assert subject["commonName"] == "scheduler"
    assert seen.requests[0]["path"] == "/api/v1/nodes"


def test_certificate_files_are_read_relative_to_the_kubeconfig(tmp_path, pki, https):
    host, seen = https
    for f in (pki.ca, pki.client_cert, pki.client_key):
        shutil.copy(f, tmp_path / f.name)
    path = _kubeconfig(
        tmp_path / "config",
        {"server": host, "certificate-authority": "ca.crt"},
        {"client-certificate": "client.crt", "client-key": "client.key", "token": "abc"},
    )
    assert _list_nodes(connect(str(path), 4, environ={})) == []
    assert seen.requests[0]["auth"] == "Bearer abc"


def test_a_server_its_ca_did_not_sign_is_refused(tmp_path, pki, https):
    host, _ = https
    other = tmp_path / "other"
    other.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "o.key", "-out", "o.crt",
             "-days", "2", "-subj", "/CN=other", cwd=other)  # fmt: skip
    path = _kubeconfig(
        tmp_path / "config",
        {"server": host, "certificate-authority": str(other / "o.crt")},
        {"client-certificate-data": _b64(pki.client_cert),
         "client-key-data": _b64(pki.client_key)},
    )  # fmt: skip
    kube = KubeClient(connect(str(path), 4, environ={}), "gputopo-scheduler", "t", timeout=5.0)
    with pytest.raises(ApiError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        kube.list(NODES)
    kube.close()


def test_a_certificate_without_its_key_is_a_config_error(tmp_path, pki, https):
    host, _ = https
    path = _kubeconfig(
        tmp_path / "config",
        {"server": host, "certificate-authority-data": _b64(pki.ca)},
        {"client-certificate-data": _b64(pki.client_cert)},
    )
    with pytest.raises(ConfigError, match=re.escape(f"kubeconfig {path}: a client certificate")):
        connect(str(path), 4, environ={})


def test_a_token_file_is_read_again_once_a_minute(tmp_path):
    token = tmp_path / "token"
    token.write_text("one\n")
    now = [100.0]
    bearer = _TokenFile(token, clock=lambda: now[0])
    token.write_text("two\n")
    now[0] += 59.0
    assert bearer.current() == "one"
    now[0] += 1.0
    assert bearer.current() == "two"


def test_a_service_account_ca_that_cannot_be_loaded_is_named(tmp_path):
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("sa-token\n")
    (account / "ca.crt").write_text("")  # no CA in the file: TLS setup fails, named
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}
    with pytest.raises(ConfigError, match=r"in-cluster ServiceAccount .*ca\.crt"):
        connect(None, 4, environ=environ, service_account=account)


def test_in_cluster_with_a_ca_gives_https_to_the_service_and_the_token(tmp_path, pki):
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("sa-token\n")
    shutil.copy(pki.ca, account / "ca.crt")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = connect(None, 4, environ=environ, service_account=account)
    assert connection.host == "https://10.96.0.1:443"
    assert connection.auth() == {"Authorization": "Bearer sa-token"}
    connection.close()


def test_plain_http_with_a_token_file(tmp_path, http):
    host, seen = http
    (tmp_path / "tok").write_text("file-token")
    path = _kubeconfig(tmp_path / "config", {"server": host}, {"tokenFile": "tok"})
    assert _list_nodes(connect(str(path), 4, environ={})) == []
    assert seen.requests[0]["auth"] == "Bearer file-token"


def test_an_exec_plugin_is_left_to_the_kubernetes_client(tmp_path, http):
    host, _ = http
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true",
                          "interactiveMode": "Never"}}  # fmt: skip
    path = _kubeconfig(tmp_path / "config", {"server": host}, exec_user)
    connection = connect(str(path), 4, environ={})
    assert connection.source == "kubernetes client"
    connection.close()


def test_several_kubeconfig_files_are_merged_by_the_kubernetes_client(tmp_path, http):
    host, seen = http
    a = _kubeconfig(tmp_path / "a", {"server": host}, {"token": "from-a"})
    b = tmp_path / "b"
    b.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config"}))
    connection = connect(None, 4, environ={"KUBECONFIG": f"{a}:{b}"})
    assert connection.source == "kubernetes client"
    assert _list_nodes(connection) == []
    assert seen.requests[0]["auth"] == "Bearer from-a"


def test_the_run_command_imports_no_kubernetes_client():
    code = (
        "import sys, scheduler.cli.run, scheduler.cli.runtime; "
        "bad = sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
